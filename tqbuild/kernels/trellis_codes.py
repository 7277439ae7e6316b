"""QTIP's computed trellis codes: the value of every L-bit state.

1MAD: x = (s·34038481 + 76625530) mod 2^32, value = (sum of x's 4 bytes − 510)
/ 147.800537109375 (float32). MUL1 (trellis format version 2): the same value
of x = s·0x83DCD12D mod 2^32 — exllamav3's `mul1` hash, without its fp16
rounding of the value (measured at L = 16 on N(0, 1) data: 0.7 % lower MSE than
1MAD at k = 2, 1.1 % at k = 3). 3INST: x = (s·89226354 + 64248484) mod 2^32,
r = (x & 0x8FFF8FFF) ^ 0x3B603B60, value = fp16(r >> 16) + fp16(r & 0xFFFF)
summed in fp16, then divided by its RMS over the 2^16 states (DESIGN §5).
Neither depends on L: an L=12 table is the first 4096 entries of L=16's.
"""

from __future__ import annotations

import functools

import numpy as np

CODES = ("1mad", "3inst", "mul1")
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
    states = np.arange(2**L, dtype=np.uint32)
    table = code_3inst(states) if code == "3inst" else code_bytesum(states, code)
    table.setflags(write=False)
    return table
