"""QTIP's computed trellis codes: the value of every L-bit state.

1MAD: x = (s·34038481 + 76625530) mod 2^32, value = (sum of x's 4 bytes − 510)
/ 147.800537109375 (float32). MUL1 (trellis format version 2): the same value
of x = s·0x83DCD12D mod 2^32 — exllamav3's `mul1` hash, without its fp16
rounding of the value (measured at L = 16 on N(0, 1) data: 0.7 % lower MSE than
1MAD at k = 2, 1.1 % at k = 3). 3INST: x = (s·89226354 + 64248484) mod 2^32,
r = (x & 0x8FFF8FFF) ^ 0x3B603B60, value = fp16(r >> 16) + fp16(r & 0xFFFF)
summed in fp16, then divided by its RMS over the 2^16 states (DESIGN §5).
Neither depends on L: an L=12 table is the first 4096 entries of L=16's.

PAIR (format version 3; QTIP's HYB form, V = 2): a state codes TWO weights. The
trellis shifts 2k bits a step; the step's state s (its L-bit window) picks entry
e = bits [L − 9, L) of s·0x83DCD12D mod 2^32 of a 512-entry table of int16 pairs
(pair_table.py, k-means of a 2-D standard normal, units of 2^-13): the low half
is the step's first weight, the high half its second. Stored as the V = 1 bit
layout with k bits a weight: the state of the step's SECOND weight (odd time) is
the step's state. Its decode is a table lookup a two weights (runtime/pair_gemv.cu:
~2.9 SASS instructions a weight against mul1's ~4.5; on the H100 its rows kernel beats
mul1's, its cols kernel does not: bench/trellis_kernels-notes.md, session 18); measured
on N(0, 1) at L = 16 its MSE is 2 % (k = 2)
and 9 % (k = 3) above mul1's, 55 % at k = 4 (bench/results/pair_code_study.json).
"""

from __future__ import annotations

import functools

import numpy as np

CODES = ("1mad", "3inst", "mul1", "pair")
PAIR_CODES = ("pair",)  # two weights a state (V = 2)
PAIR_HASH, PAIR_Q = 0x83DCD12D, 9
# byte-sum codes: value = (bytes of (s·mult + add) mod 2^32 summed − 510) / BYTESUM_DIV
BYTESUM_HASH = {"1mad": (34038481, 76625530), "mul1": (0x83DCD12D, 0)}
BYTESUM_DIV = 147.800537109375
INST3_RMS = 1.24371088  # RMS of QTIP's raw 3INST values over all 2^16 states


def byte_sums(states: np.ndarray, code: str = "1mad") -> np.ndarray:
    """The sum of the 4 bytes of each state's hash (0 .. 1020), uint32."""
    mult, add = BYTESUM_HASH[code]
    x = ((states.astype(np.uint64) * mult + add) & 0xFFFFFFFF).astype(np.uint32)
    return (x & 0xFF) + ((x >> 8) & 0xFF) + ((x >> 16) & 0xFF) + (x >> 24)


def code_bytesum(states: np.ndarray, code: str = "1mad") -> np.ndarray:
    return ((byte_sums(states, code).astype(np.float32) - np.float32(510)) /
            np.float32(BYTESUM_DIV)).astype(np.float32)


def code_3inst_raw(states: np.ndarray) -> np.ndarray:
    """QTIP's 3INST value (fp16 sum), not normalised."""
    x = ((states.astype(np.uint64) * 89226354 + 64248484) & 0xFFFFFFFF).astype(np.uint32)
    r = (x & np.uint32(0x8FFF8FFF)) ^ np.uint32(0x3B603B60)
    hi = (r >> 16).astype(np.uint16).view(np.float16)
    lo = (r & 0xFFFF).astype(np.uint16).view(np.float16)
    return (hi + lo).astype(np.float16)


def code_3inst(states: np.ndarray) -> np.ndarray:
    return (code_3inst_raw(states).astype(np.float64) / INST3_RMS).astype(np.float32)


@functools.lru_cache(maxsize=8)
def code_table(code: str, L: int) -> np.ndarray:
    """float32 [2^L]: the decoded value of every state (read-only)."""
    if code not in CODES:
        raise ValueError(f"unknown trellis code {code!r}; choose one of {', '.join(CODES)}")
    if code in PAIR_CODES:
        raise ValueError(f"code {code!r} has two values a state: use pair_table / values_of")
    states = np.arange(2**L, dtype=np.uint32)
    table = code_3inst(states) if code == "3inst" else code_bytesum(states, code)
    table.setflags(write=False)
    return table


def pair_index(states: np.ndarray, L: int) -> np.ndarray:
    """The table entry of each L-bit step state (int64)."""
    h = (states.astype(np.uint64) * PAIR_HASH) & 0xFFFFFFFF
    return ((h >> (L - PAIR_Q)) & ((1 << PAIR_Q) - 1)).astype(np.int64)


@functools.lru_cache(maxsize=4)
def pair_entries() -> np.ndarray:
    """float32 [512, 2]: the table's value pairs (exact: int16 · 2^-13)."""
    from .pair_table import ENTRIES, UNIT

    e = np.asarray(ENTRIES, dtype=np.uint32)
    v = np.stack([(e & 0xFFFF).astype(np.uint16).view(np.int16),
                  (e >> 16).astype(np.uint16).view(np.int16)], axis=1)
    out = (v.astype(np.float32) / np.float32(UNIT)).astype(np.float32)
    out.setflags(write=False)
    return out


@functools.lru_cache(maxsize=8)
def pair_table(L: int) -> np.ndarray:
    """float32 [2^L, 2]: the value pair of every step state (read-only)."""
    if not PAIR_Q <= L <= PAIR_Q + 7:
        raise ValueError(f"the pair code needs {PAIR_Q} <= L <= {PAIR_Q + 7}, got L={L}")
    out = pair_entries()[pair_index(np.arange(2**L, dtype=np.uint32), L)]
    out.setflags(write=False)
    return out


def values_of(states: np.ndarray, code: str, L: int) -> np.ndarray:
    """float32 values of per-weight states [.., T·n] (the V = 1 reading of the bits:
    L bits from each weight's offset): a byte-sum/3INST code's table entry, or for a
    pair code the pair of each odd-time state spread over its two weights."""
    if code not in PAIR_CODES:
        return code_table(code, L)[states]
    step = states[..., 1::2]
    return pair_table(L)[step].reshape(*states.shape)
