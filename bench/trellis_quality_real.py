"""Trellis levers on SmolLM2's real MLP tensors and Hessians (issue 21):

    python bench/smollm2_hessians.py DIR          # once: W (after the folds) + H
    python bench/trellis_quality_real.py DIR [--arms A;B] [--layers 0,15] [--k 3]

Per tensor, each arm's proxy tr(EHEᵀ)/tr(WHWᵀ) and relative MSE, next to the
shipped L = 12 baseline (gate/up along the input dim, down along its output
dim in LDLQ steps of 128). Writes bench/results/trellis_quality-smollm2-<device>.json
(or --out).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import torch  # noqa: E402
from hostinfo import host  # noqa: E402

from tqbuild.kernels.trellis_codes import CODES  # noqa: E402
from tqbuild.stages.guard import proxy_loss  # noqa: E402
from tqbuild.stages.trellis import Geometry, trellis_guarded  # noqa: E402

# name -> (L, axis (None = the shipped one), LDLQ group, alpha, refit)
ARMS = {
    "L12": (12, None, 128, 1.0, False),
    "L12 ax0 g16": (12, 0, 16, 1.0, False),
    "L12 ax0 g16 alpha 1.10": (12, 0, 16, 1.10, False),
    "L12 ax0 g16 refit": (12, 0, 16, 1.0, True),
    "L12 ax0 g16 alpha 1.10 refit": (12, 0, 16, 1.10, True),
    "L16 ax0 g16 alpha 1.10 refit": (16, 0, 16, 1.10, True),
    "L12 ax0 g4 alpha 1.10 refit": (12, 0, 4, 1.10, True),
    "L16 ax0 g4 alpha 1.10 refit": (16, 0, 4, 1.10, True),
    "L12 ax0 g16 alpha 1.05 refit": (12, 0, 16, 1.05, True),
    "L12 ax0 g16 alpha 1.15 refit": (12, 0, 16, 1.15, True),
    "L16 ax0 g16 alpha 1.10 refit 3inst": (16, 0, 16, 1.10, True),
    "L12 ax0 g16 alpha 1.10 refit 3inst": (12, 0, 16, 1.10, True),
    "L12 ax0 g16 mul1": (12, 0, 16, 1.0, False),
    "L12 ax0 g16 alpha 1.10 refit mul1": (12, 0, 16, 1.10, True),
    "L16 ax0 g4 alpha 1.10 refit mul1": (16, 0, 4, 1.10, True),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=Path)
    ap.add_argument("--arms", default="L12;L12 ax0 g16;L12 ax0 g16 alpha 1.10 refit")
    ap.add_argument("--layers", default="all")
    ap.add_argument("--k", default="3")
    ap.add_argument("--T", type=int, default=192)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    out = a.out or HERE / "results" / f"trellis_quality-smollm2-{dev}.json"
    files = sorted(a.dir.glob("model.layers.*.mlp.*_proj.weight.pt"),
                   key=lambda p: (int(p.name.split(".")[2]), p.name))
    if a.layers != "all":
        keep = {int(x) for x in a.layers.split(",")}
        files = [f for f in files if int(f.name.split(".")[2]) in keep]
    arms = {n: ARMS[n] for n in a.arms.split(";")}
    res: dict = {"host": host(), "device": dev, "T": a.T, "arms": arms, "rows": []}
    for f in files:
        d = torch.load(f)
        w, h = d["w"].to(dev), d["h"].double().to(dev)
        ref = float(((w.double() @ h) * w.double()).sum())
        for k in (int(x) for x in a.k.split(",")):
            for arm, (L, axis, group, alpha, refit) in arms.items():
                ax = d["axis"] if axis is None else axis
                code = next((t for t in arm.split() if t in CODES), "1mad")
                geo = Geometry(L=L, k=k, T=a.T, code=code, axis=ax,
                               group=a.T if ax == 1 else group, alpha=alpha, refit=refit)
                t = time.perf_counter()
                r = trellis_guarded(w, h, geo)
                row = {"tensor": f.name[: -len(".weight.pt")], "k": k, "arm": arm,
                       "proxy": proxy_loss(w, r.recon, h) / ref,
                       "rel_mse": float((r.recon.double() - w.double()).pow(2).sum()
                                        / w.double().pow(2).sum()),
                       "seconds": round(time.perf_counter() - t, 2), "method": r.method}
                print(json.dumps(row), flush=True)
                res["rows"].append(row)
        summary = {}
        for k in (int(x) for x in a.k.split(",")):
            base = {r["tensor"]: r["proxy"] for r in res["rows"] if r["arm"] == "L12"
                    and r["k"] == k}
            for arm in arms:
                rel = [r["proxy"] / base[r["tensor"]] - 1 for r in res["rows"]
                       if r["arm"] == arm and r["k"] == k and r["tensor"] in base]
                if rel:
                    summary[f"{arm} k{k}"] = {"tensors": len(rel),
                                              "mean_vs_L12": statistics.mean(rel),
                                              "min": min(rel), "max": max(rel)}
        res["summary_vs_L12"] = summary
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
