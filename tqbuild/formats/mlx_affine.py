"""MLX's affine format: `.weight` uint32 [..., out, in·bits/32] holding each row
as an LSB-first little-endian bitstream (element i at bits [i·b, (i+1)·b)),
`.scales` / `.biases` [..., out, in/group] in the model dtype; w ≈ q·scale + bias.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .spec import FormatSpec

BITS = (2, 3, 4, 5, 6, 8)


def pack(q: np.ndarray, bits: int) -> np.ndarray:
    """Integers [..., n] in [0, 2^bits) -> uint32 [..., n·bits/32]: every 32 elements
    fill `bits` words; one vectorised OR per position in that period. The numpy
    reference: builds pack with `pack_torch` where q was computed."""
    lead, n = q.shape[:-1], q.shape[-1]
    assert (n * bits) % 32 == 0, (n, bits)
    per = 32 // np.gcd(32, bits)  # elements per whole number of words
    nwp = per * bits // 32  # words per period
    v = np.ascontiguousarray((q.reshape(-1, per) & ((1 << bits) - 1)).T).astype(np.uint64)
    acc = np.zeros((nwp, v.shape[1]), dtype=np.uint64)
    for j in range(per):
        o = j * bits
        acc[o // 32] |= v[j] << np.uint64(o % 32)
    words = acc & np.uint64(0xFFFFFFFF)
    words[1:] |= acc[:-1] >> np.uint64(32)
    return np.ascontiguousarray(words.astype(np.uint32).T).reshape(*lead, n * bits // 32)


def pack_torch(q: torch.Tensor, bits: int) -> np.ndarray:
    """`pack` computed where q lives (a GPU build packs on its GPU): the same
    words, in int64 arithmetic, returned as uint32 on the host."""
    lead, n = q.shape[:-1], q.shape[-1]
    assert (n * bits) % 32 == 0, (n, bits)
    per = 32 // math.gcd(32, bits)
    nwp = per * bits // 32
    v = q.reshape(-1, per).to(torch.int64) & ((1 << bits) - 1)
    acc = torch.zeros(v.shape[0], nwp, dtype=torch.int64, device=q.device)
    for j in range(per):
        o = j * bits
        acc[:, o // 32] |= v[:, j] << (o % 32)
    words = acc & 0xFFFFFFFF
    words[:, 1:] |= acc[:, :-1] >> 32
    return words.cpu().numpy().astype(np.uint32).reshape(*lead, n * bits // 32)


def unpack(words: np.ndarray, bits: int) -> np.ndarray:
    """uint32 [..., w] -> integers [..., w·32/bits] (the inverse of `pack`):
    element i is read from the 64-bit window of words i·b//32 and the next."""
    lead, w = words.shape[:-1], words.shape[-1]
    n = w * 32 // bits
    flat = words.reshape(-1, w).astype(np.uint64)
    start = np.arange(n, dtype=np.int64) * bits
    i0 = start // 32
    i1 = np.minimum(i0 + 1, w - 1)  # past the last word only zero bits are read
    window = flat[:, i0] | (flat[:, i1] << np.uint64(32)) * (i0 + 1 < w)
    vals = (window >> (start % 32).astype(np.uint64)) & np.uint64((1 << bits) - 1)
    return vals.astype(np.uint32).reshape(*lead, n)


def group_params(g: torch.Tensor, bits: int, dtype: torch.dtype
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """RTN affine (scale, bias) over the last dim of g, computed in g's dtype and
    rounded to `dtype`: scale = (max − min)/(2^bits − 1), bias = min."""
    lo, hi = g.amin(-1), g.amax(-1)
    return ((hi - lo) / ((1 << bits) - 1)).to(dtype), lo.to(dtype)


def value_operands(scales: torch.Tensor, biases: torch.Tensor, dtype: torch.dtype
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """(bias, divisor) for quantize_values in `dtype`: the rounded scale/bias upcast,
    a zero scale dividing by 1 (so its q is 0 … its clamp)."""
    s, b = scales.to(dtype), biases.to(dtype)
    return b, torch.where(s == 0, torch.ones_like(s), s)


def quantize_with(w: torch.Tensor, bias: torch.Tensor, div: torch.Tensor, bits: int
                  ) -> torch.Tensor:
    """round((w − bias)/div) clamped to [0, 2^bits − 1] (operands from value_operands)."""
    return torch.round((w - bias) / div).clamp_(0, (1 << bits) - 1)


def quantize_values(w: torch.Tensor, scales: torch.Tensor, biases: torch.Tensor, bits: int
                    ) -> torch.Tensor:
    """round((w − bias)/scale) clamped to [0, 2^bits − 1], in w's dtype (the
    rounded scale/bias upcast to it); a zero scale maps to q = 0 … its clamp."""
    return quantize_with(w, *value_operands(scales, biases, w.dtype), bits)


def quantize_rtn(w: torch.Tensor, bits: int, group_size: int,
                 dtype: torch.dtype = torch.bfloat16):
    """Round-to-nearest affine quantization per group of `group_size` inputs.

    Scale and bias are rounded to `dtype` first; q is computed against the
    rounded values. Returns (q int, scales, biases) with scales/biases in `dtype`.
    """
    *lead, n = w.shape
    g = w.reshape(*lead, n // group_size, group_size).to(torch.float32)
    scales, biases = group_params(g, bits, dtype)
    q = quantize_values(g, scales[..., None], biases[..., None], bits)
    return q.reshape(*lead, n).to(torch.int32), scales, biases


def dequantize(q: torch.Tensor, scales: torch.Tensor, biases: torch.Tensor,
               group_size: int) -> torch.Tensor:
    """q·scale + bias computed in the scales' dtype, one rounding per op, exactly
    as `mx.dequantize` does (so bf16 scales give MLX's bf16 values bit for bit)."""
    *lead, n = q.shape
    g = q.reshape(*lead, n // group_size, group_size).to(scales.dtype)
    w = g * scales[..., None] + biases[..., None]
    return w.reshape(*lead, n)


def dequant_hash(w: torch.Tensor) -> str:
    """sha256 of the dequantized values' raw bytes (little-endian, row-major):
    the reconstruction any runtime must reproduce bit for bit."""
    import hashlib

    raw = w.contiguous().view(torch.int16 if w.element_size() == 2 else torch.int32)
    return hashlib.sha256(raw.numpy().data).hexdigest()  # the buffer, no bytes copy


def dequantize_packed(words: torch.Tensor, scales: torch.Tensor, biases: torch.Tensor,
                      bits: int, group_size: int) -> torch.Tensor:
    """A stored affine tensor (packed uint32 words) back to its values, as MLX."""
    q = torch.from_numpy(unpack(words.numpy(), bits).astype(np.int32))
    return dequantize(q, scales, biases, group_size)


class AffineFormat(FormatSpec):
    """MLX's affine mode: packed q, per-group scale and bias."""

    name = "affine"
    parts = ("scales", "biases")

    def config_entry(self, spec) -> dict:
        return {"group_size": spec.group_size, "bits": spec.bits, "mode": "affine"}

    def dequantize(self, weight, scales, biases, entry, compute_dtype=None) -> torch.Tensor:
        if compute_dtype is not None:
            scales, biases = scales.to(compute_dtype), biases.to(compute_dtype)
        return dequantize_packed(weight, scales, biases, entry["bits"],
                                 entry["group_size"]).float()

    def values_hash(self, tensors, entry, dtype) -> str:
        return dequant_hash(dequantize_packed(tensors["weight"], tensors["scales"],
                                              tensors["biases"], entry["bits"],
                                              entry["group_size"]))

    def stored_bytes(self, spec, shape, dtype_bytes) -> int:
        n = int(np.prod(shape))
        return n * spec.bits // 8 + 2 * (n // spec.group_size) * dtype_bytes

    def budget_overhead(self, spec) -> float:
        return 32 / spec.group_size  # a 16-bit scale and bias per group


AFFINE = AffineFormat()
