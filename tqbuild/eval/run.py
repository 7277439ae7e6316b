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
from ..runtime import trellis_cuda
from ..runtime.torch_load import load_torch
from .metrics import window_logits, window_nll
from .streaming import reader_for, stream_logits
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


def load_artifact(path: Path, device: str):
    """The whole artifact in torch: dequantized, or with packed trellis modules where
    TQBUILD_TRELLIS_ACT=int8 asks for the int8-activation semantics of the CUDA
    decode kernels (emulated on CPU) — so eval measures what that runtime computes."""
    return load_torch(path, packed=trellis_cuda.mode() == "int8").to(device)


def path_window_logits(path: Path, ids: torch.Tensor, window: int, device: str, stream: bool,
                  on_window) -> None:
    """on_window(start, float32 logits) per window: the whole model loaded (`stream`
    False: transformers for a source, the torch loader for an artifact), or one
    layer at a time (eval/streaming.py)."""
    if stream:
        if trellis_cuda.mode() == "int8" and (Path(path) / "optiq_metadata.json").is_file():
            raise BadInput("TQBUILD_TRELLIS_ACT=int8 with --stream: the streamed eval "
                           "dequantizes each layer, so it cannot apply the int8 activations",
                           fix="drop --stream (the whole-model eval measures int8) or unset "
                               "TQBUILD_TRELLIS_ACT")
        stream_logits(reader_for(path), ids, window, on_window, device)
        return
    if (Path(path) / "optiq_metadata.json").is_file():
        model = load_artifact(path, device)
    else:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        model = model.to(device)  # type: ignore[arg-type]  # transformers' stubs
    for s, logits in window_logits(model.eval(), ids.to(device), window):
        on_window(s, logits.cpu())


def teacher_dump(source_dir: Path, ids: torch.Tensor, k: int, window: int, cache: Path,
                 device: str = "cpu", stream: bool = False) -> tuple[TeacherDump, float]:
    """(the source's top-k dump, the source's perplexity), cached by content."""
    key = dump_key(Source(source_dir).file_hashes(), ids, k, window)
    f = cache / "teacher" / f"{key}.safetensors"
    ppl_file = f.with_suffix(".ppl.json")  # the source's perplexity on the same tokens
    if f.is_file() and ppl_file.is_file():
        return TeacherDump.load(f), float(json.loads(ppl_file.read_text())["perplexity"])
    parts: list[TeacherDump] = []
    nll = [0.0, 0]

    def take(s: int, logits: torch.Tensor) -> None:
        w = ids[s:s + window]
        parts.append(make_dump(logits, w, k, window))
        a, n = window_nll(logits, w)
        nll[0] += a
        nll[1] += n

    path_window_logits(source_dir, ids, window, device, stream, take)
    dump = TeacherDump(ids=ids.long(), top_idx=torch.cat([p.top_idx for p in parts]),
                       top_logit=torch.cat([p.top_logit for p in parts]),
                       lse=torch.cat([p.lse for p in parts]), window=window)
    f.parent.mkdir(parents=True, exist_ok=True)
    dump.save(f)
    ppl = float(torch.exp(torch.tensor(nll[0] / nll[1])))
    write_json(ppl_file, {"perplexity": ppl})
    return dump, ppl


def candidate_scores(artifact: Path, dump: TeacherDump, ids: torch.Tensor, window: int,
                     device: str, stream: bool) -> dict:
    """Perplexity and KL / top-1 against the dump, accumulated window by window
    (position-weighted means, so equal to the whole-sequence ones)."""
    acc = {"kl": 0.0, "kl_upper": 0.0, "tail": 0.0, "top1": 0.0, "n": 0, "nll": 0.0, "m": 0}

    def take(s: int, logits: torch.Tensor) -> None:
        w = slice(s, s + logits.shape[0])
        part = TeacherDump(ids=dump.ids[w], top_idx=dump.top_idx[w], top_logit=dump.top_logit[w],
                           lse=dump.lse[w], window=window)
        r = kl_vs_dump(part, logits)
        n = r.positions
        acc["kl"] += r.mean_kl * n
        acc["kl_upper"] += r.mean_kl_upper * n
        acc["tail"] += r.tail_mass * n
        acc["top1"] += r.top1_agreement * n
        acc["n"] += n
        a, m = window_nll(logits, ids[w])
        acc["nll"] += a
        acc["m"] += m

    path_window_logits(artifact, ids, window, device, stream, take)
    n = acc["n"]
    return {"perplexity": float(torch.exp(torch.tensor(acc["nll"] / acc["m"]))),
            "mean_kl": acc["kl"] / n, "mean_kl_upper": acc["kl_upper"] / n,
            "teacher_tail_mass": acc["tail"] / n, "top1_agreement": acc["top1"] / n}


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
             workdir: Path = Path(".tq-work"), probe: bool = True, stream: bool = False
             ) -> dict:
    """`stream`: teacher and candidate run one layer at a time (eval/streaming.py)."""
    from transformers import AutoTokenizer

    t0 = time.perf_counter()
    src = resolve_source(source, workdir)
    text = Path(text) if text else DEFAULT_TEXT
    if not text.is_file():
        raise BadInput(f"held-out text {text} does not exist", fix="pass --text FILE")
    tok = AutoTokenizer.from_pretrained(src)
    ids = torch.tensor(tok(text.read_text())["input_ids"][:tokens])
    dump, source_ppl = teacher_dump(src, ids, top_k, window, workdir / "cache", device, stream)
    scores = candidate_scores(artifact, dump, ids, window, device, stream)
    info = inspect(artifact)
    out = {"artifact": str(artifact), "recipe": info["recipe"],
           "bits_per_weight": info["bits_per_weight"],
           "artifact_mib": round(info["total_bytes"] / 2**20, 2),
           "text": text.name, "tokens": int(ids.numel()), "window": window, "top_k": dump.k,
           "source_perplexity": source_ppl, **scores, "device": device, "streamed": stream}
    if probe:  # generation needs the whole model
        model = load_artifact(artifact, device)
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
