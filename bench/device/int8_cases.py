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
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from test_trellis_int8 import _cuda_cases, random_packed  # noqa: E402

from tqbuild.runtime import act_int8  # noqa: E402
from tqbuild.runtime import trellis_cuda as tc  # noqa: E402


def cols_attrs(lib: ctypes.CDLL, M: int) -> list[int]:
    out = (ctypes.c_int * 5)()
    rc = lib.tq_gemv_cols_attrs(M, out)
    return [rc, *out]  # rc, registers, max threads, static smem, allowed dynamic, local


def main() -> None:
    rng = np.random.default_rng(11)
    cases = _cuda_cases()
    tc.prebuild(sorted({(c[3], c[1], c[0]) for c in cases}))
    bad = 0
    for i, (code, L, T, k, axis, rows, cols, M, cfg) in enumerate(cases):
        words, scales = random_packed(rng, code, k, L, T, rows, cols)
        n_in, n_out = (cols, rows) if axis == 1 else (rows, cols)
        x = torch.from_numpy(rng.standard_normal((M, n_in)).astype(np.float32))
        x = [x, x.bfloat16(), x.half()][i % 3]
        want = act_int8.matvec_reference(x.float().numpy(), words, scales, code=code, k=k, T=T,
                                         L=L, axis=axis)
        lib = tc.library(k, L, code)
        tc_path = axis == 0 and tc.cols_tc_serves(M, cfg, k=k, L=L)
        per = tc.cols_per(rows, n_out, M, lib, cfg) if axis == 0 and not tc_path else None
        what = f"{i} {code} k{k} L{L} T{T} axis{axis} {rows}x{cols} M{M} {cfg} per={per}"
        try:
            y = tc.matvec(x.cuda(), torch.from_numpy(words.view(np.int32)).cuda(),
                          torch.from_numpy(scales).cuda(), code=code, k=k, T=T, L=L, axis=axis,
                          out_features=n_out, in_features=n_in, cfg=cfg)
            err = np.abs(y.cpu().double().numpy() - want).max() / np.abs(want).max()
            ok = err < 1e-5
            msg = f"err {err:.2e}"
        except RuntimeError as e:
            ok, msg = False, str(e)
        if not ok:
            bad += 1
            smem = lib.tq_gemv_cols_smem(M, per) if per else None
            print("FAIL", what, "smem", smem, msg, "attrs", cols_attrs(lib, M), flush=True)
            if smem:  # the raise asked again, then the case again
                rc = lib.tq_gemv_cols_raise(M, smem)
                try:
                    tc.matvec(x.cuda(), torch.from_numpy(words.view(np.int32)).cuda(),
                              torch.from_numpy(scales).cuda(), code=code, k=k, T=T, L=L,
                              axis=axis, out_features=n_out, in_features=n_in, cfg=cfg)
                    again = "ok"
                except RuntimeError as e:
                    again = str(e)
                print("  raise again", rc, "attrs", cols_attrs(lib, M), "case again:", again,
                      flush=True)
    print(f"{len(cases) - bad} of {len(cases)} cases match the reference", flush=True)


if __name__ == "__main__":
    main()
