"""CUDA decode matmul of MLX affine weights on the tensor cores
(`runtime/affine_gemv.cu`): M ≤ MAX_M rows of bf16/fp16 x, 2-, 4- or 8-bit words,
power-of-two groups, scales and biases in x's dtype. Built with nvcc on first use
(cached) and called through ctypes on torch's current stream (CUDA-graph
capturable); where nvcc or the build is missing it warns once and the Triton kernel
(runtime/affine_triton.py) serves instead. Its values are q·scale + bias rounded once
to x's dtype (the unpacking path rounds the float32 value: equal but where that
double rounding differs), float32 sums.

The default for what it serves (TQBUILD_AFFINE_KERNEL unset, 1 or cuda; `triton`
keeps the Triton kernel, 0 the unpacking path): on the H200 it runs 3–6× faster than
the Triton kernel and level with torch's tinygemm int4 kernel at M = 1, up to 2× past
it at M = 8 (bench/results/affine_gemv-cuda.json). Also tested on the host in the
SIMT emulator (tests/simt)."""

from __future__ import annotations

import ctypes
import functools
import os
import warnings
from pathlib import Path

import torch

from ..kernels import nvcc
from . import gpu_info

SOURCE = Path(__file__).with_name("affine_gemv.cu")
MAX_M = 8
BITS = (2, 4, 8)
DTYPES = {torch.bfloat16: 0, torch.float16: 1}
WARPS = 8  # AFF_WARPS: warps a block, each taking whole chunks of the inputs

_failed: list[str] = []


def chosen() -> bool:
    return os.environ.get("TQBUILD_AFFINE_KERNEL", "1") in ("1", "cuda")


def chunk(bits: int) -> int:
    """Inputs a chunk: 16 words of a row."""
    return 16 * 32 // bits


def handles(M: int, K: int, dtype: torch.dtype, param_dtype: torch.dtype, bits: int,
            group_size: int) -> bool:
    """The kernel's shapes: M ≤ MAX_M rows of bf16/fp16 x, scales and biases in its
    dtype, 2, 4 or 8 bits, K whole chunks, a power-of-two group of whole 4-word runs."""
    return (1 <= M <= MAX_M and dtype in DTYPES and param_dtype == dtype and bits in BITS
            and K % chunk(bits) == 0 and group_size & (group_size - 1) == 0
            and group_size % (4 * 32 // bits) == 0)


def serves(x2: torch.Tensor, words: torch.Tensor, scales: torch.Tensor,
           biases: torch.Tensor, bits: int, group_size: int) -> bool:
    """Chosen, a library not failed, x2 [M, K] on CUDA in a shape it `handles`,
    every tensor contiguous, x2 and the words 16-byte aligned."""
    M, K = x2.shape
    return (chosen() and not _failed and x2.is_cuda and scales.dtype == biases.dtype
            and handles(M, K, x2.dtype, scales.dtype, bits, group_size)
            and all(t.is_contiguous() for t in (x2, words, scales, biases))
            and x2.data_ptr() % 16 == 0 and words.data_ptr() % 16 == 0)


def flags() -> list[str]:
    """nvcc defines of the library: TQBUILD_AFFINE_FLAGS adds tuning defines
    (-DTQ_AFF_MINB=3, -DTQ_AFF_PDL=1, …: bench/affine_gemv.py --variants); TQ_AFF_PDL
    follows inductor's PDL unless set there (`gpu_info.pdl_defines`)."""
    return gpu_info.pdl_defines("TQBUILD_AFFINE_FLAGS", "TQ_AFF_PDL")


@functools.cache
def _library() -> ctypes.CDLL:
    dll = nvcc.build(SOURCE, flags())
    P, I = ctypes.c_void_p, ctypes.c_int
    dll.tq_affine_mma.restype = I
    dll.tq_affine_mma.argtypes = [P] * 5 + [I] * 7 + [P]
    return dll



def splits_for(N: int, K: int, bits: int, sms: int) -> int:
    """Input splits: 1 where the 16-row tiles give a quarter of the SMs a block (a
    split adds a float32 sum kernel), else enough splits to reach about one block an
    SM, each keeping a chunk a warp. A first guess, to be measured on the GPU."""
    tiles, chunks = -(-N // 16), K // chunk(bits)
    if 4 * tiles >= sms:
        return 1
    return max(1, min(-(-sms // tiles), chunks // WARPS))


@nvcc.on_tensor_device
def matmul(x2: torch.Tensor, words: torch.Tensor, scales: torch.Tensor, biases: torch.Tensor,
           bits: int, group_size: int, out_features: int,
           splits: int | None = None) -> torch.Tensor | None:
    """x2 [M, K] @ the values .T -> [M, N] in x2's dtype (`serves` first); None where the
    library failed to build or launch (warned once; the caller takes another path)."""
    M, K = x2.shape
    N = out_features
    splits = splits or splits_for(N, K, bits, gpu_info.sm_count(x2.device))
    out = torch.empty((splits, M, N) if splits > 1 else (M, N), device=x2.device,
                      dtype=torch.float32 if splits > 1 else x2.dtype)
    try:
        rc = _library().tq_affine_mma(
            x2.data_ptr(), words.data_ptr(), scales.data_ptr(), biases.data_ptr(),
            out.data_ptr(), M, N, K, group_size, bits, DTYPES[x2.dtype], splits,
            nvcc.stream_of(x2))
        if rc != 0:
            raise RuntimeError(f"launch failed (cudaError {rc})")
    except Exception as e:  # noqa: BLE001 - no nvcc, a compiler or driver failure
        _failed.append(f"{type(e).__name__}: {e}")
        warnings.warn(f"affine CUDA kernel unavailable ({_failed[-1][:300]}); "
                      "using the Triton kernel", stacklevel=3)
        return None
    return out if splits == 1 else out.sum(0).to(x2.dtype)
