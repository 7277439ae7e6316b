"""TurboQuant KV codec (seed Part A; vllm-metal reference semantics).

Keys: asymmetric affine per 32-group, no rotation (signed int8 at 8 bits,
unsigned and bit-packed at 2/4/5). Values: sign flip, FWHT (1/√d), per-group
RMS scale, Lloyd-Max index, bit-packed. LSB-first bitstream per row.

Two modes:
- `reference`: the reference's exact arithmetic — every op in the INPUT dtype
  (MLX treats Python float scalars as weak), rounded after each op, quirks
  kept (a constant key group has scale 0 and decodes to NaN in fp16).
- `production` (default): float32 arithmetic throughout, scales stored fp16,
  a constant key group encodes as scale 0 / zero = its value, so it decodes
  exactly to its value instead of NaN, and a value group's RMS is a fixed
  halving-tree sum of squares (`tree_sum`) and a square root from +, ×, ÷
  (`newton_sqrt`), so any framework (kv/mlx_codec.py) reproduces it bit for
  bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import BadInput
from . import tables

G = tables.GROUP


@dataclass
class KeyCode:
    indices: np.ndarray  # int8 (8 bits) or uint8 [..., d]
    scales: np.ndarray  # float16 [..., d/32]
    zeros: np.ndarray  # float16 [..., d/32]
    packed: np.ndarray  # int8 indices (8 bits) or uint8 bitstream [..., d·b/8]
    bits: int


@dataclass
class ValueCode:
    indices: np.ndarray  # uint8 [..., d]
    scales: np.ndarray  # float16 [..., d/32]
    packed: np.ndarray  # uint8 [..., d·b/8]
    bits: int
    rotated: np.ndarray | None = None  # the FWHT output (reference mode: in dtype)


def check_head_dim(d: int) -> None:
    if d not in tables.HEAD_DIMS:
        raise BadInput(f"head_dim {d} is not supported by the TurboQuant codec",
                       fix=f"head_dim must be one of {tables.HEAD_DIMS}; keep this model's "
                       "KV cache in bf16 or use mlx-lm's affine KV quantization")


def pack_bits(idx: np.ndarray, bits: int) -> np.ndarray:
    """[..., n] ints -> uint8 [..., n·bits/8], element i at bits [i·b, (i+1)·b)."""
    lead, n = idx.shape[:-1], idx.shape[-1]
    b = ((idx.reshape(-1, n, 1).astype(np.uint32) >> np.arange(bits, dtype=np.uint32)) & 1)
    return np.packbits(b.astype(np.uint8).reshape(-1, n * bits), axis=-1,
                       bitorder="little").reshape(*lead, n * bits // 8)


def unpack_bits(packed: np.ndarray, bits: int, n: int) -> np.ndarray:
    lead = packed.shape[:-1]
    b = np.unpackbits(packed.reshape(-1, packed.shape[-1]), axis=-1, bitorder="little")
    b = b[:, : n * bits].reshape(-1, n, bits).astype(np.uint32)
    return (b << np.arange(bits, dtype=np.uint32)).sum(-1).astype(np.uint8).reshape(*lead, n)


def _t(x: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(dtype)


def _np(t: torch.Tensor) -> np.ndarray:
    return t.float().numpy()


def _round(t: torch.Tensor) -> torch.Tensor:
    return torch.round(t)  # half to even, like mx.round


def fwht(x: torch.Tensor) -> torch.Tensor:
    """Unnormalised Walsh-Hadamard butterflies over the last dim, each stage in
    x's dtype (strides 1, 2, 4, …)."""
    d = x.shape[-1]
    h = 1
    while h < d:
        y = x.reshape(*x.shape[:-1], d // (2 * h), 2, h)
        a, b = y[..., 0, :], y[..., 1, :]
        x = torch.stack([a + b, a - b], -2).reshape(*x.shape[:-1], d)
        h *= 2
    return x


def tree_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the last dim (a power of two) by halving: x[:n/2] + x[n/2:], …"""
    while x.shape[-1] > 1:
        h = x.shape[-1] // 2
        x = x[..., :h] + x[..., h:]
    return x


def newton_sqrt(a: torch.Tensor) -> torch.Tensor:
    """float32 √a (a ≥ 0) from +, ×, ÷ only: a bit-trick start and four Newton
    steps. Backends' sqrt differ in the last bit (MLX's CPU sqrt is not
    correctly rounded), and a last-bit difference can flip the fp16 scale; IEEE
    +, ×, ÷ agree everywhere, so this is the production mode's definition."""
    y = ((a.view(torch.int32) >> 1) + 0x1FBD1DF5).view(torch.float32)
    for _ in range(4):
        y = 0.5 * (y + a / y)
    return torch.where(a == 0, torch.zeros_like(a), y)


def encode_keys(k: np.ndarray, bits: int, dtype: torch.dtype, mode: str = "production",
                signed: bool | None = None, check: bool = True) -> KeyCode:
    """Keys [..., d] -> KeyCode. `signed` defaults to bits == 8 (the reference's
    int8 path); `check=False` skips the head_dim check (raw 32-groups)."""
    signed = bits == 8 if signed is None else signed
    if check:
        check_head_dim(k.shape[-1])
    if bits not in tables.KEY_BITS:
        raise BadInput(f"key bits {bits} unsupported", fix=f"use one of {tables.KEY_BITS}")
    if mode == "reference":
        x = _t(k, dtype)
        eps = torch.tensor(1e-8, dtype=dtype)
    else:
        x = _t(k, torch.float32)
        eps = torch.tensor(1e-8, dtype=torch.float32)
    g = x.reshape(*x.shape[:-1], -1, G)
    mx, mn = g.amax(-1, keepdim=True), g.amin(-1, keepdim=True)
    if signed:
        scale = (mx - mn) / 254
        den = scale + eps
        zero = _round((mx + mn) / (2 * den))
        idx = torch.clamp(_round(g / den - zero), -127, 127)
    else:
        scale = (mx - mn) / ((1 << bits) - 1)
        den = scale + eps
        zero = _round(mn / den)
        idx = torch.clamp(_round(g / den - zero), 0, (1 << bits) - 1)
    if mode != "reference":
        const = scale == 0  # production: a constant group decodes to its value
        zero = torch.where(const, mx, zero)
        idx = torch.where(const.expand_as(idx), torch.zeros_like(idx), idx)
    idx = torch.nan_to_num(idx, nan=0.0)
    idx_np = _np(idx).reshape(k.shape)
    idx_np = idx_np.astype(np.int8) if signed else idx_np.astype(np.uint8)
    scales = _np(scale[..., 0]).astype(np.float16)
    zeros = _np(zero[..., 0]).astype(np.float16)
    packed = idx_np if bits == 8 else pack_bits(idx_np, bits)
    return KeyCode(idx_np, scales, zeros, packed, bits)


def decode_keys(c: KeyCode, mode: str = "production") -> np.ndarray:
    """(float32(idx) + zero) · scale in float32 ([..., d])."""
    idx = c.indices.astype(np.float32)
    g = idx.reshape(*idx.shape[:-1], -1, G)
    zero = c.zeros.astype(np.float32)[..., None]
    scale = c.scales.astype(np.float32)[..., None]
    if mode != "reference":
        const = scale == 0
        out = np.where(const, zero, (g + zero) * scale)
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            out = (g + zero) * scale
    return out.reshape(c.indices.shape).astype(np.float32)


def encode_values(v: np.ndarray, bits: int, dtype: torch.dtype, mode: str = "production"
                  ) -> ValueCode:
    d = v.shape[-1]
    check_head_dim(d)
    if bits not in tables.VALUE_BITS:
        raise BadInput(f"value bits {bits} unsupported", fix=f"use one of {tables.VALUE_BITS}")
    work = dtype if mode == "reference" else torch.float32
    s = torch.from_numpy(tables.signs(d).astype(np.float32)).to(work)
    x = fwht(_t(v, work) * s)
    x = (x.float() * torch.tensor(1 / np.sqrt(d), dtype=torch.float32)).to(work)
    g = x.reshape(*x.shape[:-1], -1, G)
    if mode == "reference":
        ss = (g * g).float().sum(-1, keepdim=True)
        scale = torch.sqrt((ss / G).to(work))
    else:
        scale = newton_sqrt(tree_sum(g * g) / G)
    eps = torch.tensor(1e-8, dtype=work)
    xn = g / (scale + eps)
    bnd = torch.from_numpy(tables.boundaries(bits))
    idx = torch.searchsorted(bnd, xn.float().contiguous(), right=False)
    idx_np = idx.numpy().astype(np.uint8).reshape(v.shape)
    return ValueCode(idx_np, _np(scale[..., 0]).astype(np.float16),
                     pack_bits(idx_np, bits), bits, rotated=_np(x).reshape(v.shape))


def decode_values_rotated(c: ValueCode) -> np.ndarray:
    """centroid[idx] · scale in float32: the values still in the FWHT domain."""
    cent = torch.from_numpy(tables.centroids(c.bits))[torch.from_numpy(c.indices.astype(np.int64))]
    g = cent.reshape(*cent.shape[:-1], -1, G) * torch.from_numpy(
        c.scales.astype(np.float32))[..., None]
    return g.reshape(cent.shape).numpy()


def decode_values(c: ValueCode) -> np.ndarray:
    """centroid[idx] · scale (float32), float32 FWHT with 1/√d, then · signs."""
    d = c.indices.shape[-1]
    y = fwht(torch.from_numpy(decode_values_rotated(c)))
    y = y * torch.tensor(1 / np.sqrt(d), dtype=torch.float32)
    return (y * torch.from_numpy(tables.signs(d).astype(np.float32))).numpy()
