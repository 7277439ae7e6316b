"""Every SmolLM2 MLP weight as the smollm2-q35 recipe quantizes it (after
untie, γ-fold, R1/R2) with its input Hessian, one .pt file per tensor — the
inputs of bench/trellis_quality_real.py:

    python bench/smollm2_hessians.py DIR [--recipe recipes/smollm2-q35.yaml]

Runs the recipe's build with the trellis quantizer replaced by a recorder
(calibration is the recipe's, from the shared cache; nothing is coded).
About 1 GB for the 90 tensors (float32 W, float64 H).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import tqbuild.stages.quantize as quantize  # noqa: E402
from tqbuild.pipeline.api import prepare, run  # noqa: E402
from tqbuild.pipeline.executor import BuildOptions  # noqa: E402
from tqbuild.stages.trellis import TrellisResult, geometry, sequence_scales  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=Path)
    ap.add_argument("--recipe", default="recipes/smollm2-q35.yaml")
    a = ap.parse_args()
    a.dir.mkdir(parents=True, exist_ok=True)
    pending: list = []
    _, assemble = quantize.MATRIX_QUANTIZERS["trellis"]

    def record(w, h, spec, guard, dtype=None):
        pending.append((w.float().clone(), None if h is None else h.double().clone()))
        g = geometry(spec)
        rows, cols = w.shape if g.axis == 1 else w.shape[::-1]
        return TrellisResult(states=torch.zeros(rows, cols, dtype=torch.int64),
                             scales=sequence_scales(w, g.axis), recon=w.float(), method="ldlq")

    def save(name, w, results, spec, hessians, dtype, guard):
        wm, h = pending.pop(0)
        torch.save({"w": wm, "h": h, "axis": geometry(spec).axis}, a.dir / f"{name}.pt")
        return assemble(name, w, results, spec, hessians, dtype, guard)

    quantize.MATRIX_QUANTIZERS["trellis"] = (record, save)
    with tempfile.TemporaryDirectory() as tmp:
        p = prepare(a.recipe, overrides=["name=smollm2-hessians"], output=Path(tmp) / "out")
        run(p, BuildOptions())


if __name__ == "__main__":
    main()
