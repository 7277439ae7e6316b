"""The packed trellis format (DESIGN §5), numpy reference.

A stored row is cut into blocks of T weights; a block is T·k bits = T·k/32
little-endian uint32 words, bit offset o = bit (o mod 32) of word o // 32.
Symbol b_t (the k low bits of state_t) sits at offset (T−1−t)·k, so the L bits
read LSB-first from that offset, wrapping at T·k, are state_t itself: any
weight decodes from two word loads. Weight = f32(code(state)) · f32(scale).
Interleaved: uint32 [blocks/2, rows, 2·T·k/32], [g, r] = row r's blocks 2g, 2g+1.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ..kernels.trellis_codes import code_table

VERSION = 1


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
    table = code_table(code, L)
    return table[states_of(words, k, T, L)] * scales.astype(np.float32)[:, None]


def decode(words: np.ndarray, scales: np.ndarray, *, k: int, T: int, L: int, code: str,
           axis: int, interleaved: bool = False) -> np.ndarray:
    """-> float32 weight [out, in] (axis 0 is stored transposed)."""
    w = decode_stored(words, scales, k=k, T=T, L=L, code=code, interleaved=interleaved)
    return np.ascontiguousarray(w.T) if axis == 0 else w


def recon_hash(recon_stored: np.ndarray) -> str:
    """sha256 of the float32 reconstruction in the stored orientation."""
    return hashlib.sha256(np.ascontiguousarray(recon_stored, dtype=np.float32).tobytes()
                          ).hexdigest()
