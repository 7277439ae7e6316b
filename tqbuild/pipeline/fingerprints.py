"""What each unit's checkpoint depends on, as content fingerprints: pure
functions of the plan, the source's file hashes and the calibration tokens.
A checkpoint is reused only under the same fingerprint, so a change to
anything it depends on recomputes that unit (and, with `hessians:
propagate`, everything downstream of it)."""

from __future__ import annotations

from ..stages.quantize import MATRIX_QUANTIZERS
from .graph import Plan, Unit
from .workdir import fingerprint

FOLD_STAGES = ("untie", "norm_fold", "rotate")


def fold_fingerprint(plan: Plan, write_dtype: str) -> str:
    params = {s.name: s.params.model_dump() for s in plan.recipe.stages
              if s.name in FOLD_STAGES}
    return fingerprint(plan.family.model_type, params, write_dtype)


def hessian_units(plan: Plan) -> set[str]:
    """Units whose quantization reads Hessians captured on the calibration data:
    decoder layers and the head (embeddings are a lookup, not a product; other
    units, e.g. a vision tower, are not run on the text and get RTN)."""
    if plan.recipe.stage("calibrate") is None or plan.quantize is None:
        return set()
    kinds = {u.name: u.kind for u in plan.units}
    return {plan.module_units[m] for m, spec in plan.specs.items()
            if spec.uses_hessian and spec.format in MATRIX_QUANTIZERS
            and kinds.get(plan.module_units[m]) in ("layer", "head")}


def unit_specs(plan: Plan, unit: Unit) -> dict:
    return dict(sorted((m, s.model_dump()) for m, s in plan.specs.items()
                       if plan.module_units[m] == unit.name))


def unit_fingerprint(plan: Plan, unit: Unit, src_fp: str, fold_fp: str,
                     upstream: str | None) -> str:
    """`upstream`: the fingerprint of the activations entering the unit, for
    units that capture Hessians (None otherwise)."""
    guard = plan.quantize.guard.model_dump() if plan.quantize else None
    return fingerprint("unit-v1", unit.name, src_fp, fold_fp, unit_specs(plan, unit), guard,
                       upstream)


def activation_fingerprints(plan: Plan, src_fp: str, fold_fp: str, token_sha: str,
                            hessian_set: set[str]) -> dict[int, str]:
    """layer i -> fingerprint of the activations after it (-1: the embeddings).
    `original` Hessians chain by layer index; `propagate` by each layer's
    unit fingerprint (the quantized layer produces them)."""
    calib = plan.recipe.calibrate
    assert calib is not None
    mode = calib.hessians
    act = {-1: fingerprint("acts-v1", src_fp, fold_fp, token_sha)}
    for i in range(plan.num_layers):
        unit = plan.units[i + 1]
        link: object = i
        if mode == "propagate":
            upstream = act[i - 1] if unit.name in hessian_set else None
            link = unit_fingerprint(plan, unit, src_fp, fold_fp, upstream)
        act[i] = fingerprint(act[i - 1], mode, link)
    return act
