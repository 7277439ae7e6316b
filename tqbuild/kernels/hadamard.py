"""Seeded random-Hadamard rotations (DESIGN §8 "Sign stream", "Hadamard").

R = diag(signs(seed, n, lane)) · H_n, with H_n = kron(H_K, S_{n/K}) / √n,
S Sylvester and H_K a QuaRot constant (K = 1 for powers of two).
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from ..errors import UnsupportedSize

# QuaRot's order: the first K with n/K a power of two wins.
QUAROT_ORDER = (172, 156, 140, 108, 60, 52, 36, 28, 40, 20, 12)
_CONSTANTS = Path(__file__).with_name("hadamard_constants.npz")


def signs(seed: int, n: int, lane: int) -> np.ndarray:
    """±1 float64 vector of length n from the counter-based Philox stream."""
    raw = np.random.Philox(key=seed * 2**32 + lane).random_raw(n)
    return np.where(raw & 1, -1.0, 1.0)


def _is_pow2(m: int) -> bool:
    return m >= 1 and (m & (m - 1)) == 0


def factor(n: int) -> int | None:
    """The K of QuaRot's table used for size n (1 for powers of two), or None."""
    if _is_pow2(n):
        return 1
    for k in QUAROT_ORDER:
        if n % k == 0 and _is_pow2(n // k):
            return k
    return None


def supported(n: int) -> bool:
    return factor(n) is not None


def nearest_supported(n: int) -> tuple[int | None, int | None]:
    """The closest supported sizes below and above n."""
    below = next((m for m in range(n - 1, 0, -1) if supported(m)), None)
    above = next(m for m in range(n + 1, 4 * n + 2) if supported(m))
    return below, above


def check_size(n: int, what: str) -> None:
    if not supported(n):
        lo, hi = nearest_supported(n)
        raise UnsupportedSize(
            f"no Hadamard construction for n = {n} ({what})",
            fix=f"supported sizes are K·2^m for K in {sorted(QUAROT_ORDER)} or powers of two; "
            f"the nearest are {lo} and {hi}. Turn this rotation off for this model.",
        )


@functools.cache
def _quarot(k: int) -> np.ndarray:
    with np.load(_CONSTANTS) as z:
        return z[f"quarot_had{k}"].astype(np.float64)


def sylvester(m: int) -> np.ndarray:
    h = np.ones((1, 1))
    while h.shape[0] < m:
        h = np.block([[h, h], [h, -h]])
    return h


@functools.lru_cache(maxsize=8)
def hadamard(n: int) -> np.ndarray:
    """Orthonormal H_n (float64), read-only."""
    check_size(n, "Hadamard")
    k = factor(n)
    assert k is not None  # check_size passed
    base = np.ones((1, 1)) if k == 1 else _quarot(k)
    h = np.kron(base, sylvester(n // k)) / np.sqrt(n)
    h.setflags(write=False)
    return h


def random_hadamard(seed: int, n: int, lane: int) -> np.ndarray:
    """R = diag(signs) · H_n, float64 [n, n]."""
    return signs(seed, n, lane)[:, None] * hadamard(n)
