"""The fold stages as one ordered table. A unit's source tensors (HF names)
go through every fold that applies to the unit's kind, in table order; each
fold replaces the tensors it changes. `plan` runs the same table on meta
tensors and reports, per recipe stage, which tensors were replaced — what a
stage touches is computed, never described twice.

A new fold is one row here (and its math in stages/)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..io.source import Source
from ..stages import norm_fold, rotate
from ..stages.mtp import fold_mtp, fold_vision_seams
from ..stages.untie import untie
from .graph import Plan, Unit, unit_hf_names


@dataclass(frozen=True)
class FoldContext:
    plan: Plan
    unit: Unit
    r1: torch.Tensor | None  # None: R1 off
    make_rotation: Callable = rotate.rotation  # (seed, n, lane) -> R


@dataclass(frozen=True)
class Fold:
    stage: str  # the recipe stage it belongs to (what `plan` reports)
    kind: str  # the unit kind it applies to
    enabled: Callable[[Plan], bool]
    apply: Callable[[dict[str, torch.Tensor], FoldContext], None]


def _lm_head(ctx: FoldContext) -> str:
    return f"{ctx.plan.family.lm_head}.weight"


def _untie(t, ctx):
    t[_lm_head(ctx)] = untie(t[_lm_head(ctx)])


def _fold_final(t, ctx):
    norm_fold.fold_final(t, ctx.plan.family)


def _r1_lm_head(t, ctx):
    t[_lm_head(ctx)] = rotate.rotate_readers_input(t[_lm_head(ctx)], ctx.r1)


def _r1_embed(t, ctx):
    key = ctx.unit.keys[0]
    t[key] = rotate.rotate_readers_input(t[key], ctx.r1)


def _prefix(ctx: FoldContext) -> str:
    return f"{ctx.plan.family.layer_prefix}{ctx.unit.index}."


def _layer_norms(t, ctx):
    norm_fold.fold_layer(t, ctx.plan.family, _prefix(ctx))


def _layer_r1(t, ctx):
    rotate.r1_layer(t, ctx.plan.family, _prefix(ctx), ctx.r1)


def _layer_r2(t, ctx):
    p = ctx.plan
    r2 = ctx.make_rotation(p.rotate.seed, p.head_dim, rotate.R2_LANE_BASE + ctx.unit.index)
    rotate.r2_layer(t, p.family, _prefix(ctx), r2)


def _mtp(t, ctx):
    fold_mtp(t, ctx.plan, ctx.r1, ctx.make_rotation)


def _vision_seams(t, ctx):
    fold_vision_seams(t, ctx.plan.family, ctx.r1)


FOLDS: tuple[Fold, ...] = (
    Fold("untie", "head", lambda p: p.emits_lm_head and p.tied, _untie),
    Fold("norm_fold", "head", lambda p: p.emits_lm_head and p.has("norm_fold"), _fold_final),
    Fold("rotate", "head", lambda p: p.emits_lm_head and p.r1_on, _r1_lm_head),
    Fold("rotate", "embed", lambda p: p.r1_on, _r1_embed),
    # a decoder layer: γ into its readers, R1, then R2 (as stages/rotate.fold_decoder_layer)
    Fold("norm_fold", "layer", lambda p: p.has("norm_fold"), _layer_norms),
    Fold("rotate", "layer", lambda p: p.r1_on, _layer_r1),
    Fold("rotate", "layer", lambda p: p.r2_on, _layer_r2),
    # the MTP companion in the trunk's basis: γ, R1 and its layers' folds (stages/mtp.py)
    Fold("norm_fold+rotate", "mtp", lambda p: True, _mtp),
    Fold("rotate", "extra", lambda p: p.r1_on and bool(p.family.vision_seams), _vision_seams),
)


def read_unit(plan: Plan, source: Source, unit: Unit) -> dict[str, torch.Tensor]:
    """A unit's source tensors under the HF names it produces (lm_head is read
    from its source tensor: embed_tokens when tied)."""
    return {name: source.get(_source_key(plan, unit, name))
            for name in unit_hf_names(plan, unit)}


def _source_key(plan: Plan, unit: Unit, name: str) -> str:
    if unit.kind == "head" and name == f"{plan.family.lm_head}.weight":
        return unit.keys[1]
    return name


def apply_folds(t: dict[str, torch.Tensor], ctx: FoldContext,
                on_stage: Callable[[str], None] | None = None) -> dict[str, torch.Tensor]:
    for f in FOLDS:
        if f.kind == ctx.unit.kind and f.enabled(ctx.plan):
            f.apply(t, ctx)
            if on_stage is not None:
                on_stage(f.stage)
    return t


def fold_unit(plan: Plan, source: Source, unit: Unit, r1: torch.Tensor | None
              ) -> dict[str, torch.Tensor]:
    """Source tensors of one unit -> folded float32 tensors, HF names."""
    return apply_folds(read_unit(plan, source, unit), FoldContext(plan, unit, r1))


def touched(plan: Plan, unit: Unit, shapes: dict[str, tuple[int, ...]]
            ) -> dict[str, list[str]]:
    """stage -> the HF tensors its folds replace in this unit, found by running
    the table on meta tensors of the given (HF-named) shapes."""
    def meta(*shape):
        return torch.empty(shape, device="meta")

    t = {name: meta(*shapes[name]) for name in unit_hf_names(plan, unit)}
    r1 = meta(plan.hidden, plan.hidden) if plan.r1_on else None
    ctx = FoldContext(plan, unit, r1, lambda seed, n, lane: meta(n, n))
    out: dict[str, list[str]] = {}
    before = dict(t)

    def record(stage: str) -> None:
        changed = sorted(k for k, v in t.items() if before.get(k) is not v)
        before.update(t)
        if changed:
            out.setdefault(stage, []).extend(changed)

    apply_folds(t, ctx, record)
    return {s: sorted(set(n)) for s, n in out.items()}
