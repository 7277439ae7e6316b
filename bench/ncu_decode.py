"""The decode kernels once each, for Nsight Compute to read (no timing here):

    ncu --clock-control none -k regex:'pair_|rows|cols|affine' --section SpeedOfLight \
        --section WarpStateStats --section Occupancy python bench/ncu_decode.py [--k 3]

Runs, M = 1 (or --m), random packed weights: the pair rows kernel on 8192 × 8192 (its
default, the tensor-core instance — its run of periods a lane from $TQ_NCU_PP — and the int8
instance), the pair
cols kernel (one-warp walkers, int8 and packed-fp16 walks) and the mul1 cols kernel on
5120 × 17408, the mul1 rows kernel on 8192 × 8192, and the 4-bit affine kernel on the 8B
model's q/k/v (6144 × 4096) — each twice (the second is the one to read: its code and tables
are warm).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent.parent))

from tqbuild.runtime import affine_cuda, pair_cuda  # noqa: E402
from tqbuild.runtime import trellis_cuda as tc  # noqa: E402

T = 256


def packed(rows: int, cols: int, k: int, g: torch.Generator):
    words = torch.randint(-2**31, 2**31 - 1, (rows, cols * k // 32), device="cuda",
                          dtype=torch.int32, generator=g)
    return words, (torch.rand(rows, device="cuda", generator=g) + 0.5).half()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--m", type=int, default=1, help="tokens (rows of x)")
    ap.add_argument("--only", default="", help="comma-separated of pair_rows (the default "
                    "cfg), pair_rows_mma, pair_rows_int8 (ROWS_CFG's), mul1_rows, "
                    "pair_cols_int8, pair_cols_fp16, mul1_cols, affine (default: all)")
    a = ap.parse_args()
    k, M = a.k, a.m
    g = torch.Generator(device="cuda").manual_seed(0)
    runs: dict = {}
    x = torch.randn(M, 8192, device="cuda", dtype=torch.bfloat16, generator=g)
    w, s = packed(8192, 8192, k, g)
    d = dict(k=k, T=T, axis=1, out_features=8192, in_features=8192)
    runs["pair_rows"] = lambda: pair_cuda.matvec(x, w, s, L=16, **d)
    mma = (0, int(os.environ.get("TQ_NCU_PP", pair_cuda.rows_mma(k, T)[1])), 512)  # its run (pp)
    runs["pair_rows_mma"] = lambda: pair_cuda.matvec(x, w, s, L=16, cfg=mma, **d)
    runs["pair_rows_int8"] = lambda: pair_cuda.matvec(x, w, s, L=16, cfg=pair_cuda.ROWS_CFG[M],
                                                      **d)
    runs["mul1_rows"] = lambda: tc.matvec(x, w, s, code="mul1", L=12, **d)
    xc = torch.randn(M, 17408, device="cuda", dtype=torch.bfloat16, generator=g)
    wc, sc = packed(17408, 5120, k, g)
    dc = dict(k=k, T=T, axis=0, out_features=5120, in_features=17408)
    for name, half in (("pair_cols_int8", 0), ("pair_cols_fp16", 1)):
        runs[name] = lambda half=half: pair_cuda.matvec(xc, wc, sc, L=16, cfg=(1, half), **dc)
    runs["mul1_cols"] = lambda: tc.matvec(xc, wc, sc, code="mul1", L=12, **dc)
    xa = torch.randn(M, 4096, device="cuda", dtype=torch.bfloat16, generator=g)
    wa = torch.randint(-2**31, 2**31 - 1, (6144, 4096 // 8), device="cuda", dtype=torch.int32,
                       generator=g)
    sa = torch.rand(6144, 4096 // 64, device="cuda", generator=g).bfloat16()
    ba = torch.rand(6144, 4096 // 64, device="cuda", generator=g).bfloat16()
    runs["affine"] = lambda: affine_cuda.matmul(xa, wa, sa, ba, 4, 64, 6144)
    if a.only:
        runs = {n: runs[n] for n in a.only.split(",")}
    for f in runs.values():
        f()
        f()
    torch.cuda.synchronize()
    print("ran", len(runs), "decode calls twice")


if __name__ == "__main__":
    main()
