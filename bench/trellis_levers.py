"""Issue 21's levers on issue 21's exact W and H (full size, on the GPU), each
next to the plain L = 12 baseline and exllamav3's recorded proxies:

    python bench/trellis_levers.py [--ks 2,3,4] [--shapes gate,down]

W = 0.02·randn(out, in) on a CUDA generator (seed 10 gate / 11 down); H = XᵀX,
X = randn(rows, n) @ (I + 0.05·randn(n, n)) in float32 on the GPU (one
generator, seed 20 / 21; rows 16384 for n = 5120, 34816 for n = 17408), passed
as float64. Proxy tr(EHEᵀ)/tr(WHWᵀ) and relative MSE in the original basis.

Arms (alpha and refit as the build runs them, `trellis: {scale_alpha, refit}`):
L = 12 / 16; `ax0 gN` (code along axis 0 — the output dim — with LDLQ
feeding the error back every N input columns: for the gate-like shape this
replaces axis 1, whose 256-weight row sequences make every LDLQ step 256
columns wide; the down-like shape is coded along axis 0 already, in steps of
128 by default); `refit` (Hessian-weighted scale refit after coding,
stages/trellis_refit.py); `damp` (LDLQ damping × mean diag H); `alpha` (every
sequence scale × alpha: the code's unit-variance assumption vs the fed-back
sequence's variance); `had_in` / `had_both` (random signs + 128-block
Hadamard on the input side / on both sides, per tensor, undone exactly before
the proxy is taken — what exllamav3 does per tensor; a runtime would have to
apply it online). Writes bench/results/trellis_levers-cuda.json.
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

from tqbuild.kernels.hadamard import sylvester  # noqa: E402
from tqbuild.kernels.trellis_codes import CODES  # noqa: E402
from tqbuild.stages.guard import proxy_loss  # noqa: E402
from tqbuild.stages.trellis import Geometry, trellis_guarded  # noqa: E402

EXL3 = {("gate", 2): 0.0351, ("gate", 3): 0.00824, ("gate", 4): 0.00207,
        ("down", 2): 0.0328, ("down", 3): 0.00767, ("down", 4): 0.00192}
SHAPES = {"gate": (17408, 5120, 1, 10, 20), "down": (5120, 17408, 0, 11, 21)}


def inputs(name: str, dev: str, small: bool, kind: str = "correlated"
           ) -> tuple[torch.Tensor, torch.Tensor]:
    out, inp, _, ws, hs = SHAPES[name]
    if small:  # --small: a smoke test of this script
        out, inp = (1024, 256) if name == "gate" else (256, 1024)
    w = 0.02 * torch.randn(out, inp, device=dev, generator=torch.Generator(dev).manual_seed(ws))
    g = torch.Generator(dev).manual_seed(hs)
    rows = 16384 if inp == 5120 else 34816 if inp == 17408 else 4 * inp
    x = torch.randn(rows, inp, device=dev, generator=g)
    if kind == "conditioned":  # a decaying spectrum, condition number 1e4
        x = x * torch.logspace(0, -2, inp, device=dev)[None, :]
    else:
        mix = torch.eye(inp, device=dev) + 0.05 * torch.randn(inp, inp, device=dev, generator=g)
        x = x @ mix
    return w, (x.T @ x).double()


def block_hadamard(n: int, seed: int, dev: str) -> torch.Tensor:
    """Orthogonal [n, n]: random signs then a 128-block Sylvester Hadamard."""
    h = torch.tensor(sylvester(128), dtype=torch.float64, device=dev) / 128 ** 0.5
    signs = torch.randint(0, 2, (n,), generator=torch.Generator().manual_seed(seed)) * 2 - 1
    blocks = torch.block_diag(*[h] * (n // 128))
    return signs.to(dev, torch.float64)[:, None] * blocks


def run(w, h, geo: Geometry, damp: float, had: str) -> dict:
    """One arm; alpha and refit ride in `geo` (stages/trellis.Geometry)."""
    dev = w.device.type
    W, H = w.double(), h
    Ri = Ro = None
    if had in ("in", "both"):
        Ri = block_hadamard(w.shape[1], 1, dev)
        W, H = W @ Ri, Ri.T @ H @ Ri
    if had == "both":
        Ro = block_hadamard(w.shape[0], 2, dev)
        W = Ro.T @ W
    if dev == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    r = trellis_guarded(W.float(), H, geo, damp=damp)
    if dev == "cuda":
        torch.cuda.synchronize()
    secs = time.perf_counter() - t
    q = r.recon.double()
    if Ro is not None:
        q = Ro @ q
    if Ri is not None:
        q = q @ Ri.T
    ref = float(((w.double() @ h) * w.double()).sum())
    return {"proxy": proxy_loss(w, q.float(), h) / ref,
            "rel_mse": float((q - w.double()).pow(2).sum() / w.double().pow(2).sum()),
            "seconds": round(secs, 2), "method": r.method}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ks", default="2,3,4")
    ap.add_argument("--shapes", default="gate,down")
    ap.add_argument("--arms", default="all")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--hessian", choices=("correlated", "conditioned"), default="correlated")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "trellis_levers-cuda.json")
    a = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    arms = {  # name -> (L, damp, alpha, refit, had, axis, group); axis None = the shape's
        "L12": (12, 0.01, 1.0, False, "none", None, 128),
        "L16": (16, 0.01, 1.0, False, "none", None, 128),
        "L16 refit": (16, 0.01, 1.0, True, "none", None, 128),
        "L16 damp 0.025": (16, 0.025, 1.0, False, "none", None, 128),
        "L16 damp 0.003": (16, 0.003, 1.0, False, "none", None, 128),
        "L16 alpha 0.95": (16, 0.01, 0.95, False, "none", None, 128),
        "L16 alpha 1.05": (16, 0.01, 1.05, False, "none", None, 128),
        "L16 had_in": (16, 0.01, 1.0, False, "in", None, 128),
        "L16 had_both": (16, 0.01, 1.0, False, "both", None, 128),
        "L16 alpha 1.10": (16, 0.01, 1.10, False, "none", None, 128),
        "L16 alpha 1.15": (16, 0.01, 1.15, False, "none", None, 128),
        "L16 alpha 1.10 refit": (16, 0.01, 1.10, True, "none", None, 128),
        "L12 alpha 1.05": (12, 0.01, 1.05, False, "none", None, 128),
        "L12 alpha 1.10": (12, 0.01, 1.10, False, "none", None, 128),
        "L12 alpha 1.15": (12, 0.01, 1.15, False, "none", None, 128),
        "L12 ax0 g16": (12, 0.01, 1.0, False, "none", 0, 16),
        "L12 ax0 g16 alpha 1.10 refit": (12, 0.01, 1.10, True, "none", 0, 16),
        "L16 ax0 g32": (16, 0.01, 1.0, False, "none", 0, 32),
        "L16 ax0 g16": (16, 0.01, 1.0, False, "none", 0, 16),
        "L16 ax0 g16 alpha 1.10": (16, 0.01, 1.10, False, "none", 0, 16),
        "L16 ax0 g16 alpha 1.10 refit": (16, 0.01, 1.10, True, "none", 0, 16),
        "L16 ax0 g8 alpha 1.10 refit": (16, 0.01, 1.10, True, "none", 0, 8),
        "L16 ax0 g4 alpha 1.10 refit": (16, 0.01, 1.10, True, "none", 0, 4),
        "L12 ax0 g4 alpha 1.10 refit": (12, 0.01, 1.10, True, "none", 0, 4),
        "L16 ax0 g16 alpha 1.10 refit 3inst": (16, 0.01, 1.10, True, "none", 0, 16),
        "L16 ax0 g4 alpha 1.10 refit 3inst": (16, 0.01, 1.10, True, "none", 0, 4),
        "L16 ax0 g16 alpha 1.05 refit": (16, 0.01, 1.05, True, "none", 0, 16),
        "L12 ax0 g16 mul1": (12, 0.01, 1.0, False, "none", 0, 16),
        "L16 ax0 g16 alpha 1.10 refit mul1": (16, 0.01, 1.10, True, "none", 0, 16),
        "L16 ax0 g4 alpha 1.10 refit mul1": (16, 0.01, 1.10, True, "none", 0, 4),
        "L16 ax0 g4 alpha 1.05 refit mul1": (16, 0.01, 1.05, True, "none", 0, 4),
        "L16 ax0 g4 alpha 1.15 refit mul1": (16, 0.01, 1.15, True, "none", 0, 4),
        "L16 ax0 g2 alpha 1.10 refit mul1": (16, 0.01, 1.10, True, "none", 0, 2),
        "L16 ax0 g4 alpha 1.10 refit mul1 T512": (16, 0.01, 1.10, True, "none", 0, 4),
        "L16 ax0 g4 damp 0.003 alpha 1.10 refit mul1": (16, 0.003, 1.10, True, "none", 0, 4),
    }
    if a.arms != "all":
        arms = {k: v for k, v in arms.items() if k in a.arms.split(";")}
    res: dict = {"host": host(), "rows": [], "exl3": {f"{s} k{k}": v for (s, k), v in
                                                       EXL3.items()}}
    for name in a.shapes.split(","):
        w, h = inputs(name, dev, a.small, a.hessian)
        axis = SHAPES[name][2]
        for k in (int(x) for x in a.ks.split(",")):
            for arm, (L, damp, alpha, refit, had, ax, group) in arms.items():
                ax = axis if ax is None else ax
                code = next((t for t in arm.split() if t in CODES), "1mad")
                T = next((int(t[1:]) for t in arm.split() if t[0] == "T" and t[1:].isdigit()), 256)
                geo = Geometry(L=L, k=k, T=T, code=code, axis=ax,
                               group=256 if ax == 1 else group, alpha=alpha, refit=refit)
                row = {"tensor": name, "hessian": a.hessian, "k": k, "arm": arm,
                       **run(w, h, geo, damp, had)}
                if a.hessian == "correlated":  # exllamav3 was run on this H only
                    row["vs_exl3"] = row["proxy"] / EXL3[(name, k)] - 1
                print(json.dumps(row), flush=True)
                res["rows"].append(row)
                a.out.parent.mkdir(parents=True, exist_ok=True)
                a.out.write_text(json.dumps(res, indent=1) + "\n")
        del w, h


if __name__ == "__main__":
    main()
