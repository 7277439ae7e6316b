"""Packed trellis modules for MLX: only the packed words and fp16 scales stay
resident; each call decodes with MLX ops (two word gathers, shifts, a mask and
a code-table gather per weight, × the scale in float32) and drops the dense
weight when the matmul has consumed it.

The 1MAD code is computed from the state; other codes are gathered from their
table. Paths, by the number of input rows M (as the seed's packed kernels):
  M ≤ SMALL_M (decode): the codes are expanded without their scales and the
      per-row scale is applied to the M×out outputs (axis 1) or the M×in
      inputs (axis 0) — one pass over the weight less;
  larger M (prefill): the weight is expanded with its scales to the
      activation dtype and multiplied (equal to the dense-cached module).
`cache_dense=True` keeps the decoded weight, in the activation dtype, after
the first call (memory for speed, the behaviour before packed decoding).
"""

from __future__ import annotations

import functools

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ..formats.trellis import TrellisEntry
from ..kernels.trellis_codes import BYTESUM_DIV, BYTESUM_HASH, PAIR_CODES, code_table, pair_table

SMALL_M = 8


@functools.cache
def _table(code: str, L: int) -> mx.array:
    return mx.array(code_table(code, L))


@functools.cache
def _pair_table(L: int) -> mx.array:
    return mx.array(pair_table(L))


@functools.cache
def _window_index(k: int, T: int) -> tuple[mx.array, mx.array, mx.array]:
    """Per position t of a block: its window's first word, second word (wrapping
    to the block's first) and bit shift."""
    wpb = T * k // 32
    off = (T - 1 - np.arange(T)) * k
    i0 = off // 32
    return (mx.array(i0.astype(np.int32)), mx.array(((i0 + 1) % wpb).astype(np.int32)),
            mx.array((off % 32).astype(np.uint32)))


def decode_codes(entry: TrellisEntry, words: mx.array) -> mx.array:
    """Stored words (any leading dims) -> float32 code values [.., rows, cols] in
    the stored orientation, without scales."""
    plain = entry.plain_words(words)
    *lead, rows, nw = plain.shape
    wpb = entry.T * entry.k // 32
    w = plain.reshape(*lead, rows, nw // wpb, wpb)
    i0, i1, _ = _window_index(entry.k, entry.T)
    lo, hi = mx.take(w, i0, axis=-1), mx.take(w, i1, axis=-1)
    return _windows_to_codes(entry.k, entry.T, entry.L, entry.code)(lo, hi).reshape(
        *lead, rows, -1)


@functools.cache
def _windows_to_codes(k: int, T: int, L: int, code: str):
    """The elementwise part of the decode (window words -> state -> code value),
    compiled once per geometry: MLX fuses it into one pass (about 2x on a CPU)."""
    sh = _window_index(k, T)[2]

    def f(lo: mx.array, hi: mx.array) -> mx.array:
        state = ((lo >> sh) | ((hi << (31 - sh)) << 1)) & ((1 << L) - 1)  # no shift by 32
        if code in PAIR_CODES:  # a step's pair from its second weight's state
            return mx.take(_pair_table(L), state[..., 1::2], axis=0).reshape(state.shape)
        return code_values(code, L, state)

    return mx.compile(f)


def code_values(code: str, L: int, state: mx.array) -> mx.array:
    """float32 code value of uint32 states: byte-sum codes (1MAD, MUL1) computed
    (kernels/trellis_codes: a hash, a byte sum, one float32 subtraction and
    division — on a CPU about 3× faster than gathering from its table), other
    codes from their table."""
    if code not in BYTESUM_HASH:
        return mx.take(_table(code, L), state)
    mult, add = BYTESUM_HASH[code]
    x = state * mult + add  # uint32: wraps mod 2^32
    total = (x & 255) + ((x >> 8) & 255) + ((x >> 16) & 255) + (x >> 24)
    return (total.astype(mx.float32) - 510) / BYTESUM_DIV


def decode(entry: TrellisEntry, words: mx.array, scales: mx.array) -> mx.array:
    """float32 [.., out, in] == formats.trellis.decode bit for bit."""
    out = decode_codes(entry, words) * scales.astype(mx.float32)[..., None]
    return out if entry.axis == 1 else out.swapaxes(-1, -2)


class TrellisLinear(nn.Module):
    """y = x Wᵀ (+ b) with W held packed."""

    def __init__(self, weight: mx.array, scales: mx.array, *, k: int, T: int, L: int,
                 code: str, axis: int, interleave: bool, bias: mx.array | None = None,
                 cache_dense: bool = False):
        super().__init__()
        self.weight, self.scales = weight, scales
        if bias is not None:
            self.bias = bias
        object.__setattr__(self, "entry", TrellisEntry(k, T, L, code, axis, interleave))
        object.__setattr__(self, "cache_dense", cache_dense)
        object.__setattr__(self, "_dense", None)

    @classmethod
    def from_entry(cls, weight, scales, entry: dict, bias=None, cache_dense: bool = False
                   ) -> TrellisLinear:
        te = TrellisEntry.from_config(entry)
        return cls(weight, scales, k=te.k, T=te.T, L=te.L, code=te.code, axis=te.axis,
                   interleave=te.interleave, bias=bias, cache_dense=cache_dense)

    def decode(self) -> mx.array:
        """float32 [out, in]."""
        return decode(self.entry, self.weight, self.scales)

    def __call__(self, x: mx.array) -> mx.array:
        if self.cache_dense:  # kept in the activation dtype of the first call
            if self._dense is None or self._dense.dtype != x.dtype:
                object.__setattr__(self, "_dense", self.decode().astype(x.dtype))
            y = x @ self._dense.T
        elif x.size // x.shape[-1] <= SMALL_M:
            codes = decode_codes(self.entry, self.weight).astype(x.dtype)
            s = self.scales.astype(x.dtype)
            y = (x @ codes.T) * s if self.entry.axis == 1 else (x * s) @ codes
        else:
            y = x @ self.decode().astype(x.dtype).T
        return y + self.bias if "bias" in self else y


class TrellisSwitchLinear(nn.Module):
    """mlx-lm's SwitchLinear (stacked experts [E, out, in]) held packed: a call
    decodes only the experts its indices select when they are fewer than E,
    else every expert once."""

    def __init__(self, weight: mx.array, scales: mx.array, entry: dict,
                 bias: mx.array | None = None):
        super().__init__()
        self.weight, self.scales = weight, scales
        if bias is not None:
            self.bias = bias
        object.__setattr__(self, "entry", TrellisEntry.from_config(entry))

    @property
    def num_experts(self) -> int:
        return self.weight.shape[0]

    def __call__(self, x: mx.array, indices: mx.array, sorted_indices: bool = False):
        if indices.size < self.num_experts:
            flat = indices.flatten()
            w = decode(self.entry, mx.take(self.weight, flat, axis=0),
                       mx.take(self.scales, flat, axis=0))
            rhs = mx.arange(flat.size, dtype=mx.uint32).reshape(indices.shape)
        else:
            w, rhs = decode(self.entry, self.weight, self.scales), indices
        y = mx.gather_mm(x, w.astype(x.dtype).swapaxes(-1, -2), rhs_indices=rhs,
                         sorted_indices=sorted_indices)
        if "bias" in self:
            y = y + mx.expand_dims(self["bias"][indices], -2)
        return y


def resident_bytes(model: nn.Module) -> dict[str, int]:
    """nbytes of the arrays a model holds: `trellis` (the packed modules' words,
    scales and biases), `dense_cache` (weights kept by cache_dense modules) and
    `other` (every other parameter)."""
    from mlx.utils import tree_flatten

    packed = {name: m for name, m in model.named_modules()
              if isinstance(m, TrellisLinear | TrellisSwitchLinear)}
    out = {"trellis": 0, "dense_cache": 0, "other": 0}
    flat: list[tuple[str, mx.array]] = tree_flatten(model.parameters())  # type: ignore[assignment]
    for name, v in flat:
        out["trellis" if name.rpartition(".")[0] in packed else "other"] += v.nbytes
    for m in packed.values():
        dense = getattr(m, "_dense", None)
        out["dense_cache"] += 0 if dense is None else dense.nbytes
    return out
