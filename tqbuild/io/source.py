"""A Hugging Face safetensors checkpoint read lazily, one tensor at a time."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

from ..errors import SourceError
from .hashing import sha256_file

FLOAT_DTYPES = ("BF16", "F16", "F32")
QUANT_SUFFIXES = (".scales", ".qweight", ".qzeros", ".g_idx", ".weight_scale", ".absmax")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "tokenizer.model", "vocab.json", "merges.txt", "chat_template.jinja",
                   "chat_template.json", "generation_config.json", "added_tokens.json",
                   "LICENSE", "LICENSE.txt", "NOTICE")


class Source:
    """Config + lazily-read tensors of one checkpoint directory."""

    def __init__(self, path: Path, trust_remote_code: bool = False):
        self.path = Path(path)
        cfg_path = self.path / "config.json"
        if not self.path.is_dir() or not cfg_path.is_file():
            raise SourceError(
                f"no checkpoint at {self.path} (config.json missing)",
                fix="point `source.path` at a Hugging Face model directory or a .gguf file",
            )
        self.config = json.loads(cfg_path.read_text())
        if "quantization_config" in self.config or "quantization" in self.config:
            raise SourceError(
                "the source is already quantized (config.json has a quantization entry)",
                where=str(cfg_path),
                fix="use the full-precision (bf16/fp16/fp32) checkpoint; a llama.cpp model "
                "comes in as a .gguf file",
            )
        if "auto_map" in self.config and not trust_remote_code:
            raise SourceError(
                "the source's config.json names custom modelling code (auto_map)",
                where=str(cfg_path),
                fix="set `source: {..., trust_remote_code: true}` in the recipe if you trust "
                "it (tq-build reads the weights only and never imports that code)")
        self._where: dict[str, Path] = {}
        files = sorted(self.path.glob("*.safetensors"))
        if not files:
            raise SourceError(f"no *.safetensors files in {self.path}",
                              fix="convert the checkpoint to safetensors first")
        self.files = files
        self._shapes: dict[str, tuple[int, ...]] = {}
        for f in files:
            h = safe_open(str(f), framework="pt")
            for k in h.keys():
                self._where[k] = f
                if k.endswith(QUANT_SUFFIXES):
                    raise SourceError(
                        f"tensor {k} marks a quantized checkpoint", where=str(f),
                        fix="use the full-precision checkpoint")
                dt = h.get_slice(k).get_dtype()
                if dt not in FLOAT_DTYPES:
                    raise SourceError(
                        f"tensor {k} has dtype {dt}; only bf16/fp16/fp32 sources are supported",
                        where=str(f), fix="use the full-precision checkpoint")
            self._shapes.update({k: tuple(h.get_slice(k).get_shape()) for k in h.keys()})
            del h
        self._stored = {k: k for k in self._where}
        self._alias_vlm()

    def _alias_vlm(self) -> None:
        """A vision-language checkpoint keeps its text trunk under
        `model.language_model.`; tq-build names it as the text model does
        (`model.…`), the vision tower stays `model.visual.…`."""
        pre = "model.language_model."
        if not any(k.startswith(pre) for k in self._where):
            return
        for k in list(self._where):
            if k.startswith(pre):
                name = "model." + k[len(pre):]
                self._where[name] = self._where.pop(k)
                self._shapes[name] = self._shapes.pop(k)
                self._stored[name] = self._stored.pop(k)

    def _open(self, f: Path):
        """A fresh handle per read: a handle maps its whole file, and the pages a
        build touched would otherwise stay resident until the end."""
        return safe_open(str(f), framework="pt")

    def keys(self) -> list[str]:
        return list(self._where)

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def shape(self, name: str) -> tuple[int, ...]:
        return self._shapes[name]

    def get(self, name: str, device: torch.device | str | None = None) -> torch.Tensor:
        """The tensor as float32 (converted and checked on `device`, default CPU);
        NaN/Inf is an error naming it."""
        if name not in self._where:
            raise SourceError(f"tensor {name} is missing from the source", where=str(self.path),
                              fix="check that the checkpoint is complete")
        t = self._open(self._where[name]).get_tensor(self._stored[name])
        t = (t.to(device) if device is not None else t).to(torch.float32)
        if not torch.isfinite(t).all():
            bad = int((~torch.isfinite(t)).sum())
            raise SourceError(f"tensor {name} holds {bad} NaN/Inf values",
                              where=str(self._where[name]),
                              fix="repair or re-export the checkpoint")
        return t

    def file_hashes(self, cache=None) -> dict[str, str]:
        """sha256 of every weight file and config.json; `cache` (io.hash_cache):
        reuse hashes of files unchanged since (size, mtime, inode)."""
        digest = cache.sha256 if cache is not None else sha256_file
        out = {f.name: digest(f) for f in self.files}
        out["config.json"] = digest(self.path / "config.json")
        return out

    def passthrough_files(self) -> list[Path]:
        return [self.path / n for n in TOKENIZER_FILES if (self.path / n).is_file()]
