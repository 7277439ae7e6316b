"""γ-fold: multiply each norm's gain into the input dim of the linears it feeds,
then leave the norm as identity gain (its eps kept)."""

from __future__ import annotations

import torch

from ..models.base import Family, linears_matching


def effective_gain(w: torch.Tensor, zero_centred: bool) -> torch.Tensor:
    return 1.0 + w if zero_centred else w


def identity_gain(like: torch.Tensor, zero_centred: bool) -> torch.Tensor:
    """Identity in the HF convention (0 for `x·(1+w)` norms, 1 otherwise)."""
    return torch.zeros_like(like) if zero_centred else torch.ones_like(like)


def fold_gain(tensors: dict[str, torch.Tensor], norm: str, readers: list[str],
              zero_centred: bool) -> None:
    """In place: W_r ← W_r · diag(γ) for every reader r; norm ← identity."""
    g = effective_gain(tensors[norm], zero_centred)
    for r in readers:
        tensors[r] = tensors[r] * g
    tensors[norm] = identity_gain(tensors[norm], zero_centred)


def fold_layer(tensors: dict[str, torch.Tensor], family: Family, prefix: str) -> list[str]:
    """Fold every norm of one decoder layer; returns the tensors touched."""
    modules = [k[len(prefix):-len(".weight")] for k in tensors
               if k.startswith(prefix) and k.endswith(".weight")]
    touched = []
    for nf in family.norm_folds:
        norm = f"{prefix}{nf.norm}.weight"
        if norm not in tensors:
            continue
        readers = [f"{prefix}{m}.weight" for m in linears_matching(modules, nf.readers)]
        fold_gain(tensors, norm, readers, family.zero_centred_norms)
        touched += [norm, *readers]
    return touched


def fold_final(tensors: dict[str, torch.Tensor], family: Family) -> list[str]:
    norm, head = f"{family.final_norm}.weight", f"{family.lm_head}.weight"
    fold_gain(tensors, norm, [head], family.zero_centred_norms)
    return [norm, head]
