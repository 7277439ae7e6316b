"""Trellis quality levers, each alone, on issue 21's synthetic W and H (scaled down
to run on a CPU): proxy tr(EHEᵀ)/tr(WHWᵀ) and relative weight MSE.

    python bench/trellis_quality.py [--device cpu|cuda] [--scale 0.1] [--l16-ks 2]

W = 0.02·randn(out, in); H = XᵀX with X = randn(rows, n) @ (I + 0.05·randn(n, n))
("correlated", nearly singular, as in the issue) or X = randn(rows, n)·diag of a
decaying spectrum ("conditioned"); gate-like (out > in, coded along the input,
axis 1) and down-like (in > out, coded along the output, axis 0), each
`--scale` × the issue's 17408 × 5120. Levers: L = 16 instead of 12, 3INST
instead of 1MAD, scales refit after coding (stages/trellis_refit.py). Writes
bench/results/trellis_quality-<device>.json.
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

from tqbuild.kernels.viterbi import code_tensor  # noqa: E402
from tqbuild.stages.guard import proxy_loss  # noqa: E402
from tqbuild.stages.trellis import Geometry, trellis_guarded  # noqa: E402
from tqbuild.stages.trellis_refit import refit_scales  # noqa: E402


def hessian(n: int, rows: int, kind: str, g: torch.Generator, dev: str) -> torch.Tensor:
    x = torch.randn(rows, n, generator=g).to(dev)
    if kind == "correlated":
        x = x @ (torch.eye(n) + 0.05 * torch.randn(n, n, generator=g)).to(dev)
    else:
        x = x * torch.logspace(0, -2, n).to(dev)[None, :]
    return (x.T @ x).double()


def measure(w, h, geo: Geometry) -> dict:
    t = time.perf_counter()
    r = trellis_guarded(w, h, geo, damp=0.01)
    secs = time.perf_counter() - t
    ref = float(((w.double() @ h) * w.double()).sum())
    codes = code_tensor(geo.code, geo.L, w.device)[r.states]
    codes = codes if geo.axis == 1 else codes.T
    new = refit_scales(w, codes, r.scales, h, geo.axis)
    refit = codes * (new.float()[:, None] if geo.axis == 1 else new.float()[None, :])
    wn = float(w.double().pow(2).sum())
    return {"proxy": proxy_loss(w, r.recon, h) / ref,
            "proxy_refit": proxy_loss(w, refit, h) / ref,
            "rel_mse": float((r.recon.double() - w.double()).pow(2).sum()) / wn,
            "rel_mse_refit": float((refit.double() - w.double()).pow(2).sum()) / wn,
            "seconds": round(secs, 2), "method": r.method}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--l16-ks", default="2")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--codes", default="1mad,3inst", help="codes at L = 12")
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    dev = a.device
    big, small = (max(256, int(v * a.scale) // 256 * 256) for v in (17408, 5120))
    res: dict = {"host": host(), "device": dev, "scale": a.scale, "rows": []}
    l16 = [int(k) for k in a.l16_ks.split(",") if k]
    for name, out, inp, axis in (("gate-like", big, small, 1), ("down-like", small, big, 0)):
        for kind in ("correlated", "conditioned"):
            g = torch.Generator().manual_seed(10 + axis)
            w = (0.02 * torch.randn(out, inp, generator=g)).to(dev)
            h = hessian(inp, 4 * inp, kind, torch.Generator().manual_seed(20 + axis), dev)
            arms = [(12, c, k) for c in a.codes.split(",") for k in (2, 3, 4)]
            arms += [(16, "1mad", k) for k in l16]
            for L, code, k in arms:
                geo = Geometry(L=L, k=k, T=256, code=code, axis=axis, group=128)
                row = {"tensor": name, "shape": [out, inp], "hessian": kind, "L": L,
                       "code": code, "k": k, **measure(w, h, geo)}
                print(json.dumps(row), flush=True)
                res["rows"].append(row)
                out_dir = Path(a.out)
                out_dir.mkdir(parents=True, exist_ok=True)
                dst = out_dir / f"trellis_quality-{dev}{a.tag}.json"
                dst.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
