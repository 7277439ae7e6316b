"""CUDA decode-matvec of the pair trellis code (`runtime/pair_gemv.cu`), mostly with int8
activations in groups of 32 (runtime/act_int8.py's quantization): one library per
(k, L), built with nvcc on first use and cached, called through ctypes on torch's
current stream (CUDA-graph capturable). Where nvcc or the build is missing,
`available()` is False (warned once) and the pair code's modules run expanded.

Rows (axis 1) for M ≤ 8 where x's copy fits a block's shared memory beside the table: on
int8 x below ROWS_MMA_FROM_M rows, from there on the tensor cores (x as bf16 or fp16, one
decode for every row); cols (axis 0) up to COLS_M input rows a launch pair sharing one
decode (the packed-fp16 walk; the int8 walk a row a pair)."""

from __future__ import annotations

import ctypes
import functools
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..kernels import nvcc
from ..kernels.trellis_codes import PAIR_CODES
from . import gpu_info, trellis_cuda
from .act_int8 import GROUP

SOURCE = Path(__file__).with_name("pair_gemv.cu")
MAX_M = 8
FACTOR = 1.0 / 8192  # the table's int16 unit
# the rows instances (M, rb, wpr, threads a block) of pair_gemv.cu's TQ_PAIR_ROWS_INSTANCES
ROWS_INSTANCES = [(1, 2, 1, 512), (1, 2, 2, 512), (1, 4, 1, 512), (1, 4, 2, 512),
                  (1, 1, 1, 1024), (1, 2, 1, 1024), (1, 2, 2, 1024), (2, 2, 1, 512),
                  (2, 2, 2, 512), (2, 1, 1, 1024), (3, 1, 1, 512), (3, 1, 2, 512),
                  (4, 1, 1, 512), (4, 1, 2, 512), (4, 2, 1, 512), (4, 1, 1, 1024),
                  (5, 1, 1, 512), (6, 1, 1, 512), (7, 1, 1, 512), (8, 1, 1, 512)]
# (rb, wpr, threads) a rows launch uses by M
# (H100, bench/results/pair_gemv-cuda-s18.json: the best at M = 1 and 4 on every shape and k)
ROWS_CFG = {1: (2, 1, 1024), 2: (2, 1, 512), 3: (1, 1, 512), 4: (2, 1, 512), 5: (1, 1, 512),
            6: (1, 1, 512), 7: (1, 1, 512), 8: (1, 1, 512)}

# the rows kernel on the tensor cores (pair_gemv.cu's pair_rows_mma: x as bf16 or fp16, any
# M ≤ 8 sharing one decode) as rows cfgs (0, pp, threads): pp the run of adjacent periods a
# lane takes of a row an item (1, 2, 4: its words in fewer, wider loads); the run a k takes
# by default (the longest of them its blocks hold), and the M from which a rows call takes it
# (H100, bench/results/pair_mma_variants-s33a.json, M = 4 and 8 on 8192² and gate: k = 3
# fastest at pp = 4 (8192², M = 4: 19.20 µs against 23.60 at pp = 1, int8 25.97), k = 4 at
# pp = 2 (21.15 against 22.06); k = 2, untimed, takes pp = 4 as k = 3 does: a run of 8 words,
# two 16-byte loads, as k = 4's. From M = 3 on (bench/results/pair_gemv-cuda-s33b-k3.json,
# -k4.json, another H100: at M = 3 the default run beats the int8 instance on 8192² and gate
# at k = 3 (19.07 against 26.51 µs on 8192²) and k = 4; at M = 2 it ties or loses (8192², k = 3:
# 18.71 against 18.60; gate 27.22 against 23.89))
ROWS_MMA_CFGS = [(0, 1, 512), (0, 2, 512), (0, 4, 512)]
ROWS_MMA_PP = {2: 4, 3: 4, 4: 2}
ROWS_MMA_FROM_M = 3

# a cols launch's (sub, half): warps walking one cols tile's inputs together (pair_gemv.cu's
# pair_cols: 1 or 2), and whether the walk runs in packed fp16 (1) or on int8 inputs (0).
# (1, 1): the fastest of the four at k = 2, 3, 4 on 5120 × 17408 and at k = 3 on 4096 × 14336
# (H100, bench/results/pair_gemv-cuda-s29b-cols.json, -s29-cols.json: 2–7 % ahead of (1, 0))
COLS_CFG = (1, 1)
COLS_M = 4  # rows a cols launch shares its decode over (pair_gemv.cu's COLS_M)

_libs: dict[tuple[int, int], ctypes.CDLL | None] = {}


_P, _I, _F, _Z = ctypes.c_void_p, ctypes.c_int, ctypes.c_float, ctypes.c_size_t
# the library's C entry points: (result, arguments) — tests/test_pair_cuda.py checks them
# against the declarations in pair_gemv.cu
SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "tq_pair_rows": (_I, [_P, _P, _P, _P, _I, _P] + [_I] * 8 + [_F, _I, _I, _P]),
    "tq_pair_cols": (_I, [_P, _P, _P, _P, _I, _P, _P] + [_I] * 7 + [_F, _I, _I, _P]),
    "tq_pair_rows_mma": (_I, [_P, _P, _P, _P, _I, _P] + [_I] * 6 + [_F, _I, _I, _P]),
    "tq_pair_rows_smem": (_Z, [_I] * 4),
    "tq_pair_rows_mma_smem": (_Z, [_I] * 2),
    "tq_pair_cols_smem": (_Z, [_I] * 4)}


def _flags(k: int, L: int) -> list[str]:
    """nvcc defines of the (k, L) library; TQBUILD_PAIR_FLAGS adds benchmark sweeps' (part
    of the cache key); TQ_PDL_IN follows inductor's PDL (`gpu_info.pdl_defines`)."""
    return [f"-DTQ_K={k}", f"-DTQ_L={L}", *gpu_info.pdl_defines("TQBUILD_PAIR_FLAGS", "TQ_PDL_IN")]


def _load(k: int, L: int) -> ctypes.CDLL:
    dll = nvcc.build(SOURCE, _flags(k, L))
    for name, (res, args) in SIGNATURES.items():
        f = getattr(dll, name)
        f.restype, f.argtypes = res, args
    return dll


def library(k: int, L: int) -> ctypes.CDLL | None:
    """The (k, L) library, built on first use; None (warned once) if it cannot be."""
    if (k, L) not in _libs:
        try:
            _libs[k, L] = _load(k, L)
        except Exception as e:  # noqa: BLE001 - nvcc missing, compile or load failure
            warnings.warn(f"pair-code CUDA kernels unavailable for k={k}, L={L} "
                          f"({type(e).__name__}: {str(e)[:300]}); their modules run expanded",
                          stacklevel=2)
            _libs[k, L] = None
    return _libs[k, L]


def _index(x: torch.Tensor) -> int:
    return x.device.index if x.device.index is not None else torch.cuda.current_device()


@functools.cache
def _sm_count(device: int) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


@functools.cache
def _table(device: torch.device) -> torch.Tensor:
    """The 512 entries as stored (two int16 in a word), on `device`."""
    from ..kernels.pair_table import ENTRIES

    words = np.asarray(ENTRIES, dtype=np.uint32).view(np.int32)
    return torch.from_numpy(words.copy()).to(device)


def available(x: torch.Tensor, code: str, k: int, L: int, T: int, axis: int,
              out_features: int, in_features: int) -> bool:
    """These kernels serve this call: CUDA, the pair code, whole periods and groups,
    M ≤ 8 (rows: x's copy — int8, or halves for the tensor-core kernel — fits beside the
    table; cols: no more 1024-output tiles than SMs), a library that builds."""
    M = x.shape[0]
    coded = in_features if axis == 1 else out_features
    if not x.is_cuda or code not in PAIR_CODES or trellis_cuda.mode() == "float" or \
            M > MAX_M or x.dtype not in trellis_cuda.DTYPES or in_features % GROUP or \
            not trellis_cuda.geometry_ok(k, L, T, coded, in_features) or \
            torch.cuda.get_device_capability(x.device)[0] < 9:
        return False
    lib = library(k, L)
    if lib is None:
        return False
    if axis == 1:
        rb, _, nth = rows_cfg(lib, M, in_features, T, k)
        need = lib.tq_pair_rows_smem(M, in_features, rb, nth) if rb else 0
    else:
        blocks = _sm_count(_index(x))
        if (out_features // 32 + 31) // 32 > blocks:
            return False  # a block's units would span more than two tiles (tq_pair_cols: −4)
        need = lib.tq_pair_cols_smem(in_features, out_features, blocks, COLS_CFG[1])  # a row
    return need <= trellis_cuda.SMEM_LIMIT


def rows_mma(k: int, T: int) -> tuple[int, int, int]:
    """The tensor-core rows cfg at k for blocks of T weights: ROWS_MMA_PP[k]'s run of
    periods, or the longest shorter one a block holds (T ≥ 32·pp)."""
    pp = ROWS_MMA_PP.get(k, 1)
    while pp > 1 and T < 32 * pp:
        pp //= 2
    return (0, pp, 512)


def rows_cfg(lib: ctypes.CDLL, M: int, in_features: int, T: int,
             k: int) -> tuple[int, int, int]:
    """The rows instance a call of M rows of x takes by default: rows_mma from
    ROWS_MMA_FROM_M rows where its shared memory (x's halves) fits, else ROWS_CFG's."""
    if M >= ROWS_MMA_FROM_M and \
            lib.tq_pair_rows_mma_smem(M, in_features) <= trellis_cuda.SMEM_LIMIT:
        return rows_mma(k, T)
    return ROWS_CFG[M]


@nvcc.on_tensor_device
def matvec(x: torch.Tensor, words: torch.Tensor, scales: torch.Tensor, *, k: int, T: int,
           L: int, axis: int, out_features: int, in_features: int,
           cfg: tuple[int, ...] | None = None,
           out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """x [M, in] (f32/bf16/f16) · the packed weight -> [M, out] of out_dtype (f32/bf16/f16,
    written by the kernels: rounded once); words in the plain stored layout (int32), scales
    fp16 [stored rows]; cfg: (rb, wpr, threads) for rows (ROWS_MMA_CFGS: the tensor-core kernel),
    (sub, half) for cols."""
    lib = library(k, L)
    assert lib is not None
    x = x.contiguous()
    words = trellis_cuda.aligned_words(words)
    M = x.shape[0]
    dt, odt = trellis_cuda.DTYPES[x.dtype], trellis_cuda.DTYPES[out_dtype]
    blocks = _sm_count(_index(x))
    table = _table(x.device)
    stream = nvcc.stream_of(x)
    pdl = int(trellis_cuda.pdl(_index(x)))  # programmatic dependent launch where built for it
    out = torch.empty(M, out_features, device=x.device, dtype=out_dtype)
    if axis == 1:
        rb, wpr, nth = cfg or rows_cfg(lib, M, in_features, T, k)  # type: ignore[misc]
        if rb == 0:  # ROWS_MMA_CFGS: (0, pp, 512)
            rc = lib.tq_pair_rows_mma(words.data_ptr(), scales.data_ptr(), table.data_ptr(),
                                      x.data_ptr(), dt, out.data_ptr(), odt, M, out_features,
                                      in_features, T, wpr, FACTOR, blocks, pdl, stream)
        else:
            rc = lib.tq_pair_rows(words.data_ptr(), scales.data_ptr(), table.data_ptr(),
                                  x.data_ptr(), dt, out.data_ptr(), odt, M, out_features,
                                  in_features, T, rb, wpr, nth, FACTOR, blocks, pdl, stream)
    else:
        sub, half = cfg or COLS_CFG
        # the rows' sums (a launch's rows at most COLS_M), then tile_range
        part = torch.empty(blocks * (2048 * min(M, COLS_M) + 2), device=x.device,
                           dtype=torch.float32)
        rc = lib.tq_pair_cols(words.data_ptr(), scales.data_ptr(), table.data_ptr(),
                              x.data_ptr(), dt, part.data_ptr(), out.data_ptr(), odt, M,
                              in_features, out_features, T, sub, half, FACTOR, blocks, pdl,
                              stream)
    if rc != 0:
        raise RuntimeError(f"pair-code CUDA kernel launch failed (code {rc})")
    return out
