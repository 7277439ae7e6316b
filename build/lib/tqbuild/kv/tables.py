"""TurboQuant constants: Lloyd-Max centroids/boundaries per value width and the
per-head_dim sign vectors, as the reference ships them (kv_tables.npz, copied
from the reference's outputs; the 3-bit table is the reference's hard-coded one)."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

HEAD_DIMS = (64, 128, 256, 512)
VALUE_BITS = (2, 3, 4, 5, 8)
KEY_BITS = (2, 4, 5, 8)
GROUP = 32
_FILE = Path(__file__).with_name("kv_tables.npz")


@functools.cache
def _tables() -> dict[str, np.ndarray]:
    with np.load(_FILE) as z:
        return {k: z[k] for k in z.files}


def centroids(bits: int) -> np.ndarray:
    return _tables()[f"centroids_{bits}bit"]


def boundaries(bits: int) -> np.ndarray:
    return _tables()[f"boundaries_{bits}bit"]


def signs(d: int) -> np.ndarray:
    return _tables()[f"signs_{d}"]
