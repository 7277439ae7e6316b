"""Configurations the seed measured to lose, checked on a compiled plan.

Each finding names what the seed measured (turboquant-design.md) and whether
that was a failure — the build is refused (exit 2) — or a loss — a warning.
A recipe's top-level `allow: [name, …]` accepts a finding knowingly; what was
allowed or warned is recorded in `optiq_metadata.json` (`seed_findings`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import RecipeError


@dataclass(frozen=True)
class Finding:
    name: str  # the `allow:` key
    refuse: bool  # a measured failure (refuse) or a measured loss (warn)
    reason: str
    fix: str
    matches: Callable  # plan -> the modules the finding applies to


def _trellis(plan) -> list[str]:
    return [m for m, s in plan.specs.items() if s.format == "trellis"]


def _trellis_without_r1(plan) -> list[str]:
    return [] if plan.r1_on else _trellis(plan)


def _down_proj_input_axis(plan) -> list[str]:
    return [m for m in _trellis(plan) if plan.r1_on and m.endswith("down_proj")
            and plan.specs[m].trellis.axis == 1]


def _rotated_rtn4(plan) -> list[str]:
    """Every quantized body linear (embeddings and lm_head aside) affine RTN-4, with R1."""
    body = {m: sp for m, sp in plan.specs.items() if sp.quantized
            and not m.endswith((plan.family.embed, plan.family.lm_head))}
    rtn4 = [m for m, sp in body.items()
            if sp.format == "affine" and sp.method == "rtn" and sp.bits == 4]  # a kmap is not 4
    return rtn4 if plan.r1_on and body and len(rtn4) == len(body) else []


def _group_128(plan) -> list[str]:
    return [m for m, s in plan.specs.items()
            if s.format == "affine" and s.quantized and s.group_ >= 128]


FINDINGS = (
    Finding("trellis-without-r1", False,
            "the seed's 2×2 crossover (Qwen3.8-27B, uniform trellis k3): without R1 the "
            "trellis arm scored KL 0.565 vs 0.424 with it — the worst arm; the trellis codes "
            "a Gaussian source and needs the Hadamard",
            "add `- rotate: {r1: random_hadamard}` after `- norm_fold`",
            _trellis_without_r1),
    Finding("down-proj-input-axis", True,
            "the seed's Q2b arms: down_proj coded along its un-rotated input dim kept KL "
            "(0.1554 vs 0.1550) but raw few-shot GSM8K fell 44/50 → 29/50, strictly nested "
            "(an EOS cliff: empty answers); the coded axis must be the rotated one",
            "use `trellis: {axis: auto}` (down_proj coded along its rotated output dim)",
            _down_proj_input_axis),
    Finding("rotated-rtn4", False,
            "the seed's 4-bit arms: rotated uniform RTN-4 without GPTQ loses to plain "
            "(unrotated) 4-bit — 'do not ship rotated uniform-4-bit'",
            "use `method: gptq` (with calibration), or drop `rotate` for plain RTN-4",
            _rotated_rtn4),
    Finding("group-size-128", True,
            "the seed's 27B plain-4bit-g128 arm: ppl +3 % but GSM8K collapsed to 62 % "
            "(instant-EOS and truncated answers) — g128 is disqualified for generative use",
            "use `group_size: 64` (or 32)",
            _group_128),
)
NAMES = tuple(f.name for f in FINDINGS)


def check(plan) -> list[dict]:
    """-> the findings that apply (each `{name, action, reason, modules}`, action
    `allowed` or `warned`); raises RecipeError for a refused one not allowed."""
    r = plan.recipe
    for i, name in enumerate(r.allow):
        if name not in NAMES:
            raise RecipeError(f"`allow` names {name!r}, which is no known finding",
                              where=r.line_of("allow", i), fix=f"use one of {', '.join(NAMES)}")
    out = []
    for f in FINDINGS:
        mods = f.matches(plan)
        if not mods:
            continue
        allowed = f.name in r.allow
        if f.refuse and not allowed:
            raise RecipeError(
                f"refused: {f.reason} ({len(mods)} module(s), e.g. {mods[0]})",
                where=r.line_of("stages"),
                fix=f"{f.fix}; or accept it knowingly with `allow: [{f.name}]` at the top "
                "level of the recipe")
        out.append({"name": f.name, "action": "allowed" if allowed else "warned",
                    "reason": f.reason, "fix": f.fix, "modules": len(mods)})
    return out
