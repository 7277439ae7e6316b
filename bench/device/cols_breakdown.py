"""Where the cols (axis 0) matvec's time goes on the GPU: the whole call vs
its split-sum alone (down 5120×17408, k = 3, 1MAD, CUDA graphs, > 2×L2)."""

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1]))
sys.path.insert(0, str(Path(__file__).parents[2]))
from trellis_matvec import copies_for, graph_time  # noqa: E402

from tqbuild.runtime import trellis_triton as tk  # noqa: E402

out_f, in_f, k = 5120, 17408, 3
l2 = torch.cuda.get_device_properties(0).L2_cache_size
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(1, in_f, device="cuda", dtype=torch.bfloat16, generator=g)
w = torch.randint(-2**31, 2**31 - 1, (in_f, out_f * k // 32), device="cuda", dtype=torch.int32,
                  generator=g)
s = torch.rand(in_f, device="cuda", generator=g).half() + 0.5
copies = [(w.clone(), s.clone()) for _ in range(copies_for(w.numel() * 4, l2))]
res = {}
for cfg in ({}, {"BI": 8, "num_warps": 8, "splits": 64}, {"splits": 32}, {"splits": 256}):
    c = tk.cols_cfg(in_f, out_f // 32, 1, cfg)
    full = graph_time(lambda c=c: [tk.matvec(x, a, b, code="1mad", k=k, T=256, L=12, axis=0,
                                             out_features=out_f, in_features=in_f, cfg=c)
                                   for a, b in copies]) / len(copies)
    parts = [torch.randn(c["splits"], 1, out_f, device="cuda") for _ in copies]
    ssum = graph_time(lambda parts=parts: [p.sum(0) for p in parts]) / len(parts)
    res[json.dumps(c)] = {"call_us": full * 1e6, "split_sum_us": ssum * 1e6}
    print(json.dumps(c), round(full * 1e6, 1), round(ssum * 1e6, 1), flush=True)
Path(__file__).parents[1].joinpath("results", "trellis_cols_breakdown-cuda.json").write_text(
    json.dumps(res, indent=2) + "\n")
