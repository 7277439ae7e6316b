"""Untie: give lm_head its own copy of the embedding matrix."""

from __future__ import annotations

import torch

from ..models.base import Family


def is_tied(config: dict, source_keys) -> bool:
    return bool(config.get("tie_word_embeddings", False)) or "lm_head.weight" not in source_keys


def untie(embed: torch.Tensor) -> torch.Tensor:
    """lm_head = a copy of embed_tokens (later folds change only the copy)."""
    return embed.clone()


def lm_head_source(family: Family, config: dict, source_keys) -> str:
    """The source tensor lm_head.weight is read from."""
    return f"{family.embed}.weight" if is_tied(config, source_keys) else f"{family.lm_head}.weight"
