"""MLX affine modules in PyTorch, held packed: uint32 words, per-group scales and
biases as stored. The values are q·scale + bias formed in float32 (as MLX's
quantized matmul does), equal to `formats.mlx_affine.dequantize_packed(...,
compute_dtype=float32)`, rounded to x's dtype for the matmul. On CUDA, up to
affine_triton.MAX_M rows of x go through a kernel that reads the packed words
directly — the tensor-core CUDA kernel of runtime/affine_cuda.py where it serves
(2/4/8 bits, bf16/fp16), else the Triton kernel of runtime/affine_triton.py;
otherwise each call unpacks the weight with torch ops on the module's device."""

from __future__ import annotations

import torch
from torch import nn

from . import affine_cuda, affine_triton


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


def affine_matmul_impl(x2: torch.Tensor, words: torch.Tensor, scales: torch.Tensor,
                       biases: torch.Tensor, bits: int, group_size: int,
                       out_features: int) -> torch.Tensor:
    """x2 [M, K] @ the values .T in x2's dtype: the CUDA kernel where it serves, else
    the Triton kernel where it serves, else the values unpacked."""
    if affine_cuda.serves(x2, words, scales, biases, bits, group_size):
        y = affine_cuda.matmul(x2, words, scales, biases, bits, group_size, out_features)
        if y is not None:
            return y
    if affine_triton.serves(x2, bits, x2.shape[-1]):
        y = affine_triton.matmul(x2, words, scales, biases, bits, group_size, out_features)
        if y is not None:
            return y
    return x2 @ affine_values(words, scales, biases, bits, group_size).to(x2.dtype).t()


@torch.library.custom_op("tqbuild::affine_matmul", mutates_args=())
def _affine_matmul_op(x2: torch.Tensor, words: torch.Tensor, scales: torch.Tensor,
                      biases: torch.Tensor, bits: int, group_size: int,
                      out_features: int) -> torch.Tensor:
    return affine_matmul_impl(x2, words, scales, biases, bits, group_size, out_features)


@_affine_matmul_op.register_fake
def _(x2, words, scales, biases, bits, group_size, out_features):
    return x2.new_empty(x2.shape[0], out_features)


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
        if x.is_cuda and affine_triton.enabled():  # one op under torch.compile
            y = _affine_matmul_op(x.reshape(-1, self.in_features), self.weight, self.scales,
                                  self.biases, self.bits, self.group_size, self.out_features)
            y = y.reshape(*x.shape[:-1], self.out_features)
            return y if self.bias is None else y + self.bias.to(y.dtype)
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
