"""Every case of tests/test_trellis_int8.py's CUDA reference test, run to the end:
one line a case that fails (its launch error or its error against the reference) with
the kernel's attributes, and a count. For builds under test (TQBUILD_GEMV_FLAGS), where
the test stops at its first failure.   python bench/device/int8_cases.py
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from test_trellis_int8 import _cuda_cases, case_data, cuda_matvec, rel_err  # noqa: E402

from tqbuild.runtime import trellis_cuda as tc  # noqa: E402


def cols_attrs(lib: ctypes.CDLL, M: int) -> list[int]:
    out = (ctypes.c_int * 5)()
    rc = lib.tq_gemv_cols_attrs(M, out)
    return [rc, *out]  # rc, registers, max threads, static smem, allowed dynamic, local


def mismatch(x, words, scales, case, want) -> str:
    """The case's launch error or error against the reference ("" where it matches)."""
    try:
        err = rel_err(cuda_matvec(x.cuda(), words, scales, case), want)
    except RuntimeError as e:
        return str(e)
    return "" if err < 1e-5 else f"err {err:.2e}"


def main() -> None:
    rng = np.random.default_rng(11)
    cases = _cuda_cases()
    tc.prebuild(sorted({(c[3], c[1], c[0]) for c in cases}))
    bad = 0
    for i, case in enumerate(cases):
        code, L, T, k, axis, rows, cols, M, cfg = case
        words, scales, x, want = case_data(rng, i, case)
        n_out = rows if axis == 1 else cols
        lib = tc.library(k, L, code)
        tc_path = axis == 0 and tc.cols_tc_serves(M, cfg, k=k, L=L)
        per = tc.cols_per(rows, n_out, M, lib, cfg) if axis == 0 and not tc_path else None
        what = f"{i} {code} k{k} L{L} T{T} axis{axis} {rows}x{cols} M{M} {cfg} per={per}"
        msg = mismatch(x, words, scales, case, want)
        if msg:
            bad += 1
            smem = lib.tq_gemv_cols_smem(M, per) if per else None
            print("FAIL", what, "smem", smem, msg, "attrs", cols_attrs(lib, M), flush=True)
            if smem:  # the raise asked again, then the case again
                rc = lib.tq_gemv_cols_raise(M, smem)
                again = mismatch(x, words, scales, case, want) or "ok"
                print("  raise again", rc, "attrs", cols_attrs(lib, M), "case again:", again,
                      flush=True)
    print(f"{len(cases) - bad} of {len(cases)} cases match the reference", flush=True)


if __name__ == "__main__":
    main()
