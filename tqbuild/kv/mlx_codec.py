"""The TurboQuant codec's production mode in MLX ops, on the arrays' device and
without a host sync: equal to kv/codec.py bit for bit (same float32 ops in the
same order: elementwise IEEE arithmetic, round half to even, the halving-tree
sum of squares, the FWHT's butterfly order, numpy's fp16 rounding).

Codes per token-head: keys as int8 indices (8 bits) or an LSB-first uint8
bitstream (2/4/5), fp16 scale and zero per 32-group; values as an LSB-first
bitstream of Lloyd-Max indices and an fp16 RMS scale per 32-group.
"""

from __future__ import annotations

import functools

import mlx.core as mx
import numpy as np

from . import tables
from .codec import check_head_dim

G = tables.GROUP
EPS = 1e-8


@functools.cache
def _consts(d: int, value_bits: int) -> dict[str, mx.array]:
    return {"signs": mx.array(tables.signs(d).astype(np.float32)),
            "inv_sqrt": mx.array(np.float32(1 / np.sqrt(d))),
            "bounds": mx.array(tables.boundaries(value_bits).astype(np.float32)),
            "cent": mx.array(tables.centroids(value_bits).astype(np.float32))}


def pack_bits(idx: mx.array, bits: int) -> mx.array:
    """[..., n] ints < 2^bits -> uint8 [..., n·bits/8], LSB-first."""
    *lead, n = idx.shape
    b = (idx.astype(mx.uint32)[..., None] >> mx.arange(bits, dtype=mx.uint32)) & 1
    b = b.reshape(*lead, n * bits // 8, 8) << mx.arange(8, dtype=mx.uint32)
    return b.sum(-1).astype(mx.uint8)


def unpack_bits(packed: mx.array, bits: int, n: int) -> mx.array:
    """The inverse of pack_bits: every `bits` bytes hold 8 values, so each group
    is read as one little-endian integer and shifted 8 ways."""
    *lead, nb = packed.shape
    g = packed.reshape(*lead, nb // bits, bits).astype(mx.uint64)
    word = g[..., 0]
    for i in range(1, bits):
        word = word | (g[..., i] << (8 * i))
    shifts = mx.arange(0, 8 * bits, bits, dtype=mx.uint64)
    vals = (word[..., None] >> shifts) & ((1 << bits) - 1)
    return vals.reshape(*lead, nb * 8 // bits)[..., :n].astype(mx.uint8)


def _tree_sum(x: mx.array) -> mx.array:
    while x.shape[-1] > 1:
        h = x.shape[-1] // 2
        x = x[..., :h] + x[..., h:]
    return x


def _newton_sqrt(a: mx.array) -> mx.array:
    """codec.newton_sqrt in MLX ops (the same IEEE +, ×, ÷ in the same order)."""
    y = mx.view((mx.view(a, mx.int32) >> 1) + 0x1FBD1DF5, mx.float32)
    for _ in range(4):
        y = 0.5 * (y + a / y)
    return mx.where(a == 0, 0.0, y)


def fwht(x: mx.array) -> mx.array:
    """Unnormalised butterflies over the last dim, strides 1, 2, 4, … (codec.fwht)."""
    *lead, d = x.shape
    h = 1
    while h < d:
        y = x.reshape(*lead, d // (2 * h), 2, h)
        a, b = y[..., 0, :], y[..., 1, :]
        x = mx.stack([a + b, a - b], axis=-2).reshape(*lead, d)
        h *= 2
    return x


def encode_keys(k: mx.array, bits: int) -> tuple[mx.array, mx.array, mx.array]:
    """[..., d] -> (packed, fp16 scales [..., d/32], fp16 zeros [..., d/32])."""
    x = k.astype(mx.float32)
    g = x.reshape(*x.shape[:-1], -1, G)
    hi, lo = g.max(-1, keepdims=True), g.min(-1, keepdims=True)
    if bits == 8:
        scale = (hi - lo) / 254
        den = scale + EPS
        zero = mx.round((hi + lo) / (2 * den))
        idx = mx.clip(mx.round(g / den - zero), -127, 127)
    else:
        scale = (hi - lo) / ((1 << bits) - 1)
        den = scale + EPS
        zero = mx.round(lo / den)
        idx = mx.clip(mx.round(g / den - zero), 0, (1 << bits) - 1)
    const = scale == 0  # a constant group decodes to its value
    zero = mx.where(const, hi, zero)
    idx = mx.where(const, 0.0, idx)
    idx = mx.where(mx.isnan(idx), 0.0, idx).reshape(k.shape)
    packed = idx.astype(mx.int8) if bits == 8 else pack_bits(idx.astype(mx.uint8), bits)
    return packed, scale[..., 0].astype(mx.float16), zero[..., 0].astype(mx.float16)


def decode_keys(packed: mx.array, scales: mx.array, zeros: mx.array, bits: int, d: int
                ) -> mx.array:
    idx = packed if bits == 8 else unpack_bits(packed, bits, d)
    g = idx.astype(mx.float32).reshape(*idx.shape[:-1], -1, G)
    zero = zeros.astype(mx.float32)[..., None]
    scale = scales.astype(mx.float32)[..., None]
    return mx.where(scale == 0, zero, (g + zero) * scale).reshape(idx.shape)


def encode_values(v: mx.array, bits: int) -> tuple[mx.array, mx.array]:
    """[..., d] -> (packed Lloyd-Max indices, fp16 RMS scales [..., d/32])."""
    d = v.shape[-1]
    c = _consts(d, bits)
    x = fwht(v.astype(mx.float32) * c["signs"]) * c["inv_sqrt"]
    g = x.reshape(*x.shape[:-1], -1, G)
    scale = _newton_sqrt(_tree_sum(g * g) / G)
    xn = g / (scale + EPS)
    idx = (xn[..., None] > c["bounds"]).sum(-1).reshape(v.shape)  # searchsorted, left
    return pack_bits(idx, bits), scale[..., 0].astype(mx.float16)


def decode_values(packed: mx.array, scales: mx.array, bits: int, d: int,
                  rotated: bool = False) -> mx.array:
    """centroid · scale; unless `rotated`, the float32 FWHT / √d and the signs."""
    c = _consts(d, bits)
    cent = mx.take(c["cent"], unpack_bits(packed, bits, d).astype(mx.uint32))
    y = (cent.reshape(*cent.shape[:-1], -1, G)
         * scales.astype(mx.float32)[..., None]).reshape(cent.shape)
    return y if rotated else fwht(y) * c["inv_sqrt"] * c["signs"]


def check(key_dim: int, value_dim: int) -> None:
    check_head_dim(key_dim)
    check_head_dim(value_dim)
