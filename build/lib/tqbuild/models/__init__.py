"""Architecture facts, one module per Hugging Face model_type, looked up by name."""

from __future__ import annotations

import importlib

from ..errors import SourceError
from .base import Family

SUPPORTED = ("llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "qwen3_next", "qwen3_5",
             "gemma3_text")
ALIASES = {"qwen3_5_text": "qwen3_5"}


def family_for(model_type: str, where: str | None = None) -> Family:
    name = ALIASES.get(model_type, model_type)
    if name not in SUPPORTED:
        raise SourceError(
            f"model_type {model_type!r} is not supported",
            where=where,
            fix=f"tq-build knows {', '.join(SUPPORTED)}; see README 'Adding a model family'",
        )
    return importlib.import_module(f"{__name__}.{name}").FAMILY
