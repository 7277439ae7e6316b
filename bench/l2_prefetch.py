"""Does prefetching the next matmul's weights into L2 speed up a decode step?

    python bench/l2_prefetch.py [--layers 32] [--tag=-x]   # -> results/l2_prefetch-cuda{tag}.json

An 8B-shaped chain of tq-build's decode kernels (per layer: fused q/k/v and o on
the affine 4-bit CUDA kernel, gate/up stacked and down on the k = 3 trellis
kernels, as `decode_8b.py`'s q3-fused-cu), replayed from one CUDA graph, with
and without an L2 prefetch (bench/l2_prefetch.cu) of the weights of the op
`dist` ahead: on a side stream beside the current op, or launched on the main
stream just before it; `fill` puts two small elementwise kernels between ops
(as the norms and RoPE sit between a model's linears). Per op type: the same
module repeated (its weights L2-hot where they fit) vs distinct copies (cold).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from decode_8b import affine_tq, trellis  # noqa: E402
from hostinfo import host  # noqa: E402
from trellis_matvec import graph_time  # noqa: E402

from tqbuild.kernels import nvcc  # noqa: E402


def buffers(m) -> list[torch.Tensor]:
    names = ("weight", "scales", "biases") if hasattr(m, "biases") else ("words", "scales")
    return [getattr(m, n) for n in names]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    lib = nvcc.build(HERE / "l2_prefetch.cu", [])
    lib.l2_prefetch.argtypes = [ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_int,
                                ctypes.c_void_p, ctypes.c_void_p]
    sink = torch.zeros(4, dtype=torch.int32, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(0)
    H, I = 4096, 14336
    layers = []
    for _ in range(a.layers):
        layers.append([("qkv", affine_tq(6144, H, g)), ("o", affine_tq(H, H, g)),
                       ("gate_up", trellis(2 * I, H, 1, g)), ("down", trellis(H, I, 0, g))])
    ops = [op for layer in layers for op in layer]
    xs = {H: torch.randn(1, H, device="cuda", dtype=torch.bfloat16),
          I: torch.randn(1, I, device="cuda", dtype=torch.bfloat16)}
    filler = torch.randn(1, H, device="cuda", dtype=torch.bfloat16)
    fbuf = torch.empty_like(filler)

    def prefetch(m, method: int, stream) -> None:
        for t in buffers(m):
            rc = lib.l2_prefetch(t.data_ptr(), t.numel() * t.element_size(), method,
                                 sink.data_ptr(), ctypes.c_void_p(stream.cuda_stream))
            assert rc == 0, rc

    def chain(mode: str = "", method: int = 0, dist: int = 1, fill: bool = False):
        side = torch.cuda.Stream() if mode == "side" else None

        def run() -> None:
            for j, (_, m) in enumerate(ops):
                nxt = ops[j + dist][1] if j + dist < len(ops) else None
                if nxt is not None and mode == "inline":
                    prefetch(nxt, method, torch.cuda.current_stream())
                if nxt is not None and mode == "side":
                    side.wait_stream(torch.cuda.current_stream())
                    prefetch(nxt, method, side)
                m(xs[m.in_features])
                if fill:
                    torch.mul(filler, 1.001, out=fbuf)
                    torch.add(fbuf, filler, out=fbuf)
            if side is not None:
                torch.cuda.current_stream().wait_stream(side)
        return graph_time(run)

    res: dict = {"host": host(), "layers": a.layers, "chain_ms": {}, "per_op_us": {}}
    for fill in (False, True):
        for mode, method, dist in (("", 0, 1), ("inline", 0, 1), ("side", 0, 1),
                                   ("side", 0, 2), ("inline", 0, 2), ("side", 1, 1),
                                   ("side", 1, 2)):
            name = (mode or "none") + (f"-{'bulk' if method == 0 else 'ld'}-d{dist}"
                                       if mode else "") + ("-fill" if fill else "")
            t = chain(mode, method, dist, fill)
            res["chain_ms"][name] = t * 1e3
            print(f"{name:24s} {t * 1e3:8.3f} ms a chain ({t * 1e6 / a.layers:7.1f} µs a layer)",
                  flush=True)
    for i, kind in enumerate(("qkv", "o", "gate_up", "down")):
        mods = [layer[i][1] for layer in layers]
        x = xs[mods[0].in_features]
        cold = graph_time(lambda mods=mods, x=x: [m(x) for m in mods]) / len(mods)
        hot = graph_time(lambda mods=mods, x=x: [mods[0](x) for _ in mods]) / len(mods)
        nbytes = sum(t.numel() * t.element_size() for t in buffers(mods[0]))
        res["per_op_us"][kind] = {"cold": cold * 1e6, "hot": hot * 1e6, "bytes": nbytes}
        print(f"{kind:8s} {nbytes / 1e6:6.1f} MB cold {cold * 1e6:6.2f} µs hot {hot * 1e6:6.2f} µs",
              flush=True)
    out = HERE / "results" / f"l2_prefetch-cuda{a.tag}.json"
    out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
