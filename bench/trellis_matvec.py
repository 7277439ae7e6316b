"""M = 1 decode-matvec of packed trellis weights on CUDA (Triton), next to a
bf16 cuBLAS matvec of the same shape.

    python bench/trellis_matvec.py      # -> bench/results/trellis_matvec-cuda.json

Shapes: 8192×8192 and 17408×5120 (gate/up, coded along the input dim) with the
`reduce` kernel, 5120×17408 (down_proj, coded along its output dim) with the
`scatter` kernel, k = 2, 3, 4. Every timing replays a CUDA graph over enough
distinct weight copies that the working set exceeds twice the L2 cache.
Ceilings: the measured copy bandwidth (read + write bytes of a 2 GiB copy) and
the measured int32 add+min rate (bench/trellis_codec.py's kernel, 2 ops per
pair) divided by OPS_PER_WEIGHT, the integer operations the kernel spends
decoding one weight (index math 8, two word loads, shift/or/mask 5, the code
gather, the multiply-add).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from hostinfo import host  # noqa: E402
from trellis_codec import add_compare_rate  # noqa: E402

from tqbuild.kernels.trellis_codes import code_table  # noqa: E402
from tqbuild.runtime.trellis_torch import matvec_triton  # noqa: E402

OPS_PER_WEIGHT = 17
SHAPES = [("8192x8192", 8192, 8192, 1), ("gate 17408x5120", 17408, 5120, 1),
          ("down 5120x17408", 5120, 17408, 0)]


def copy_bandwidth() -> float:
    a = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    b.copy_(a)
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(10):
        b.copy_(a)
    e.record()
    torch.cuda.synchronize()
    return 2 * a.numel() * 10 / (s.elapsed_time(e) / 1000)


def graph_time(fn, n_iter: int = 20) -> float:
    """Seconds per call of fn(), replayed from a CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    g.replay()
    torch.cuda.synchronize()
    st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    st.record()
    for _ in range(n_iter):
        g.replay()
    en.record()
    torch.cuda.synchronize()
    return st.elapsed_time(en) / 1000 / n_iter


def main() -> None:
    dev = "cuda"
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    bw = copy_bandwidth()
    int_pairs = add_compare_rate("int32")
    int_ops = 2 * int_pairs
    table = torch.from_numpy(code_table("1mad", 12).copy()).to(dev)
    res = {"host": host(), "l2_bytes": l2, "copy_bytes_per_s": bw, "int32_ops_per_s": int_ops,
           "ops_per_weight": OPS_PER_WEIGHT, "cases": []}
    g = torch.Generator(device=dev).manual_seed(0)
    for name, out_f, in_f, axis in SHAPES:
        rows, cols = (out_f, in_f) if axis == 1 else (in_f, out_f)
        x = torch.randn(1, in_f, device=dev, dtype=torch.bfloat16, generator=g)
        wb = torch.randn(out_f, in_f, device=dev, dtype=torch.bfloat16, generator=g)
        n_bf = max(2, -(-3 * l2 // (wb.numel() * 2)))
        bfs = [wb.clone() for _ in range(n_bf)]

        def dense(x=x, bfs=bfs):
            return [torch.nn.functional.linear(x, w) for w in bfs]

        t_bf = graph_time(dense) / n_bf
        del bfs, dense
        for k in (2, 3, 4):
            words = torch.randint(-2**31, 2**31 - 1, (rows, cols * k // 32), device=dev,
                                  dtype=torch.int32, generator=g)  # any bits are valid states
            scales = torch.rand(rows, device=dev, generator=g).half() + 0.5
            nbytes = words.numel() * 4 + scales.numel() * 2
            n = max(2, -(-3 * l2 // nbytes))
            copies = [(words.clone(), scales.clone()) for _ in range(n)]
            def packed(x=x, copies=copies, k=k, axis=axis, out_f=out_f, in_f=in_f):
                return [matvec_triton(x, w, s, table, k=k, T=256, L=12, axis=axis,
                                      out_features=out_f, in_features=in_f) for w, s in copies]

            t = graph_time(packed) / n
            weights = out_f * in_f
            gbs = nbytes / t
            int_ceiling_w = int_ops / OPS_PER_WEIGHT  # weights/s the ALUs allow
            case = {"shape": name, "axis": axis, "k": k, "seconds": t,
                    "packed_GB_per_s": gbs / 1e9, "weights_per_s": weights / t,
                    "fraction_of_copy_bw": gbs / bw,
                    "fraction_of_int_ceiling": (weights / t) / int_ceiling_w,
                    "bf16_cublas_seconds": t_bf, "bf16_GB_per_s": wb.numel() * 2 / t_bf / 1e9,
                    "speedup_vs_bf16": t_bf / t, "copies": n}
            case["fraction_of_tighter_ceiling"] = max(case["fraction_of_copy_bw"],
                                                      case["fraction_of_int_ceiling"])
            print(json.dumps(case), flush=True)
            res["cases"].append(case)
            del copies
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "trellis_matvec-cuda.json").write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
