"""MLX affine modules in PyTorch, held packed: uint32 words, per-group scales and
biases as stored; each call unpacks with torch ops on the module's device and
forms q·scale + bias in float32 (as MLX's quantized matmul does), so the
values equal `formats.mlx_affine.dequantize_packed(..., compute_dtype=float32)`."""

from __future__ import annotations

import torch
from torch import nn


def unpack_torch(words: torch.Tensor, bits: int) -> torch.Tensor:
    """uint32 words [..., w] (stored as int32/uint32) -> int64 values [..., w·32/bits],
    element i read from the 64-bit window of words i·b//32 and the next."""
    *lead, w = words.shape
    n = w * 32 // bits
    flat = words.reshape(-1, w).view(torch.int32).long() & 0xFFFFFFFF
    start = torch.arange(n, device=words.device) * bits
    i0 = start // 32
    i1 = torch.clamp(i0 + 1, max=w - 1)
    window = flat[:, i0] | ((flat[:, i1] << 32) * (i0 + 1 < w))
    return ((window >> (start % 32)) & ((1 << bits) - 1)).reshape(*lead, n)


def affine_values(words, scales, biases, bits: int, group_size: int) -> torch.Tensor:
    q = unpack_torch(words, bits).float()
    *lead, n = q.shape
    g = q.reshape(*lead, n // group_size, group_size)
    return (g * scales.float()[..., None] + biases.float()[..., None]).reshape(*lead, n)


class _Packed(nn.Module):
    weight: torch.Tensor  # buffers
    scales: torch.Tensor
    biases: torch.Tensor

    def __init__(self, weight: torch.Tensor, scales: torch.Tensor, biases: torch.Tensor,
                 bits: int, group_size: int):
        super().__init__()
        self.bits, self.group_size = bits, group_size
        self.register_buffer("weight", weight.view(torch.int32))
        self.register_buffer("scales", scales)
        self.register_buffer("biases", biases)

    def values(self) -> torch.Tensor:
        return affine_values(self.weight, self.scales, self.biases, self.bits, self.group_size)


class AffineLinear(_Packed):
    def __init__(self, weight, scales, biases, bits: int, group_size: int,
                 bias: torch.Tensor | None = None):
        super().__init__(weight, scales, biases, bits, group_size)
        self.bias = nn.Parameter(bias, requires_grad=False) if bias is not None else None
        self.out_features = weight.shape[0]
        self.in_features = weight.shape[1] * 32 // bits

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, self.values().to(x.dtype), self.bias)


class AffineEmbedding(_Packed):
    """Only the looked-up rows are unpacked."""

    def __init__(self, weight, scales, biases, bits: int, group_size: int, dtype: torch.dtype,
                 embed_scale: torch.Tensor | None = None):
        super().__init__(weight, scales, biases, bits, group_size)
        self.dtype = dtype
        self.embed_scale = embed_scale  # scaled embeddings (gemma3) multiply in the module
        self.num_embeddings = weight.shape[0]
        self.embedding_dim = weight.shape[1] * 32 // bits

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = affine_values(self.weight[ids], self.scales[ids], self.biases[ids], self.bits,
                             self.group_size)
        rows = rows.to(self.dtype)
        return rows if self.embed_scale is None else rows * self.embed_scale.to(self.dtype)

    def as_linear(self) -> AffineLinear:
        """The tied lm_head: the same packed tensors."""
        lin = AffineLinear(self.weight, self.scales, self.biases, self.bits, self.group_size)
        lin.weight, lin.scales, lin.biases = self.weight, self.scales, self.biases
        return lin
