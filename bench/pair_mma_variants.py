"""pair_rows_mma's build knobs (runtime/pair_gemv.cu's TQ_PAIR_MMA_*) timed in one process,
next to bf16 cuBLAS and the int8 rows kernel's default instance (ROWS_CFG), on the GPU:

    python bench/pair_mma_variants.py --variants "ACC=2;D=2 ACC=4" [--ks 3,4] [--ms 1,4,8]
        [--shapes 8192x8192,gate] [--tag=-x]   # -> bench/results/pair_mma_variants{tag}.json

Each variant is a library of that kernel alone (-DTQ_PAIR_MMA_ONLY plus its knobs, e.g.
"D=2 ACC=4" → -DTQ_PAIR_MMA_D=2 -DTQ_PAIR_MMA_ACC=4), each of its runs of periods a lane
(pair_cuda.ROWS_MMA_CFGS) timed; µs a call from CUDA graphs over copies
whose working set exceeds 3× the L2 (bench/trellis_matvec.py's timing), every variant on the
same copies. Correctness is tests/test_pair_cuda.py's at the default knobs (and the SIMT
emulator's at each PP: tests/test_pair_rows_mma_host.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from hostinfo import host  # noqa: E402
from pair_gemv import L_PAIR, SHAPES, T  # noqa: E402
from trellis_matvec import bf16_times, graph_time, packed_case  # noqa: E402

from tqbuild.runtime import pair_cuda  # noqa: E402

FLAGS = "TQBUILD_PAIR_FLAGS"


def flags_of(variant: str) -> str:
    return " ".join(["-DTQ_PAIR_MMA_ONLY", *(f"-DTQ_PAIR_MMA_{kv}" for kv in variant.split())])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", required=True, help="';'-separated knob sets, e.g. 'D=2 ACC=4'")
    ap.add_argument("--ks", default="3,4")
    ap.add_argument("--ms", default="1,4,8")
    ap.add_argument("--shapes", default="8192x8192,gate")
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    variants = [v.strip() for v in a.variants.split(";") if v.strip()]
    ms = [int(v) for v in a.ms.split(",")]
    res: dict = {"host": host(), "T": T, "L": L_PAIR, "variants": variants, "cases": []}
    out = HERE / "results" / f"pair_mma_variants{a.tag}.json"
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    g = torch.Generator(device="cuda").manual_seed(0)
    base_flags = os.environ.get(FLAGS, "")
    for sname in a.shapes.split(","):
        out_f, in_f, axis = SHAPES[sname]
        assert axis == 1, "rows shapes only"
        t_bf = bf16_times(out_f, in_f, ms, l2, g)
        for k in (int(v) for v in a.ks.split(",")):
            copies, _ = packed_case(None, k, out_f, in_f, l2, g)
            dims = dict(k=k, T=T, L=L_PAIR, axis=1, out_features=out_f, in_features=in_f)
            for M in ms:
                xm = torch.randn(M, in_f, device="cuda", dtype=torch.bfloat16, generator=g)

                def seconds(cfg, xm=xm, d=dims, cs=copies):
                    return graph_time(lambda: [pair_cuda.matvec(xm, w, sc, cfg=cfg, **d)
                                               for w, sc in cs]) / len(cs)

                os.environ[FLAGS], pair_cuda._libs = base_flags, {}
                c = {"shape": sname, "k": k, "M": M, "bf16_seconds": t_bf[M],
                     "int8_cfg": str(pair_cuda.ROWS_CFG[M]),
                     "int8_seconds": seconds(pair_cuda.ROWS_CFG[M]), "mma_seconds": {}}
                for v in variants:
                    os.environ[FLAGS], pair_cuda._libs = flags_of(v), {}
                    for cfg in pair_cuda.ROWS_MMA_CFGS:
                        c["mma_seconds"][f"{v} pp={cfg[1]}"] = seconds(cfg)
                os.environ[FLAGS], pair_cuda._libs = base_flags, {}
                res["cases"].append(c)
                us = {v: round(t * 1e6, 2) for v, t in c["mma_seconds"].items()}
                print(sname, k, M, "bf16", round(t_bf[M] * 1e6, 2), "int8",
                      round(c["int8_seconds"] * 1e6, 2), us, flush=True)
                out.write_text(json.dumps(res, indent=2) + "\n")
            del copies
    out.write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
