"""`tq-build eval`: one artifact against its source on held-out text —
perplexity, mean KL(teacher ‖ candidate) from a cached teacher dump, top-1
agreement, and a generative probe counting empty / immediate-EOS answers (the
seed's EOS cliff, which neither KL nor perplexity can see)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from ..errors import BadInput
from ..inspect_artifact import inspect
from ..io.atomic import write_json
from ..io.gguf_import import import_gguf
from ..io.resolve import resolve_source as from_recipe
from ..io.source import Source
from ..recipe import load
from ..runtime.torch_load import load_torch
from .metrics import forward_logits, perplexity
from .teacher import TeacherDump, dump_key, kl_vs_dump, make_dump

PROBES = Path(__file__).with_name("probe_prompts.json")
DEFAULT_TEXT = Path(__file__).resolve().parents[2] / "data" / "eval" / \
    "python-stdlib-docstrings.txt"


def resolve_source(src: Path, workdir: Path) -> Path:
    """An HF directory, a .gguf file (imported once into the work dir's cache) or a
    recipe (its source) -> an HF directory."""
    src = Path(src)
    if src.suffix in (".yaml", ".yml"):
        return from_recipe(load(src), workdir / "cache", log=lambda m: None)[0]
    if src.suffix == ".gguf":
        return import_gguf(src, workdir / "cache", log=lambda m: None)
    if not (src / "config.json").is_file():
        raise BadInput(f"{src} is not a model directory, .gguf file or recipe",
                       fix="pass the source the artifact was built from")
    return src


def teacher_dump(source_dir: Path, ids: torch.Tensor, k: int, window: int, cache: Path,
                 device: str = "cpu") -> tuple[TeacherDump, float]:
    """(the source's top-k dump, the source's perplexity), cached by content."""
    from transformers import AutoModelForCausalLM

    key = dump_key(Source(source_dir).file_hashes(), ids, k, window)
    f = cache / "teacher" / f"{key}.safetensors"
    ppl_file = f.with_suffix(".ppl.json")  # the source's perplexity on the same tokens
    if f.is_file() and ppl_file.is_file():
        return TeacherDump.load(f), float(json.loads(ppl_file.read_text())["perplexity"])
    model = AutoModelForCausalLM.from_pretrained(source_dir, dtype=torch.float32)
    model = model.to(device)  # type: ignore[arg-type]  # transformers' stubs: .to(str) exists
    logits = forward_logits(model.eval(), ids.to(device), window).cpu()
    dump = make_dump(logits, ids, k, window)
    f.parent.mkdir(parents=True, exist_ok=True)
    dump.save(f)
    ppl = perplexity(logits, ids, window)
    write_json(ppl_file, {"perplexity": ppl})
    return dump, ppl


def eos_probe(model, tok, device: str = "cpu", new_tokens: int = 24) -> dict:
    """Greedy answers to the fixed prompts: how many are empty or stop at once."""
    prompts = json.loads(PROBES.read_text())
    configured = model.generation_config.eos_token_id
    eos = {tok.eos_token_id, *(configured if isinstance(configured, list) else [configured])}
    eos.discard(None)
    answers, immediate, empty = [], 0, 0
    for p in prompts:
        text = p["text"] if p["format"] == "raw" else tok.apply_chat_template(
            [{"role": "user", "content": p["text"]}], tokenize=False,
            add_generation_prompt=True)
        ids = torch.tensor(tok(text)["input_ids"])[None].to(device)
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=new_tokens, do_sample=False,
                                 pad_token_id=tok.eos_token_id)[0, ids.shape[1]:]
        first_eos = bool(out.numel() == 0 or int(out[0]) in eos)
        answer = tok.decode(out, skip_special_tokens=True).strip()
        immediate += first_eos
        empty += not answer
        answers.append(answer)
    return {"prompts": len(prompts), "immediate_eos": immediate, "empty": empty,
            "answers": answers}


def evaluate(artifact: Path, source: Path, *, text: Path | None = None, tokens: int = 4096,
             window: int = 512, top_k: int = 1024, device: str = "cpu",
             workdir: Path = Path(".tq-work"), probe: bool = True) -> dict:
    from transformers import AutoTokenizer

    t0 = time.perf_counter()
    src = resolve_source(source, workdir)
    text = Path(text) if text else DEFAULT_TEXT
    if not text.is_file():
        raise BadInput(f"held-out text {text} does not exist", fix="pass --text FILE")
    tok = AutoTokenizer.from_pretrained(src)
    ids = torch.tensor(tok(text.read_text())["input_ids"][:tokens])
    dump, source_ppl = teacher_dump(src, ids, top_k, window, workdir / "cache", device)
    model = load_torch(artifact).to(device)
    logits = forward_logits(model, ids.to(device), window).cpu()
    kl = kl_vs_dump(dump, logits)
    info = inspect(artifact)
    out = {"artifact": str(artifact), "recipe": info["recipe"],
           "bits_per_weight": info["bits_per_weight"],
           "artifact_mib": round(info["total_bytes"] / 2**20, 2),
           "text": text.name, "tokens": int(ids.numel()), "window": window, "top_k": dump.k,
           "perplexity": perplexity(logits, ids, window), "source_perplexity": source_ppl,
           "mean_kl": kl.mean_kl,
           "mean_kl_upper": kl.mean_kl_upper, "teacher_tail_mass": kl.tail_mass,
           "top1_agreement": kl.top1_agreement, "device": device}
    if probe:
        model.generation_config.eos_token_id = tok.eos_token_id
        out["eos_probe"] = eos_probe(model, tok, device)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def render(rows: list[dict]) -> str:
    head = f"{'artifact':<28} {'bpw':>6} {'MiB':>7} {'ppl':>8} {'KL':>8} {'top-1':>6} {'EOS':>5}"
    lines = [head]
    for r in rows:
        e = r.get("eos_probe")
        eos = f"{e['immediate_eos']}/{e['prompts']}" if e else "-"
        lines.append(f"{(r['recipe'] or Path(r['artifact']).name)[:28]:<28} "
                     f"{r['bits_per_weight'] or 16:>6} {r['artifact_mib']:>7} "
                     f"{r['perplexity']:>8.3f} {r['mean_kl']:>8.4f} "
                     f"{100 * r['top1_agreement']:>5.1f}% {eos:>5}")
    return "\n".join(lines)
