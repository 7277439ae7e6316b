"""`tq-build sensitivity RECIPE`: per tensor, the KL cost of quantizing just
that tensor at each candidate k (trellis) or bits (affine) — the table the
`{kmap, budget}` allocators read, measured on the model instead of borrowed.

The reference is the recipe's folded model (its untie / γ-fold / rotation
stages, float32, built once into the work dir); the KL is mean KL(reference ‖
one-tensor-quantized) on held-out text. Methods:
  trellis  the tensor coded by the plain tail-biting trellis at each k (exact
           cost of the codec without LDLQ; Viterbi time per tensor and k)
  noise    Gaussian noise of the codec's measured relative MSE at each k,
           per coded sequence (QTIP Table 2 distortions; forward passes only)
  affine   RTN at each bits value (for affine {kmap, budget} rules)
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch
import yaml

from ..errors import BadInput
from ..formats import mlx_affine
from ..io.atomic import write_bytes
from ..io.layout import to_hf
from ..io.resolve import resolve_source
from ..io.source import Source
from ..kernels.codec_check import PUBLISHED
from ..pipeline.executor import BuildOptions, build
from ..pipeline.graph import compile_plan
from ..recipe import AFFINE_BITS, KMap, apply_override, load
from ..runtime.torch_load import load_torch
from ..stages.trellis import geometry, sequence_scales, trellis_plain
from .metrics import compare, forward_logits
from .run import DEFAULT_TEXT

METHODS = ("trellis", "noise", "affine")


def fold_reference(recipe_path: Path, workdir: Path, overrides=()) -> tuple:
    """Build the recipe with only its fold stages (float32) -> (artifact, the
    recipe's plan before k allocation, source dir)."""

    recipe = load(recipe_path, overrides)
    data = yaml.safe_load(Path(recipe_path).read_text())
    for o in overrides:
        apply_override(data, o)
    ref = copy.deepcopy(data)
    keep = ("untie", "norm_fold", "rotate")
    ref["stages"] = [s for s in data["stages"]
                     if (s if isinstance(s, str) else next(iter(s))) in keep] + \
        [{"write": {"dtype": "float32"}}]
    ref.pop("calibration", None)
    ref["name"] = f"{recipe.name}-fold-ref"
    out = workdir / recipe.name / "sensitivity" / "fold"
    ref["output"] = str(out)
    if "path" in ref["source"] and not Path(ref["source"]["path"]).is_absolute():
        ref["source"]["path"] = str((Path.cwd() / ref["source"]["path"]).resolve())
    f = workdir / recipe.name / "sensitivity" / "fold.yaml"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(yaml.safe_dump(ref, sort_keys=False))
    ref_recipe = load(f)
    src_dir, gguf = resolve_source(ref_recipe, workdir / "cache", log=lambda m: None)
    source = Source(src_dir)
    if not (out / "config.json").is_file():
        build(compile_plan(ref_recipe, source), source, out,
              BuildOptions(progress=False, force=True), gguf=gguf, workdir=workdir,
              log=lambda m: None)
    plan = compile_plan(recipe, source, allocate=False)
    return out, plan, src_dir


def targets(plan) -> dict[str, tuple[object, tuple[int, ...]]]:
    """module -> (spec, candidate k / bits) for every {kmap, budget} rule."""

    out = {}
    for m, spec in plan.specs.items():
        if isinstance(spec.bits, KMap):
            ks = tuple(k for k in spec.bits.choices if spec.format == "trellis" or
                       k in AFFINE_BITS)
            out[m] = (spec, ks)
    return out


def _quantized(w: torch.Tensor, spec, k: int, method: str, gen: torch.Generator
               ) -> torch.Tensor:
    if spec.format != "trellis":
        q, s, b = mlx_affine.quantize_rtn(w, k, spec.group_size, torch.bfloat16)
        return mlx_affine.dequantize(q, s, b, spec.group_size).float()
    g = geometry(spec.model_copy(update={"bits": k}))
    if method == "trellis":
        return trellis_plain(w, g).recon
    mse = PUBLISHED[(12, k)] if (12, k) in PUBLISHED else 4.0 ** -k
    scale = sequence_scales(w, g.axis).float()
    noise = torch.randn(w.shape, generator=gen) * mse ** 0.5
    return w + noise * (scale[:, None] if g.axis == 1 else scale[None, :])


def sensitivity(recipe_path: Path, *, method: str = "noise", tokens: int = 512,
                window: int = 256, workdir: Path = Path(".tq-work"), text: Path | None = None,
                overrides=(), log=print) -> dict[str, dict[str, float]]:
    from transformers import AutoTokenizer

    ref_dir, plan, src_dir = fold_reference(recipe_path, workdir, overrides)
    todo = targets(plan)
    if not todo:
        raise BadInput(f"{recipe_path} has no `bits: {{kmap, budget}}` rule to measure for",
                       fix="add a rule with bits: {kmap: FILE, budget: B}")
    if any((Path(src_dir) / f).is_file() for f in ("tokenizer.json", "tokenizer.model")):
        tok = AutoTokenizer.from_pretrained(src_dir)
        ids = torch.tensor(tok(Path(text or DEFAULT_TEXT).read_text())["input_ids"][:tokens])
    else:  # a tokenizer-less checkpoint (tests): seeded random in-vocabulary ids
        log("the source has no tokenizer: measuring on seeded random token ids")
        vocab = int(plan.config.get("vocab_size") or plan.config["text_config"]["vocab_size"])
        ids = torch.randint(0, vocab, (tokens,), generator=torch.Generator().manual_seed(0))
    model = load_torch(ref_dir)
    teacher = forward_logits(model, ids, window)
    gen = torch.Generator().manual_seed(0)
    table: dict[str, dict[str, float]] = {}
    for n, (m, (spec, ks)) in enumerate(sorted(todo.items())):
        hf = next(iter(to_hf(plan.family, {m + ".weight": torch.empty(0)})))
        p = model.get_parameter(hf)
        orig = p.data.clone()
        row = {}
        for k in ks:
            with torch.no_grad():
                p.data.copy_(_quantized(orig, spec, k, method, gen))
            row[str(k)] = compare(teacher, forward_logits(model, ids, window)).mean_kl
        p.data.copy_(orig)
        table[m] = row
        log(f"[{n + 1}/{len(todo)}] {m}: " + ", ".join(f"k={k} {v:.5f}" for k, v in
                                                       row.items()))
    return table


def write_table(table: dict, path: Path, meta: dict) -> None:
    body = {"_measured": meta, **table}
    write_bytes(path, (json.dumps(body, indent=1, sort_keys=True) + "\n").encode())
