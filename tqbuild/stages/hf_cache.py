"""The keyword a transformers model's forward takes its KV cache under: `cache`
from transformers 5.24 on, `past_key_values` before. The wrong one is not an
error — the model silently runs without its cache, so every incremental step
sees only its own token (self-generated calibration becomes context-free text)."""

from __future__ import annotations

import functools
import inspect


@functools.cache
def _cache_name(cls: type) -> str:
    return "cache" if "cache" in inspect.signature(cls.forward).parameters else "past_key_values"


def cache_kwargs(model, cache) -> dict:
    """{keyword: cache} for model(...) on the installed transformers."""
    return {_cache_name(type(model)): cache}
