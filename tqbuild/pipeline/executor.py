"""Run a compiled plan one unit (embed, layer i, head) at a time: read the
unit's source tensors, apply the stages, quantize, stream into shards. The
output appears only when complete (built in a temp dir, then renamed)."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from ..errors import OutputError
from ..formats.metadata import build_metadata
from ..io.atomic import replace_dir, write_json
from ..io.hashing import sha256_file
from ..io.hfconfig import artifact_config, quantization_entry
from ..io.layout import to_artifact
from ..io.source import Source
from ..io.writer import ShardWriter
from ..recipe import WriteParams
from ..stages import norm_fold, rotate
from ..stages.affine import DTYPES, quantize_tensor
from ..stages.untie import untie
from .graph import Plan, Unit


@dataclass
class BuildResult:
    output: Path
    seconds: float
    shards: list[str]
    modules: dict


def check_output(output: Path, recipe_name: str, force: bool) -> None:
    meta = output / "optiq_metadata.json"
    if output.exists() and not force:
        import json

        prev = None
        if meta.is_file():
            try:
                prev = json.loads(meta.read_text())["recipe"]["name"]
            except (ValueError, KeyError):
                prev = None
        if prev != recipe_name:
            raise OutputError(f"output directory {output} exists and is not a build of "
                              f"recipe {recipe_name!r}",
                              fix="choose another --output, delete it, or pass --force")
    parent = output.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot create the output's parent directory {parent}: "
                          f"{e.strerror}", fix="choose a writable --output") from None


def _temp_dir(output: Path) -> Path:
    tmp = output.with_name(f".{output.name}.building")
    try:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        probe = tmp / ".probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise OutputError(f"output location {output.parent} is not writable: {e.strerror}",
                          fix="choose a writable --output") from None
    return tmp


def process_unit(plan: Plan, source: Source, unit: Unit, r1: torch.Tensor | None
                 ) -> dict[str, torch.Tensor]:
    """Source tensors of one unit -> folded float32 tensors, HF names."""
    fam = plan.family
    if unit.kind == "head":
        t = {unit.keys[0]: source.get(unit.keys[0])}
        if not plan.emits_lm_head:
            return t
        head = source.get(unit.keys[1])
        t[f"{fam.lm_head}.weight"] = untie(head) if plan.tied else head
        if plan.has("norm_fold"):
            norm_fold.fold_final(t, fam)
        if r1 is not None:
            t[f"{fam.lm_head}.weight"] = rotate.rotate_readers_input(t[f"{fam.lm_head}.weight"], r1)
        return t
    t = {k: source.get(k) for k in unit.keys}
    if unit.kind == "embed" and r1 is not None:
        k = unit.keys[0]
        t[k] = rotate.rotate_readers_input(t[k], r1)
    elif unit.kind == "layer":
        pre = f"{fam.layer_prefix}{unit.index}."
        if plan.has("norm_fold"):
            norm_fold.fold_layer(t, fam, pre)
        if r1 is not None:
            rotate.r1_layer(t, fam, pre, r1)
        if plan.r2_on:
            r2 = rotate.rotation(plan.rotate.seed, plan.head_dim,
                                 rotate.R2_LANE_BASE + unit.index)
            rotate.r2_layer(t, fam, pre, r2)
    return t


def emit_unit(plan: Plan, tensors: dict[str, torch.Tensor], writer: ShardWriter,
              modules: dict, dtype: torch.dtype) -> None:
    """HF tensors -> artifact layout -> quantized/bf16 -> shards."""
    for name, t in to_artifact(plan.family, tensors).items():
        module = name[: -len(".weight")]
        spec = plan.specs.get(module) if name.endswith(".weight") else None
        if spec is None:
            writer.add(name, t.to(dtype))
            continue
        out, record = quantize_tensor(name, t, spec, dtype)
        modules[module] = record
        for k, v in out.items():
            writer.add(k, v)


def build(plan: Plan, source: Source, output: Path, *, force: bool = False,
          gguf: Path | None = None, log=print, progress: bool = True) -> BuildResult:
    t0 = time.perf_counter()
    recipe = plan.recipe
    output = Path(output)
    check_output(output, recipe.name, force)
    tmp = _temp_dir(output)
    try:
        write_params = recipe.stage("write") or WriteParams()
        writer = ShardWriter(tmp, write_params.shard_bytes)
        r1 = rotate.rotation(plan.rotate.seed, plan.hidden, 0) if plan.r1_on else None
        modules: dict = {}
        bar = tqdm(plan.units, desc=recipe.name, unit="unit", disable=not progress,
                   dynamic_ncols=True)
        for unit in bar:
            bar.set_postfix_str(f"{unit.name} ({plan.units.index(unit) + 1}/{len(plan.units)})")
            emit_unit(plan, process_unit(plan, source, unit, r1), writer, modules,
                      DTYPES[write_params.dtype])
        shards = writer.finish()
        qp = plan.quantize
        quant = quantization_entry(plan.specs, qp.default) if qp else None
        cfg = artifact_config(plan.config, model_type=plan.family.artifact_model_type,
                              untied=plan.tied and plan.has("untie"), quantization=quant,
                              dtype=write_params.dtype)
        write_json(tmp / "config.json", cfg)
        for f in source.passthrough_files():
            shutil.copyfile(f, tmp / f.name)
        gguf_info = {"file": gguf.name, "sha256": sha256_file(gguf)} if gguf else None
        meta = build_metadata(plan, source_hashes=source.file_hashes(), gguf=gguf_info,
                              modules=modules)
        write_json(tmp / "optiq_metadata.json", meta)
        replace_dir(tmp, output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return BuildResult(output=output, seconds=time.perf_counter() - t0, shards=shards,
                       modules=modules)
