"""optiq_metadata.json: provenance of an artifact (DESIGN §5). Deterministic:
no timestamps, durations, absolute paths or host names."""

from __future__ import annotations

from pathlib import Path

from .. import __version__
from ..stages.mtp import DEVIATION, MTP_R2_LANE_BASE

FORMAT_VERSION = 1
DEVIATIONS = (
    "no-embedding-mean-centering",
    "no-r4-half-fold",
    "no-r3",
    "gamma-kept-as-identity-eps-preserved",
    "fold-precision-fp32",
)


def weight_transforms(plan) -> list[dict]:
    if not (plan.has("norm_fold") or plan.has("rotate") or plan.has("untie")):
        return []
    rot = plan.rotate
    out = [{
        "id": f"rotation.{plan.family.model_type}",
        "family": plan.family.model_type,
        "untie": plan.tied and plan.has("untie"),
        "norm_fold": plan.has("norm_fold"),
        "seed": rot.seed if rot else None,
        "r1": {"kind": rot.r1, "n": plan.hidden, "lane": 0} if plan.r1_on else None,
        "r2": {"kind": rot.r2, "n": plan.head_dim, "lanes": "layer i -> i + 1"}
        if plan.r2_on else None,
        "deviations": list(DEVIATIONS),
    }]
    if any(u.kind == "mtp" for u in plan.units):
        out.append({**out[0], "id": f"rotation.{plan.family.model_type}_mtp", "mtp": True,
                    "path": "mtp/", "untie": False,
                    "r2": {**out[0]["r2"], "lanes": f"layer j -> {MTP_R2_LANE_BASE} + j"}
                    if out[0]["r2"] else None,
                    "deviations": list(DEVIATIONS) + ([DEVIATION] if plan.has("norm_fold")
                                                      else [])})
    return out


def build_metadata(plan, *, source_hashes: dict, gguf: dict | None, modules: dict,
                   calibration: dict | None = None, guard_events: list | None = None) -> dict:
    r = plan.recipe
    meta = {
        "format_version": FORMAT_VERSION,
        "tool": {"name": "tq-build", "version": __version__},
        "recipe": {"name": r.name, "file": Path(r.file).name, "sha256": r.hash, "text": r.text,
                   "overrides": list(r.overrides)},
        "source": {"model_type": plan.config.get("model_type"), "files": source_hashes,
                   "gguf": gguf},
        "weight_transforms": weight_transforms(plan),
        "calibration": calibration,
        "guard_events": guard_events or [],
        "dropped_tensors": plan.dropped,
        "modules": modules,
        "bit_allocation": plan.allocations,
        "quality": {},
    }
    if plan.seed_findings:  # the seed's measured losers this build allowed or was warned of
        meta["seed_findings"] = plan.seed_findings
    return meta
