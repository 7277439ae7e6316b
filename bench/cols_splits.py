"""The cols (axis 0, down_proj) kernel's split of its inputs: blocks an SM, rows a
block, and the 8-warp build, next to bf16 cuBLAS of the same shape, on the GPU.

    python bench/cols_splits.py [--ks 2,3,4] [--ms 1,2,4] [--tag=-x]
        # -> bench/results/cols_splits-cuda{tag}.json

The default split fills one wave of blocks, `trellis_cuda.COLS_BPS` an SM
(`cols_split`; 0: the kernel's occupancy at the split's own shared memory).
Before session 22 the occupancy query counted no blocks for the 8B-shaped
down_proj (the kernel was never allowed the shared memory of the whole input),
so the split took one block an SM by accident. Each row here
is one (shape, k, M, cfg) graph-timed over distinct weight copies (> 3× L2),
with the blocks an SM its grid gives; for the default library (since session 24
one block of 16 warps an SM, sharing one quantization of the block's inputs) and
the 8-warp one before it (`-DTQ_COLS_WARPS=8`: up to two blocks an SM).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from hostinfo import host  # noqa: E402
from trellis_gemv import time_int8  # noqa: E402
from trellis_matvec import bf16_times, packed_case  # noqa: E402

from tqbuild.runtime import gpu_info  # noqa: E402
from tqbuild.runtime import trellis_cuda as tc  # noqa: E402

# (name, out_features, in_features): down_proj of Llama-3-8B and of the 27B-like shape
SHAPES = [("down8b 4096x14336", 4096, 14336), ("down 5120x17408", 5120, 17408)]
CODE, L, T = "mul1", 12, 256
NARROW = "-DTQ_COLS_WARPS=8"  # the 8-warp block (the default to session 23)


def cfgs(in_f: int, out_f: int, sms: int) -> list[dict | None]:
    """The default, one and two blocks an SM, and rows a block around them."""
    bx = -(-(out_f // 32) // 32)
    pers = sorted({-(-in_f // (32 * s)) * 32 for s in
                   (sms * 2 // bx, sms * 3 // (2 * bx), sms // bx, sms // (2 * bx))})
    return [None, {"bps": 1}, {"bps": 2}, *({"per": p} for p in pers)]


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--ks", default="2,3,4")
    ap.add_argument("--ms", default="1,2,4")
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    ks = [int(k) for k in a.ks.split(",")]
    ms = [int(m) for m in a.ms.split(",")]
    sms = gpu_info.sm_count(0)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    g = torch.Generator(device="cuda").manual_seed(0)
    res = {"host": host(), "code": CODE, "L": L, "T": T, "sms": sms, "cases": []}
    path = HERE / "results" / f"cols_splits-cuda{a.tag}.json"
    path.parent.mkdir(exist_ok=True)
    for name, out_f, in_f in SHAPES:
        t_bf = bf16_times(out_f, in_f, ms, l2, g)
        for k in ks:
            copies, nbytes = packed_case(None, k, in_f, out_f, l2, g)
            kw = dict(code=CODE, k=k, T=T, L=L, axis=0, out_features=out_f, in_features=in_f)
            for flags in ["", NARROW]:
                os.environ["TQBUILD_GEMV_FLAGS"] = flags
                tc._libs.clear()
                tc._cols_default.cache_clear()
                lib = tc.library(k, L, CODE)
                for m in ms:
                    xm = torch.randn(m, in_f, device="cuda", dtype=torch.bfloat16, generator=g)
                    tcs = [{"tc": True}] if m in tc.COLS_TC_MS and tc.cols_tc_fits(k, L) else []
                    for cfg in [*cfgs(in_f, out_f, sms), *tcs]:
                        # the dp4a cols kernel at every M, and cols_tc where it serves
                        c = {**(cfg or {}), "tc": bool(cfg and cfg.get("tc"))}
                        per = (tc.cols_tc_per(in_f, out_f, c) if c["tc"] else
                               tc.cols_per(in_f, out_f, m, lib, c))
                        blocks = -(-(out_f // 32) // 32) * -(-in_f // per)
                        try:
                            t = time_int8(xm, copies, c, **kw)
                        except RuntimeError as e:  # recorded, the sweep goes on
                            print(json.dumps({"shape": name, "k": k, "M": m, "cfg": cfg,
                                              "per": per, "error": str(e)}), flush=True)
                            continue
                        row = {"shape": name, "k": k, "M": m, "flags": flags, "cfg": cfg,
                               "per": per, "blocks": blocks,
                               "occupancy": None if c["tc"] else lib.tq_gemv_cols_occupancy(m, per),
                               "seconds": t, "bf16_cublas_seconds": t_bf[m],
                               "speedup_vs_bf16": t_bf[m] / t,
                               "packed_GB_per_s": nbytes / t / 1e9}
                        res["cases"].append(row)
                        print(json.dumps(row), flush=True)
                        path.write_text(json.dumps(res, indent=2) + "\n")
            del copies
    os.environ["TQBUILD_GEMV_FLAGS"] = ""
    tc._libs.clear()


if __name__ == "__main__":
    main()
