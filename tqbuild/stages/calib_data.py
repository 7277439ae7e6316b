"""Calibration token ids: local text/JSONL files, a Hugging Face dataset from
the local cache, or text sampled from the source model itself (seeded)."""

from __future__ import annotations

import glob
import hashlib
import json
from pathlib import Path

import numpy as np
import torch

from ..errors import SourceError
from ..io.paths import checked
from ..recipe import CalibrateParams
from .calib_stream import self_generated_streamed
from .hf_cache import cache_kwargs
from .sampling import sample_tokens


def token_hash(ids: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(ids, dtype="<i4").tobytes()).hexdigest()


def _records(files: list[Path], tok) -> list[str]:
    """Texts of every file: .jsonl records with `text` or chat `messages`, else raw text."""
    out = []
    for f in files:
        if f.suffix == ".jsonl":
            for n, line in enumerate(f.read_text().splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except ValueError as e:
                    raise SourceError(f"not JSON: {e}", where=f"{f}:{n}",
                                      fix="one JSON object per line") from None
                if "messages" in rec:
                    out.append(tok.apply_chat_template(rec["messages"], tokenize=False))
                elif "text" in rec:
                    out.append(rec["text"])
                else:
                    raise SourceError("record has neither `text` nor `messages`",
                                      where=f"{f}:{n}", fix="give each record one of them")
        else:
            out.append(f.read_text())
    return out


def _windows(texts: list[str], tok, p: CalibrateParams, where: str) -> np.ndarray:
    """Concatenate (EOS-separated), cut into seq_len windows, pick `samples` seeded."""
    eos = tok.eos_token_id if tok.eos_token_id is not None else 0
    stream: list[int] = []
    for t in texts:
        stream += tok(t, add_special_tokens=False)["input_ids"] + [eos]
    n = len(stream) // p.seq_len
    if n < p.samples:
        raise SourceError(f"calibration text gives {n} windows of {p.seq_len} tokens, "
                          f"{p.samples} asked", where=where,
                          fix="add text, or lower `samples` / `seq_len`")
    arr = np.asarray(stream[: n * p.seq_len], dtype=np.int32).reshape(n, p.seq_len)
    pick = np.sort(np.random.default_rng(p.seed).choice(n, p.samples, replace=False))
    return arr[pick]


def calibration_files(pattern: str | tuple[str, ...]) -> list[Path]:
    pats = [pattern] if isinstance(pattern, str) else list(pattern)
    return sorted({Path(f) for pat in pats for f in glob.glob(str(Path(pat).expanduser()))})


def from_files(pattern: str | tuple[str, ...], tok, p: CalibrateParams, where: str) -> np.ndarray:
    pats = [pattern] if isinstance(pattern, str) else list(pattern)

    files = calibration_files(pattern)
    if not files:
        raise SourceError(f"calibration files {pats} match nothing", where=where,
                          fix="check the glob (relative paths resolve from the current dir)")
    files = [checked(f, what="calibration file", where=where, kind="file",
                     fix="narrow the glob to text / JSONL files", error=SourceError)
             for f in files]
    return _windows(_records(files, tok), tok, p, where)


def from_dataset(p: CalibrateParams, tok, where: str) -> np.ndarray:
    try:  # offline: HF_DATASETS_OFFLINE is set in environment.py
        import datasets
    except ImportError:
        raise SourceError("calibration `dataset` needs the `datasets` package", where=where,
                          fix="pip install datasets (the data must already be in its cache)"
                          ) from None
    try:
        ds = datasets.load_dataset(p.source.dataset, split=p.source.split)
    except Exception as e:
        raise SourceError(f"dataset {p.source.dataset!r} is not in the local cache ({e})",
                          where=where, fix="download it once with network access, or use "
                          "`files:` / `self_generated: true`") from None
    return _windows([r[p.source.column] for r in ds], tok, p, where)


def self_generated(model, p: CalibrateParams, bos: int | None, vocab: int) -> np.ndarray:
    """Tokens sampled from a whole loaded transformers model (see sample_tokens)."""
    from transformers import DynamicCache

    def next_logits(cache, ids, t):
        return model(input_ids=ids.to(model.device), use_cache=True,
                     **cache_kwargs(model, cache)).logits[:, -1]

    return sample_tokens(p, bos, vocab, lambda: DynamicCache(config=model.config), next_logits)


def calibration_ids(p: CalibrateParams, source_dir: Path, where: str, log=print,
                    device: str = "cpu") -> np.ndarray:
    """int32 [samples, seq_len]. Self-generated tokens are sampled with the model on
    `device` (CUDA logits round differently: other tokens than a CPU sampling)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if p.source.files or p.source.dataset:
        try:
            tok = AutoTokenizer.from_pretrained(source_dir)
        except (OSError, ValueError) as e:
            raise SourceError(f"the source has no usable tokenizer ({e})", where=where,
                              fix="add the tokenizer files, or calibrate with "
                              "`self_generated: true`") from None
        if p.source.files:
            return from_files(p.source.files, tok, p, where)
        return from_dataset(p, tok, where)
    if p.stream:
        log(f"sampling {p.samples} × {p.seq_len} calibration tokens from the source model, "
            "one decoder layer at a time")
        return self_generated_streamed(source_dir, p, device)
    log(f"sampling {p.samples} × {p.seq_len} calibration tokens from the source model "
        "(it is loaded whole for this)")
    model = AutoModelForCausalLM.from_pretrained(source_dir, dtype=torch.float32).eval()
    model = model.to(device)
    bos = model.config.bos_token_id
    bos = bos[0] if isinstance(bos, list) else bos
    return self_generated(model, p, bos, model.config.vocab_size)
