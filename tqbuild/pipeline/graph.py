"""Recipe + source -> a validated stage graph: units (embed, each layer, head),
the stages each runs, the tensors each stage touches, and the quantization
spec of every artifact module. Reads only shapes, never weights."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

from ..errors import RecipeError
from ..formats import FORMATS
from ..formats.trellis import check_geometry
from ..io.layout import to_artifact
from ..io.source import Source
from ..kernels.hadamard import nearest_supported, supported
from ..models import family_for
from ..models.base import Family
from ..recipe import KMap, QuantizeParams, QuantSpec, Recipe, RotateParams
from ..stages.untie import is_tied, lm_head_source
from . import seed_findings
from .allocate import allocate, load_table


@dataclass
class Unit:
    name: str
    kind: str  # embed | layer | head | extra
    index: int
    keys: list[str]  # source tensors read (lm_head may read embed_tokens)


@dataclass
class Plan:
    recipe: Recipe
    family: Family
    config: dict
    units: list[Unit]
    tied: bool
    hidden: int
    head_dim: int
    num_layers: int
    rotate: RotateParams | None
    quantize: QuantizeParams | None
    specs: dict[str, QuantSpec] = field(default_factory=dict)  # artifact module -> spec
    module_units: dict[str, str] = field(default_factory=dict)  # artifact module -> unit name
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # artifact tensor shapes
    hf_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # units' HF inputs
    dropped: list[str] = field(default_factory=list)
    allocations: list[dict] = field(default_factory=list)  # trellis k maps chosen
    kmap_files: list = field(default_factory=list)  # the sensitivity tables they read
    seed_findings: list[dict] = field(default_factory=list)  # allowed / warned (seed_findings)

    @property
    def stage_names(self) -> list[str]:
        return [s.name for s in self.recipe.stages]

    def has(self, stage: str) -> bool:
        return stage in self.stage_names

    @property
    def emits_lm_head(self) -> bool:
        """A tied model stays tied (no lm_head tensor) unless `untie` runs."""
        return not self.tied or self.has("untie")

    @property
    def r1_on(self) -> bool:
        return self.rotate is not None and self.rotate.r1 != "off"

    @property
    def r2_on(self) -> bool:
        return self.rotate is not None and self.rotate.r2 != "off"


def text_config(config: dict) -> dict:
    return config.get("text_config", config)


def quantizable(name: str, shape: tuple[int, ...]) -> bool:
    """Linear weights (2-D, or 3-D stacked experts); never convolutions or the
    MTP companion (shipped in bf16 beside the trunk)."""
    return (name.endswith(".weight") and len(shape) in (2, 3) and "conv" not in name
            and not name.startswith("mtp."))


def _stage_index(recipe: Recipe, name: str) -> int:
    return next(i for i, s in enumerate(recipe.stages) if s.name == name)


def compile_plan(recipe: Recipe, source: Source, allocate: bool = True) -> Plan:
    config = source.config
    tc = text_config(config)
    family = family_for(tc.get("model_type", config.get("model_type", "?")),
                        where=str(source.path / "config.json"))
    keys = source.keys()
    hidden = int(tc["hidden_size"])
    head_dim = int(tc.get("head_dim") or hidden // int(tc["num_attention_heads"]))
    n_layers = int(tc["num_hidden_layers"])
    tied = is_tied(tc, keys)
    plan = Plan(recipe=recipe, family=family, config=config, units=[], tied=tied, hidden=hidden,
                head_dim=head_dim, num_layers=n_layers, rotate=recipe.stage("rotate"),
                quantize=recipe.stage("quantize"))
    _check_stages(plan)
    _make_units(plan, keys)
    _plan_tensors(plan, source)
    plan.seed_findings = seed_findings.check(plan)
    if allocate:
        allocate_bits(plan)
    return plan


def _check_stages(plan: Plan) -> None:
    r, fam = plan.recipe, plan.family
    if plan.rotate is not None:
        i = _stage_index(r, "rotate")
        if plan.r1_on and fam.r1_invalid:
            raise RecipeError(fam.r1_invalid, where=r.line_of("stages", i, "rotate", "r1"),
                              fix="set `r1: off` (γ-fold of the pre-norms is still valid)")
        if plan.r2_on and fam.r2_invalid:
            raise RecipeError(fam.r2_invalid, where=r.line_of("stages", i, "rotate", "r2"),
                              fix="set `r2: off` for this model")
        if plan.r1_on and not plan.has("norm_fold"):
            raise RecipeError("R1 needs the norms' gains folded first (R1 commutes only with "
                              "gain-free RMSNorm)", where=r.line_of("stages", i),
                              fix="add `- norm_fold` before `- rotate`")
        for n, what, on in ((plan.hidden, "hidden_size (R1)", plan.r1_on),
                            (plan.head_dim, "head_dim (R2)", plan.r2_on)):
            if on and not supported(n):
                lo, hi = nearest_supported(n)
                key = "r1" if "R1" in what else "r2"
                raise RecipeError(
                    f"no Hadamard construction for n = {n} ({what})",
                    where=r.line_of("stages", i, "rotate", key),
                    fix=f"supported sizes are K·2^m (K in 12, 20, 28, 36, 40, 52, 60, 108, 140, "
                    f"156, 172) or powers of two — the nearest are {lo} and {hi}; set `{key}: off`")
    folds_head = plan.has("norm_fold") or plan.r1_on
    if plan.tied and folds_head and not plan.has("untie"):
        where = r.line_of("stages", _stage_index(r, "norm_fold" if plan.has("norm_fold")
                                                  else "rotate"))
        raise RecipeError("this model ties lm_head to embed_tokens, and the folds change "
                          "lm_head but not embed_tokens", where=where,
                          fix="add `- untie` as the first stage")


def _make_units(plan: Plan, keys: list[str]) -> None:
    fam = plan.family
    units = [Unit("embed", "embed", -1, [f"{fam.embed}.weight"])]
    claimed = set(units[0].keys)
    for i in range(plan.num_layers):
        pre = f"{fam.layer_prefix}{i}."
        lk = [k for k in keys if k.startswith(pre)]
        units.append(Unit(f"layer {i}", "layer", i, lk))
        claimed.update(lk)
    head = [f"{fam.final_norm}.weight"]
    if plan.emits_lm_head:
        head.append(lm_head_source(fam, plan.config, keys))
    units.append(Unit("head", "head", plan.num_layers, head))
    claimed.update(head)
    claimed.add(f"{fam.lm_head}.weight")
    extra = [k for k in keys if k not in claimed]
    mtp = [k for k in extra if k.startswith("mtp.")]
    extra = [k for k in extra if not k.startswith("mtp.")]
    if extra:
        units.append(Unit("extra", "extra", plan.num_layers + 1, extra))
    if mtp and fam.mtp_prefix:
        units.append(Unit("mtp", "mtp", plan.num_layers + 2, mtp))
    else:
        plan.dropped = mtp
    plan.units = units


def unit_hf_names(plan: Plan, unit: Unit) -> list[str]:
    """HF names a unit produces (lm_head is produced under its own name)."""
    if unit.kind == "head" and plan.emits_lm_head:
        return [f"{plan.family.final_norm}.weight", f"{plan.family.lm_head}.weight"]
    return list(unit.keys)


def _plan_tensors(plan: Plan, source: Source) -> None:
    fam, q = plan.family, plan.quantize
    for unit in plan.units:
        metas = {}
        for name in unit_hf_names(plan, unit):
            src = unit.keys[1] if unit.kind == "head" and name.startswith(fam.lm_head) else name
            metas[name] = torch.empty(source.shape(src), device="meta")
            plan.hf_shapes[name] = tuple(metas[name].shape)
        art = to_artifact(fam, metas)
        for aname, t in art.items():
            shape = tuple(t.shape)
            plan.shapes[aname] = shape
            if q is None or not quantizable(aname, shape):
                continue
            module = aname[: -len(".weight")]
            plan.module_units[module] = unit.name
            spec = q.spec_for(module)
            if spec.format == "trellis":
                spec = _trellis_spec(plan, module, shape, spec)
                plan.specs[module] = spec
                continue
            plan.specs[module] = spec
            if spec.quantized and shape[-1] % spec.group_:
                fits = [g for g in (32, 64, 128) if shape[-1] % g == 0]
                i = _stage_index(plan.recipe, "quantize")
                raise RecipeError(
                    f"group_size {spec.group_} does not divide the row length {shape[-1]} "
                    f"of {aname}", where=plan.recipe.line_of("stages", i, "quantize"),
                    fix=f"use group_size {' or '.join(map(str, fits)) or '(none fits)'} for "
                    f"this tensor (a rule matching {re.escape(module)!r})")


def _trellis_spec(plan: Plan, module: str, shape: tuple, spec: QuantSpec) -> QuantSpec:
    """Resolve axis `auto` to the rotated axis and check the block geometry."""

    tp = spec.trellis
    where = plan.recipe.line_of("stages", _stage_index(plan.recipe, "quantize"), "quantize")
    if module.endswith(plan.family.embed):
        raise RecipeError(f"{module} is an embedding (a lookup, not a product): the trellis "
                          "codes linear layers", where=where,
                          fix=f"add a rule `match: {plan.family.embed.rsplit('.', 1)[-1]}` "
                          "with `format: affine` before the trellis rule")
    axis = tp.axis
    if axis == "auto":
        last = module.rsplit(".", 1)[-1]
        writers = {w.rsplit(".", 1)[-1] for w in plan.family.residual_writers}
        # a writer's output dim carries R1; o_proj's input also carries R2
        axis = 0 if plan.r1_on and last in writers and not (
            plan.r2_on and module.endswith(plan.family.head_consumer)) else 1
    length = shape[-1] if axis == 1 else shape[-2]
    ks = spec.bits.choices if isinstance(spec.bits, KMap) else (spec.bits,)
    for k in ks:
        problem = check_geometry(tp.T, k, tp.L, length, f" ({module}, k = {k})")
        if problem:
            fits = [t for t in (32, 64, 96, 128, 192, 256, 288, 384, 512, 576)
                    if length % t == 0 and all((t * kk) % 32 == 0 for kk in ks)]
            raise RecipeError(problem, where=where,
                              fix=f"use trellis T in {fits or '(none fits)'} for tensors "
                              f"matching {re.escape(module)!r}, or another format")
    if tp.interleave and (length // tp.T) % 2:
        raise RecipeError(f"interleave needs an even number of blocks per row; {module} has "
                          f"{length // tp.T}", where=where,
                          fix="set `interleave: false` or a T giving an even block count")
    return spec.model_copy(update={"trellis": tp.model_copy(update={"axis": axis})})


def allocate_bits(plan: Plan) -> None:
    """Replace every {kmap, budget} with the k the allocator chose per module."""
    from pathlib import Path

    pending: dict[tuple[KMap, str], list[str]] = {}
    for m, s in plan.specs.items():
        if isinstance(s.bits, KMap):
            pending.setdefault((s.bits, s.format), []).append(m)
    where = plan.recipe.line_of("stages", _stage_index(plan.recipe, "quantize"), "quantize") \
        if pending else ""
    for (km, _), modules in pending.items():
        table = None
        if km.kmap:
            path = Path(km.kmap)
            if not path.is_absolute():
                path = Path(plan.recipe.file).parent / path
            table = load_table(path, where)
            plan.kmap_files.append(path)
        sizes = {m: _numel(plan.shapes[m + ".weight"]) for m in modules}
        spec = plan.specs[modules[0]]
        # affine: the budget is bits per weight, each group adding a scale and a bias
        overhead = FORMATS[spec.format].budget_overhead(spec)
        chosen = allocate(sizes, km.budget - overhead, km.choices, table, where)
        for m, k in chosen.items():
            plan.specs[m] = plan.specs[m].model_copy(update={"bits": k})
        total = sum(sizes.values())
        plan.allocations.append({
            "format": spec.format,
            "budget": km.budget, "kmap": Path(km.kmap).name if km.kmap else None,
            "average_k": round(sum(sizes[m] * chosen[m] for m in modules) / total, 4),
            "map": dict(sorted(chosen.items()))})


def estimate_peak_bytes(plan: Plan, shard_bytes: int) -> int:
    """Largest unit in float32 (source + folded copy + quantized) + R matrices + one shard."""
    per_unit = []
    for unit in plan.units:
        n = sum(_numel(s) for a, s in plan.shapes.items() if _unit_of(plan, a) == unit.name)
        per_unit.append(n * 4 * 3)
    rot = (plan.hidden**2 if plan.r1_on else 0) * 8 + (plan.head_dim**2) * 8
    return max(per_unit) + rot + min(shard_bytes, sum(_numel(s) for s in plan.shapes.values()) * 2)


DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def estimate_sizes(plan: Plan) -> dict[str, int]:
    """Bytes the build will write: the artifact, and the work dir (unit
    checkpoints ≈ the artifact, calibration activations, tokens)."""

    wp = plan.recipe.write
    fb = DTYPE_BYTES[wp.dtype]
    out = 0
    for name, shape in plan.shapes.items():
        spec = plan.specs.get(name[: -len(".weight")]) if name.endswith(".weight") else None
        n = _numel(shape)
        fmt = FORMATS.get(spec.format) if spec is not None else None
        out += fmt.stored_bytes(spec, shape, fb) if fmt else n * fb
    acts = 0
    calib = plan.recipe.stage("calibrate")
    if calib is not None:
        per_layer = calib.samples * calib.seq_len * plan.hidden * 4
        acts = per_layer * (1 if calib.keep == "last" else plan.num_layers) * 2  # + one in flight
        acts += calib.samples * calib.seq_len * 4
    return {"output": out, "workdir": out + acts, "activations": acts}


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _unit_of(plan: Plan, aname: str) -> str:
    fam = plan.family
    name = aname[len(fam.artifact_prefix):] if aname.startswith(fam.artifact_prefix) else aname
    if name.startswith(fam.layer_prefix):
        return f"layer {name[len(fam.layer_prefix):].split('.')[0]}"
    if name.startswith(fam.embed):
        return "embed"
    if name.startswith((fam.final_norm, fam.lm_head)):
        return "head"
    return "extra"
