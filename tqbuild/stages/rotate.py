"""R1 (residual) and R2 (per-head v/o) rotations folded into the weights.

Readers of the residual: W ← W · R1 (input dim). Writers: W ← R1ᵀ · W, b ← R1ᵀ b.
R2 per head: v_proj rows (and bias) ← R2ᵀ · block, o_proj columns ← block · R2.
"""

from __future__ import annotations

import torch

from ..kernels.hadamard import random_hadamard
from ..models.base import Family, linears_matching
from .norm_fold import fold_layer

R2_LANE_BASE = 1  # layer i's R2 = lane i + 1 (DESIGN §8)


def rotation(seed: int, n: int, lane: int) -> torch.Tensor:
    return torch.from_numpy(random_hadamard(seed, n, lane)).to(torch.float32)


def rotate_readers_input(w: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """W ← W · R on the input dim (embedding rows too)."""
    return w @ r


def rotate_writer_output(w: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """W ← Rᵀ · W on the output dim (a bias as a column)."""
    return r.T @ w


def r1_layer(tensors: dict[str, torch.Tensor], family: Family, prefix: str,
             r1: torch.Tensor) -> list[str]:
    modules = [k[len(prefix):-len(".weight")] for k in tensors
               if k.startswith(prefix) and k.endswith(".weight")]
    touched = []
    for m in linears_matching(modules, family.residual_readers):
        key = f"{prefix}{m}.weight"
        tensors[key] = rotate_readers_input(tensors[key], r1)
        touched.append(key)
    for m in linears_matching(modules, family.residual_writers):
        for suffix in (".weight", ".bias"):
            key = f"{prefix}{m}{suffix}"
            if key in tensors:
                t = tensors[key]
                tensors[key] = rotate_writer_output(t if t.ndim == 2 else t[:, None], r1
                                                    ).reshape(t.shape)
                touched.append(key)
    return touched


def r2_layer(tensors: dict[str, torch.Tensor], family: Family, prefix: str,
             r2: torch.Tensor) -> list[str]:
    hd = r2.shape[0]
    touched = []
    for suffix in (".weight", ".bias"):
        key = f"{prefix}{family.head_producer}{suffix}"
        if key in tensors:
            t = tensors[key]
            blocks = t.reshape(-1, hd, *t.shape[1:])  # [heads, hd, (in)]
            tensors[key] = torch.einsum("ji,hj...->hi...", r2, blocks).reshape(t.shape)
            touched.append(key)
    key = f"{prefix}{family.head_consumer}.weight"
    if key in tensors:
        w = tensors[key]
        blocks = w.reshape(w.shape[0], -1, hd)  # [out, heads, hd]
        tensors[key] = (blocks @ r2).reshape(w.shape)
        touched.append(key)
    return touched


def fold_decoder_layer(t: dict[str, torch.Tensor], plan, prefix: str, r1: torch.Tensor | None,
                       r2_lane: int, make_rotation=rotation) -> None:
    """A decoder layer's folds in order: γ into its readers, R1, then R2 (lane
    `r2_lane`) — trunk layers and the MTP companion's layers alike.
    `make_rotation(seed, n, lane)`: the R2 matrix (meta tensors when planning)."""
    if plan.has("norm_fold"):
        fold_layer(t, plan.family, prefix)
    if r1 is not None:
        r1_layer(t, plan.family, prefix, r1)
    if plan.r2_on:
        r2_layer(t, plan.family, prefix, make_rotation(plan.rotate.seed, plan.head_dim, r2_lane))
