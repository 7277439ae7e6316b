"""The keyword a transformers model's forward takes its KV cache under: `cache`
from transformers 5.24 on, `past_key_values` before. The wrong one is not an
error — the model silently runs without its cache, so every incremental step
sees only its own token (self-generated calibration becomes context-free text)."""

from __future__ import annotations

import inspect

_NAMES: dict[type, str] = {}  # model class -> its forward's cache keyword


def cache_kwargs(model, cache) -> dict:
    """{keyword: cache} for model(...) on the installed transformers."""
    cls = type(model)
    if cls not in _NAMES:
        params = inspect.signature(cls.forward).parameters
        _NAMES[cls] = "cache" if "cache" in params else "past_key_values"
    return {_NAMES[cls]: cache}
