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
import hashlib
import json
import time
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
from ..stages.layer_forward import LayerRunner, layer_tensors, text_family
from ..stages.trellis import geometry, sequence_scales, trellis_plain
from .metrics import compare, forward_logits
from .run import DEFAULT_TEXT
from .streaming import reader_for

METHODS = ("trellis", "noise", "affine")


def fold_reference(recipe_path: Path, workdir: Path, overrides=(), device: str = "cpu"
                   ) -> tuple:
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
              BuildOptions(progress=False, force=True, device=device), gguf=gguf, workdir=workdir,
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


def _generator(module: str, k: int) -> torch.Generator:
    """Each (tensor, k) draws its own seeded noise: the same numbers whichever
    order the tensors are measured in (whole model or layer-streamed)."""
    seed = int(hashlib.sha256(f"{module}:{k}".encode()).hexdigest()[:15], 16)
    return torch.Generator().manual_seed(seed)


def _quantized(w: torch.Tensor, spec, k: int, method: str, module: str) -> torch.Tensor:
    if spec.format != "trellis":
        q, s, b = mlx_affine.quantize_rtn(w, k, spec.group_size, torch.bfloat16)
        return mlx_affine.dequantize(q, s, b, spec.group_size).float()
    g = geometry(spec.model_copy(update={"bits": k}))
    if method == "trellis":
        return trellis_plain(w, g).recon
    mse = PUBLISHED[(12, k)] if (12, k) in PUBLISHED else 4.0 ** -k
    scale = sequence_scales(w, g.axis).float()
    noise = (torch.randn(w.shape, generator=_generator(module, k)) * mse ** 0.5).to(w.device)
    return w + noise * (scale[:, None] if g.axis == 1 else scale[None, :])


def _ids(src_dir: Path, plan, tokens: int, text: Path | None, log) -> torch.Tensor:
    from transformers import AutoTokenizer

    if any((Path(src_dir) / f).is_file() for f in ("tokenizer.json", "tokenizer.model")):
        tok = AutoTokenizer.from_pretrained(src_dir)
        return torch.tensor(tok(Path(text or DEFAULT_TEXT).read_text())["input_ids"][:tokens])
    log("the source has no tokenizer: measuring on seeded random token ids")
    vocab = int(plan.config.get("vocab_size") or plan.config["text_config"]["vocab_size"])
    return torch.randint(0, vocab, (tokens,), generator=torch.Generator().manual_seed(0))


def sensitivity(recipe_path: Path, *, method: str = "noise", tokens: int = 512,
                window: int = 256, workdir: Path = Path(".tq-work"), text: Path | None = None,
                overrides=(), log=print, stream: bool = True, device: str = "cpu",
                timings: dict | None = None) -> dict[str, dict[str, float]]:
    """{tensor: {k: mean KL}}. `stream` (default) holds one decoder layer at a
    time (see sweep); otherwise the folded reference is loaded whole. `timings`,
    if given, receives the per-layer seconds of the streamed sweep."""
    ref_dir, plan, src_dir = fold_reference(recipe_path, workdir, overrides, device)
    todo = targets(plan)
    if not todo:
        raise BadInput(f"{recipe_path} has no `bits: {{kmap, budget}}` rule to measure for",
                       fix="add a rule with bits: {kmap: FILE, budget: B}")
    ids = _ids(src_dir, plan, tokens, text, log)
    hf = {m: next(iter(to_hf(plan.family, {m + ".weight": torch.empty(0)}))) for m in todo}
    if stream:
        return sweep(reader_for(ref_dir), ids, window, todo, hf, method, device, log, timings)
    model = load_torch(ref_dir)
    teacher = forward_logits(model, ids, window)
    table: dict[str, dict[str, float]] = {}
    for n, (m, (spec, ks)) in enumerate(sorted(todo.items())):
        p = model.get_parameter(hf[m])
        orig = p.data.clone()
        row = {}
        for k in ks:
            with torch.no_grad():
                p.data.copy_(_quantized(orig, spec, k, method, m))
            row[str(k)] = compare(teacher, forward_logits(model, ids, window)).mean_kl
        p.data.copy_(orig)
        table[m] = row
        log(f"[{n + 1}/{len(todo)}] {m}: " + ", ".join(f"k={k} {v:.5f}" for k, v in
                                                       row.items()))
    return table


@torch.no_grad()
def sweep(reader, ids: torch.Tensor, window: int, todo: dict, hf: dict[str, str], method: str,
          device: str, log, timings: dict | None = None) -> dict[str, dict[str, float]]:
    """Every (tensor, k) candidate in one pass over the layers: a candidate's
    hidden states branch off at its own layer (that layer rebuilt with the one
    tensor quantized) and then follow the reference layers; each layer is read
    once. Peak memory: one layer + the hidden states of the reference and of
    every open candidate ([tokens, hidden] each) + the teacher's logits."""
    tc, fam = text_family(reader.config)
    runner = LayerRunner(reader.config, fam, device)
    layers = int(tc["num_hidden_layers"])
    keys = set(reader.keys())
    embed_name, head_name = f"{fam.embed}.weight", f"{fam.lm_head}.weight"
    place: dict[int, list[tuple[str, int]]] = {}  # -1 embeddings, layers, `layers` head
    for m, (_, ks) in sorted(todo.items()):
        if hf[m] not in keys:
            raise BadInput(f"tensor {hf[m]} ({m}) is not in the folded reference",
                           fix="measure tensors the model has")
        at = (-1 if hf[m] == embed_name else layers if hf[m] == head_name
              else int(hf[m][len(fam.layer_prefix):].split(".", 1)[0]))
        place.setdefault(at, []).extend((m, k) for k in ks)
    starts = range(0, ids.numel(), window)

    def embedded(w: torch.Tensor) -> list[torch.Tensor]:
        return [runner.embed(w, ids[s:s + window])[None] for s in starts]

    embed = reader.get(embed_name)
    xs = embedded(embed)
    acts = {(m, k): embedded(_quantized(embed.to(device), todo[m][0], k, method, m))
            for m, k in place.get(-1, [])}
    for i in range(layers):
        t0 = time.perf_counter()
        rel = layer_tensors(reader.get, keys, fam, i)
        layer = runner.layer(i, rel)
        t1, open_now = time.perf_counter(), len(acts)
        for c, windows in acts.items():
            acts[c] = [runner.run(i, layer, x) for x in windows]
        t_open = time.perf_counter() - t1
        for m, k in place.get(i, []):
            name = hf[m][len(f"{fam.layer_prefix}{i}."):]
            q = _quantized(rel[name].to(device), todo[m][0], k, method, m)
            branch = runner.layer(i, {**rel, name: q})
            acts[(m, k)] = [runner.run(i, branch, x) for x in xs]
        xs = [runner.run(i, layer, x) for x in xs]
        del layer, rel
        sec = time.perf_counter() - t0
        if timings is not None:  # per layer: all, the open candidates' share, their count
            timings.setdefault("seconds_per_layer", []).append(sec)
            timings.setdefault("open_seconds", []).append(t_open)
            timings.setdefault("open_candidates", []).append(open_now)
        log(f"layer {i + 1}/{layers}: {len(place.get(i, []))} candidates branched, "
            f"{len(acts)} open, {sec:.1f} s")
    norm = runner.final_norm(reader.get(f"{fam.final_norm}.weight"))
    head = (reader.get(head_name) if head_name in keys else embed).to(device)

    def logits(windows: list[torch.Tensor], h: torch.Tensor) -> torch.Tensor:
        return torch.cat([(norm(x.to(device))[0] @ h.T).float().cpu() for x in windows])

    teacher = logits(xs, head)
    for m, k in place.get(layers, []):
        acts[(m, k)] = xs
    table: dict[str, dict[str, float]] = {}
    for (m, k), windows in sorted(acts.items()):
        h = _quantized(head, todo[m][0], k, method, m) if hf[m] == head_name else head
        table.setdefault(m, {})[str(k)] = compare(teacher, logits(windows, h)).mean_kl
    for m, row in table.items():
        log(f"{m}: " + ", ".join(f"k={k} {v:.5f}" for k, v in row.items()))
    return table


def write_table(table: dict, path: Path, meta: dict) -> None:
    body = {"_measured": meta, **table}
    write_bytes(path, (json.dumps(body, indent=1, sort_keys=True) + "\n").encode())
