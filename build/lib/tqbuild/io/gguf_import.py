"""A GGUF file dequantized once to a float32 safetensors directory, cached
inside the work dir under the file's sha256 (DESIGN §8 "Sources")."""

from __future__ import annotations

import shutil
from pathlib import Path

from ..errors import SourceError
from .hashing import sha256_file


def import_gguf(gguf: Path, cache_root: Path, log=print) -> Path:
    """Return the cached HF directory for `gguf`, creating it if needed."""
    gguf = Path(gguf)
    if not gguf.is_file():
        raise SourceError(f"GGUF file {gguf} does not exist",
                          fix="check `source.path` (or `source.package`) in the recipe")
    digest = sha256_file(gguf)
    final = cache_root / "gguf" / digest
    if (final / "config.json").is_file():
        return final
    log(f"importing {gguf.name} (sha256 {digest[:12]}) to float32 safetensors ...")
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                     dtype=torch.float32)
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except Exception as e:  # the GGUF reader's own error is the useful part
        raise SourceError(f"cannot read GGUF file {gguf}: {e}",
                          fix="use a GGUF of an architecture transformers can load") from e
    tmp = final.with_name(f".{digest}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    cfg = model.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    cfg.dtype = "float32"
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if cfg.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    cfg.to_json_file(str(tmp / "config.json"))
    tok.save_pretrained(str(tmp))
    (tmp / "gguf_source.txt").write_text(f"{gguf.name}\nsha256 {digest}\n")
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    return final
