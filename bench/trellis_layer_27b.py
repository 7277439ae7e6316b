"""Trellis encode time of one 27B-shaped MLP (hidden 5120, intermediate 17408):
gate/up coded along the input dim (axis 1), down_proj along its output dim
(axis 0), L = 12, k = 3, T = 256, plain and with LDLQ, synthetic weights and a
synthetic correlated Hessian. Extrapolates to the 192 MLP tensors (17 Gw) of
Qwen3.8-27B.

    python bench/trellis_layer_27b.py --device cuda [--hidden 5120 --inter 17408]

Writes bench/results/trellis_layer_27b-<device>.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import torch  # noqa: E402
from hostinfo import host  # noqa: E402

from tqbuild.stages.trellis import Geometry, trellis_guarded  # noqa: E402


def hessian(n: int, device: str, seed: int) -> torch.Tensor:
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(2 * n, n, device=device, generator=g)
    x = x @ (torch.eye(n, device=device) + 0.05 * torch.randn(n, n, device=device, generator=g))
    return (x.T @ x).double()


def timed(fn, device: str):
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--hidden", type=int, default=5120)
    ap.add_argument("--inter", type=int, default=17408)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--code", default="mul1")
    ap.add_argument("--out", default=str(HERE / "results"))
    a = ap.parse_args()
    dev = a.device
    g = torch.Generator(device=dev).manual_seed(0)
    res = {"host": host(), "device": dev, "hidden": a.hidden, "inter": a.inter, "k": a.k,
           "code": a.code,
           "L": 12, "T": 256, "tensors": {}}
    # warm-up: kernel libraries built and loaded, cuSOLVER/cuBLAS handles made, on
    # a small tensor, so no timed call pays a first-use cost (the 2026-12-04 run
    # before this warm-up: gate plain 9.1 s with the Viterbi build, LDLQ 0.75 s)
    def geometry(axis: int) -> Geometry:
        return Geometry(L=12, k=a.k, T=256, code=a.code, axis=axis, group=256 if axis else 128)

    for axis in (0, 1):
        wu = torch.randn(512, 512, device=dev, generator=g)
        trellis_guarded(wu, hessian(512, dev, 2), geometry(axis))
    cases = {"gate_proj": ((a.inter, a.hidden), 1, a.hidden),
             "down_proj": ((a.hidden, a.inter), 0, a.inter)}
    for name, (shape, axis, n_in) in cases.items():
        w = 0.02 * torch.randn(*shape, device=dev, generator=g)
        h, t_h = timed(lambda n=n_in: hessian(n, dev, 1), dev)
        geo = geometry(axis)
        plain, t_plain = timed(lambda w=w, geo=geo: trellis_guarded(w, None, geo), dev)
        ldlq, t_ldlq = timed(lambda w=w, h=h, geo=geo: trellis_guarded(w, h, geo), dev)
        n = w.numel()
        rel = lambda r, w=w: float((r.recon - w).norm() / w.norm())  # noqa: E731
        res["tensors"][name] = {
            "shape": list(shape), "axis": axis, "weights": n,
            "plain_seconds": round(t_plain, 2), "plain_weights_per_s": round(n / t_plain),
            "ldlq_seconds": round(t_ldlq, 2), "ldlq_weights_per_s": round(n / t_ldlq),
            "ldlq_method": ldlq.method, "ldlq_events": ldlq.events,
            "plain_rel_error": round(rel(plain), 5), "ldlq_rel_error": round(rel(ldlq), 5)}
        print(json.dumps({name: res["tensors"][name]}), flush=True)
        del w, h, plain, ldlq
    per_layer = 2 * res["tensors"]["gate_proj"]["ldlq_seconds"] + \
        res["tensors"]["down_proj"]["ldlq_seconds"]
    res["ldlq_seconds_per_layer"] = round(per_layer, 1)
    res["ldlq_minutes_64_layers"] = round(64 * per_layer / 60, 1)
    print(json.dumps({k: res[k] for k in ("ldlq_seconds_per_layer", "ldlq_minutes_64_layers")}))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = "cuda" if dev.startswith("cuda") else "cpu"
    (out / f"trellis_layer_27b-{tag}.json").write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
