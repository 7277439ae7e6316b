"""Trellis codec: QTIP's MSE tables reproduced, and Viterbi encode throughput.

    python bench/trellis_codec.py [--device cuda] [--sequences 4096]

Writes bench/results/trellis_codec-<device>.json: per (L, k, code) the MSE
on i.i.d. N(0, 1) (tail-biting, T = 256), the published value, seconds and
weights/s. On CUDA it also measures the GPU's add-compare rate (int32 and
float32 `min(a + b, c)` chains in a Triton kernel) and reports each
encoder's fraction of the roofline 2^(L+k) add-compares per weight.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from hostinfo import host  # noqa: E402

from tqbuild.kernels.codec_check import codec_check  # noqa: E402

CASES = [(12, k, c) for k in (1, 2, 3, 4) for c in ("1mad", "3inst")] + \
        [(16, 2, "1mad"), (16, 2, "3inst")]
# --codes: the code comparison (issue 21), every code at L = 12 and 16, k = 2..4
CODE_CASES = [(L, k, c) for L in (12, 16) for k in (2, 3, 4) for c in ("1mad", "3inst", "mul1")]


def add_compare_rate(dtype: str) -> float:
    """Measured add-compare pairs per second on the GPU (Triton, register-resident)."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def chains(out_ptr, n_iter, IS_INT: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        if IS_INT:
            a = offs
            b = offs + 1
            c = offs + 2
            d = offs + 3
            e = offs ^ 5
            f = offs ^ 7
            g = offs ^ 11
            h = offs ^ 13
            inc = offs & 3
        else:
            a = offs.to(tl.float32)
            b = a + 1.0
            c = a + 2.0
            d = a + 3.0
            e = a * 0.5
            f = a * 0.25
            g = a * 0.125
            h = a * 0.0625
            inc = (offs & 3).to(tl.float32) + 1.0
        for _ in range(n_iter):  # 8 independent add-compare chains
            a = tl.minimum(a + inc, h)
            b = tl.minimum(b + inc, a)
            c = tl.minimum(c + inc, b)
            d = tl.minimum(d + inc, c)
            e = tl.minimum(e + inc, d)
            f = tl.minimum(f + inc, e)
            g = tl.minimum(g + inc, f)
            h = tl.minimum(h + inc, g)
        tl.store(out_ptr + offs, a + b + c + d + e + f + g + h)

    block, grid, n_iter = 256, 132 * 64, 4096
    out = torch.empty(block * grid, device="cuda",
                      dtype=torch.int32 if dtype == "int32" else torch.float32)
    chains[(grid,)](out, n_iter, IS_INT=dtype == "int32", BLOCK=block)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        chains[(grid,)](out, n_iter, IS_INT=dtype == "int32", BLOCK=block)
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1000 / 5
    return block * grid * n_iter * 8 / seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--sequences", type=int, default=4096)
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--codes", action="store_true", help="the code comparison cases")
    args = ap.parse_args()
    res: dict = {"host": host(), "device": args.device, "sequences": args.sequences, "T": 256,
                 "cases": []}
    if args.device.startswith("cuda"):
        res["add_compare_per_s"] = {d: add_compare_rate(d) for d in ("int32", "float32")}
    for L, k, code in CODE_CASES if args.codes else CASES:
        r = codec_check(L, k, code, 256, args.sequences, args.device)
        if "add_compare_per_s" in res:
            ops = 2 ** (L + k)
            r["roofline_weights_per_s"] = {d: rate / ops
                                           for d, rate in res["add_compare_per_s"].items()}
            r["fraction_of_int32_roofline"] = r["weights_per_s"] / (
                res["add_compare_per_s"]["int32"] / ops)
        print(json.dumps(r), flush=True)
        res["cases"].append(r)
    tag = ("cuda" if args.device.startswith("cuda") else "cpu") + ("-codes" if args.codes else "")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"trellis_codec-{tag}.json").write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
