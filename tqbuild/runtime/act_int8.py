"""int8 activations for the trellis decode-matvec: the semantics the CUDA kernels
(runtime/trellis_gemv.cu) implement, in numpy (the slow reference) and in torch
(the CPU emulation that measures what int8 activations cost a model).

The activations each weight meets are cut into groups of 32 along the coded
inputs: for axis 1 (coded along the input dim) the inputs x; for axis 0 (stored
transposed, stored row i = input i) the inputs times their stored row's fp16
scale. A group v (float32) becomes q = rint(v · (127 / max|v|)) (int8, exact
float32 ops), with scale gs = max|v| / 127 — an all-zero group is q = 0. Then,
for a byte-sum code (value = (bytesum(h) − 510) / 147.8…), every output is
exactly Σ_groups gs · Σ (bytesum − 510) · q in integers: only the sum over groups
and the final scale are float."""

from __future__ import annotations

import numpy as np
import torch

from ..formats.trellis import states_of
from ..kernels.trellis_codes import BYTESUM_DIV, BYTESUM_HASH, byte_sums

GROUP = 32


def quantize_np(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float32 [M, n] -> (int8 q [M, n], float32 gs [M, n/32])."""
    v = np.asarray(v, np.float32)
    M, n = v.shape
    g = v.reshape(M, n // GROUP, GROUP)
    a = np.abs(g).max(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = np.where(a > 0, np.float32(127) / a, np.float32(0)).astype(np.float32)
    q = np.clip(np.rint((g * inv[..., None]).astype(np.float32)), -127, 127).astype(np.int8)
    return q.reshape(M, n), (a / np.float32(127)).astype(np.float32)


def matvec_reference(x: np.ndarray, words: np.ndarray, scales: np.ndarray, *, code: str, k: int,
                     T: int, L: int, axis: int) -> np.ndarray:
    """x [M, in] float, plain words [rows, nw] -> float64 [M, out], int8 semantics."""
    states = states_of(np.asarray(words).view(np.uint32), k, T, L)
    vals = byte_sums(states, code).astype(np.int64) - 510
    sc = np.asarray(scales).astype(np.float32)
    x = np.asarray(x, np.float32)
    if axis == 0:  # stored [in, out]: the activation carries its row's scale
        q, gs = quantize_np((x * sc[None, :]).astype(np.float32))
        M, n = q.shape
        per = np.einsum("mgi,gio->mgo", q.reshape(M, n // GROUP, GROUP).astype(np.int64),
                        vals.reshape(n // GROUP, GROUP, -1))
        return np.einsum("mg,mgo->mo", gs.astype(np.float64), per) / BYTESUM_DIV
    q, gs = quantize_np(x)
    M, n = q.shape
    per = np.einsum("rgi,mgi->mrg", vals.reshape(-1, n // GROUP, GROUP),
                    q.reshape(M, n // GROUP, GROUP).astype(np.int64))
    return np.einsum("mg,mrg->mr", gs.astype(np.float64), per) * sc.astype(np.float64) / \
        BYTESUM_DIV


def fake_quantize(v: torch.Tensor) -> torch.Tensor:
    """v [..., n] float -> the float32 values the int8 kernels multiply: gs · q."""
    shape = v.shape
    g = v.float().reshape(*shape[:-1], shape[-1] // GROUP, GROUP)
    a = g.abs().amax(-1, keepdim=True)
    inv = torch.where(a > 0, 127.0 / a, torch.zeros_like(a))
    q = torch.round(g * inv).clamp(-127, 127)  # round half to even, as rint
    return (q * (a / 127.0)).reshape(shape)


def supported(code: str, length: int) -> bool:
    """The int8 path needs a byte-sum code and whole groups of 32 coded inputs."""
    return code in BYTESUM_HASH and length % GROUP == 0
