"""Hugging Face tensor layout <-> the artifact's layout (what `mlx_lm.convert`
writes for that model_type, DESIGN §8): name prefix, zero-centred norms stored
as 1 + w, conv1d axis moved, experts stacked into `switch_mlp`."""

from __future__ import annotations

import re

import torch

from ..models.base import Family

VISION = "vision_tower."  # where mlx-vlm keeps the vision tower (mlx-lm drops it)
_EXPERT = re.compile(r"^(.*\.mlp)\.experts\.(\d+)\.(\w+)\.weight$")
_SWITCH = re.compile(r"^(.*\.mlp)\.switch_mlp\.(\w+)\.weight$")


def _is_plus_one_norm(family: Family, name: str, t: torch.Tensor) -> bool:
    return t.ndim == 1 and any(name.endswith(f"{n}.weight") for n in family.artifact_norm_plus_one)


def to_artifact(family: Family, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """One unit's HF-named tensors -> artifact-named tensors (same order where kept)."""
    out: dict[str, torch.Tensor] = {}
    experts: dict[tuple[str, str], dict[int, torch.Tensor]] = {}
    for name, t in tensors.items():
        if family.vision_prefix and name.startswith(family.vision_prefix):
            out[VISION + name[len(family.vision_prefix):]] = t  # passed through as is
            continue
        if family.mtp_prefix and name.startswith(family.mtp_prefix):
            out[name] = t  # the companion keeps the HF layout
            continue
        m = _EXPERT.match(name) if family.stack_experts else None
        if m:
            experts.setdefault((m.group(1), m.group(3)), {})[int(m.group(2))] = t
            continue
        if _is_plus_one_norm(family, name, t):
            t = t + 1.0
        if family.conv1d_moveaxis and name.endswith("conv1d.weight") and t.ndim == 3:
            t = t.movedim(2, 1)
        out[family.artifact_prefix + name] = t
    for (mlp, proj), by_e in sorted(experts.items()):
        stacked = torch.stack([by_e[e] for e in sorted(by_e)])
        out[f"{family.artifact_prefix}{mlp}.switch_mlp.{proj}.weight"] = stacked
    return out


def to_hf(family: Family, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inverse of `to_artifact` (for loading an artifact into transformers)."""
    out: dict[str, torch.Tensor] = {}
    pre = family.artifact_prefix
    for aname, t in tensors.items():
        if family.vision_prefix and aname.startswith(VISION):
            out[family.vision_prefix + aname[len(VISION):]] = t
            continue
        if family.mtp_prefix and aname.startswith(family.mtp_prefix):
            out[aname] = t
            continue
        name = aname[len(pre):] if pre and aname.startswith(pre) else aname
        m = _SWITCH.match(name) if family.stack_experts else None
        if m:
            for e in range(t.shape[0]):
                out[f"{m.group(1)}.experts.{e}.{m.group(2)}.weight"] = t[e]
            continue
        if _is_plus_one_norm(family, name, t):
            t = t - 1.0
        if family.conv1d_moveaxis and name.endswith("conv1d.weight") and t.ndim == 3:
            t = t.movedim(1, 2)
        out[name] = t
    return out
