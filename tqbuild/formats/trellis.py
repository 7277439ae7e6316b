"""The packed trellis format (DESIGN §5), numpy reference.

A stored row is cut into blocks of T weights; a block is T·k bits = T·k/32
little-endian uint32 words, bit offset o = bit (o mod 32) of word o // 32.
Symbol b_t (the k low bits of state_t) sits at offset (T−1−t)·k, so the L bits
read LSB-first from that offset, wrapping at T·k, are state_t itself: any
weight decodes from two word loads. Weight = f32(code(state)) · f32(scale).
The pair code (version 3) uses the same bits: a step of two weights t = 2u, 2u+1
takes its value pair from the state of t = 2u + 1 (trellis_codes).
Interleaved: uint32 [blocks/2, rows, 2·T·k/32], [g, r] = row r's blocks 2g, 2g+1.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import torch

from ..kernels.trellis_codes import values_of
from .spec import FormatSpec

# version 2 adds the mul1 code, 3 the pair code; every other artifact stays version 1
# (byte-identical)
VERSIONS = {1: ("1mad", "3inst"), 2: ("1mad", "3inst", "mul1"),
            3: ("1mad", "3inst", "mul1", "pair")}


def version_for(code: str) -> int:
    """The oldest format version that carries `code`."""
    return min(v for v, codes in VERSIONS.items() if code in codes)


@dataclass(frozen=True)
class TrellisEntry:
    """A trellis module's parameters, parsed once from its config entry or
    metadata record (both carry `bits`, `group_size` and the `trellis` dict)."""

    k: int
    T: int
    L: int
    code: str
    axis: int
    interleave: bool

    @classmethod
    def from_config(cls, entry: dict) -> TrellisEntry:
        t = entry["trellis"]
        v = t.get("version")
        if v not in VERSIONS:
            raise ValueError(f"trellis format version {v} is not supported (this tq-build "
                             f"reads versions {', '.join(map(str, VERSIONS))}); upgrade tq-build")
        if t.get("code") not in VERSIONS[v]:
            raise ValueError(f"trellis code {t.get('code')!r} is not part of format version "
                             f"{v} (it has {', '.join(VERSIONS[v])})")
        return cls(k=entry["bits"], T=entry["group_size"], L=t["L"], code=t["code"],
                   axis=int(t["axis"]), interleave=bool(t["interleave"]))

    @classmethod
    def from_spec(cls, spec) -> TrellisEntry:
        tp = spec.trellis
        return cls(k=spec.bits, T=tp.T, L=tp.L, code=tp.code, axis=int(tp.axis),
                   interleave=tp.interleave)

    def trellis_dict(self) -> dict:
        return {"L": self.L, "code": self.code, "axis": self.axis,
                "interleave": self.interleave, "version": version_for(self.code)}

    def config(self) -> dict:
        return {"group_size": self.T, "bits": self.k, "mode": "trellis",
                "trellis": self.trellis_dict()}

    def lead_dims(self, stored_ndim: int) -> int:
        """Leading (stacked-expert) dims of a stored `.weight`."""
        return stored_ndim - (3 if self.interleave else 2)

    def plain_words(self, words):
        """Stored words (numpy, torch or mlx; [.., g, rows, pair] when interleaved)
        -> the plain layout [.., rows, words]."""
        if not self.interleave:
            return words
        *lead, g, rows, pair = words.shape
        return words.swapaxes(-3, -2).reshape(*lead, rows, g * pair)

    def logical_shape(self, stored: list[int]) -> list[int]:
        *lead, rows, nw = (*stored[:-3], stored[-2], stored[-3] * stored[-1]) \
            if self.interleave else stored
        cols = nw * 32 // self.k
        return [*lead, rows, cols] if self.axis == 1 else [*lead, cols, rows]

    def decode(self, words: np.ndarray, scales: np.ndarray) -> np.ndarray:
        """Stored words + scales (any leading dims) -> float32 [.., out, in]."""
        plain = np.ascontiguousarray(self.plain_words(words))
        lead = plain.shape[:-2]
        ws = plain.reshape(-1, *plain.shape[-2:])
        ss = scales.reshape(ws.shape[0], -1)
        mats = [decode(w, s, k=self.k, T=self.T, L=self.L, code=self.code, axis=self.axis)
                for w, s in zip(ws, ss, strict=True)]
        return np.stack(mats).reshape(*lead, *mats[0].shape)


def check_geometry(T: int, k: int, L: int, length: int, where: str = "") -> str | None:
    """None if a coded length fits the format, else what is wrong."""
    if (T * k) % 32:
        return f"T·k = {T}·{k} is not a multiple of 32{where}"
    if T * k < L:
        return f"a block of T·k = {T * k} bits cannot hold an L = {L} bit state{where}"
    if length % T:
        return f"the coded length {length} is not a multiple of T = {T}{where}"
    return None


def pack(states: np.ndarray, k: int, T: int) -> np.ndarray:
    """states [rows, cols] (cols = blocks·T, any int dtype) -> uint32 [rows, cols·k/32].

    Symbol t lands at bit offset (T−1−t)·k of its block (reversed time); one
    vectorised OR per time step into 64-bit accumulators, then each word takes
    the bits its left neighbour's symbols carried past bit 32."""
    rows, cols = states.shape
    nb, nw = cols // T, T * k // 32
    # time-major, so each step touches contiguous memory
    sym = np.ascontiguousarray((states.reshape(rows * nb, T) & ((1 << k) - 1)).T
                               ).astype(np.uint64)
    acc = np.zeros((nw, rows * nb), dtype=np.uint64)
    for t in range(T):
        o = (T - 1 - t) * k
        acc[o // 32] |= sym[t] << np.uint64(o % 32)
    words = acc & np.uint64(0xFFFFFFFF)
    words[1:] |= acc[:-1] >> np.uint64(32)
    return np.ascontiguousarray(words.astype(np.uint32).T).reshape(rows, nb * nw)


def pack_tensor(states, k: int, T: int) -> np.ndarray:
    """`pack` for a torch tensor of states on any device (the encoder's): the
    words are formed where the states are (no gather of the int64 states to the
    host), equal to `pack`'s bit for bit."""
    import torch

    rows, cols = states.shape
    nb, nw = cols // T, T * k // 32
    o = (T - 1 - torch.arange(T, device=states.device)) * k
    sym = (states.reshape(rows * nb, T).long() & ((1 << k) - 1)) << (o % 32)
    acc = torch.zeros(rows * nb, nw, dtype=torch.int64, device=states.device)
    acc.index_add_(1, o // 32, sym)  # disjoint bits: add == or, exact in any order
    words = acc & 0xFFFFFFFF
    words[:, 1:] |= acc[:, :-1] >> 32
    return words.cpu().numpy().astype(np.uint32).reshape(rows, nb * nw)


def states_of(words: np.ndarray, k: int, T: int, L: int) -> np.ndarray:
    """uint32 [rows, cols·k/32] -> int64 states [rows, cols], each from two word loads."""
    rows, nw = words.shape
    wpb = T * k // 32
    nb = nw // wpb
    w = words.reshape(rows, nb, wpb).astype(np.uint64)
    off = (T - 1 - np.arange(T)) * k  # bit offset of each state's window
    i0 = off // 32
    i1 = (i0 + 1) % wpb  # the window wraps from the block's last word to its first
    pair = w[..., i0] | (w[..., i1] << np.uint64(32))
    s = (pair >> (off % 32).astype(np.uint64)) & np.uint64((1 << L) - 1)
    return s.reshape(rows, nb * T).astype(np.int64)


def interleave(words: np.ndarray, k: int, T: int) -> np.ndarray:
    """[rows, blocks·T·k/32] -> [blocks/2, rows, 2·T·k/32]."""
    rows, nw = words.shape
    pair = 2 * T * k // 32
    if nw % pair:
        raise ValueError(f"interleaving needs an even number of blocks per row ({nw} words)")
    return np.ascontiguousarray(words.reshape(rows, nw // pair, pair).transpose(1, 0, 2))


def deinterleave(words: np.ndarray) -> np.ndarray:
    g, rows, pair = words.shape
    return np.ascontiguousarray(words.transpose(1, 0, 2)).reshape(rows, g * pair)


def decode_stored(words: np.ndarray, scales: np.ndarray, *, k: int, T: int, L: int,
                  code: str, interleaved: bool = False) -> np.ndarray:
    """Packed words + fp16 scales -> float32 [rows, cols] in the stored orientation."""
    if interleaved:
        words = deinterleave(words)
    return values_of(states_of(words, k, T, L), code, L) * scales.astype(np.float32)[:, None]


def decode(words: np.ndarray, scales: np.ndarray, *, k: int, T: int, L: int, code: str,
           axis: int, interleaved: bool = False) -> np.ndarray:
    """-> float32 weight [out, in] (axis 0 is stored transposed)."""
    w = decode_stored(words, scales, k=k, T=T, L=L, code=code, interleaved=interleaved)
    return np.ascontiguousarray(w.T) if axis == 0 else w


def recon_hash(recon_stored: np.ndarray) -> str:
    """sha256 of the float32 reconstruction in the stored orientation."""
    # the array's buffer, not a bytes copy (hashlib releases the GIL on it)
    return hashlib.sha256(np.ascontiguousarray(recon_stored, dtype=np.float32).data
                          ).hexdigest()


class TrellisFormat(FormatSpec):
    """QTIP bitshift trellis (this module's layout), fp16 per-row scales."""

    name = "trellis"
    hash_key = "recon_sha256"
    mlx_native = False

    def encode_cost(self, spec, shape) -> float:
        return float(np.prod(shape)) * 2.0 ** spec.trellis.L  # Viterbi: weights × states

    def config_entry(self, spec) -> dict:
        return TrellisEntry.from_spec(spec).config()

    def logical_shape(self, stored, entry) -> list[int]:
        return TrellisEntry.from_config(entry).logical_shape(stored)

    def dequantize(self, weight, scales, biases, entry, compute_dtype=None) -> torch.Tensor:
        te = TrellisEntry.from_config(entry)
        return torch.from_numpy(te.decode(weight.numpy(), scales.numpy()))

    def values_hash(self, tensors, entry, dtype) -> str:
        te = TrellisEntry.from_config(entry)
        w = te.decode(tensors["weight"].numpy(), tensors["scales"].numpy())
        w = w.reshape(-1, *w.shape[-2:])
        return recon_hash(w if te.axis == 1 else np.ascontiguousarray(w.transpose(0, 2, 1)))

    def stored_bytes(self, spec, shape, dtype_bytes) -> int:
        n = int(np.prod(shape))
        return n * spec.bits // 8 + 2 * n // shape[-1 if spec.trellis.axis == 1 else -2]


TRELLIS = TrellisFormat()
