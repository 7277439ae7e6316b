"""CUDA decode-matvec of packed trellis weights with int8 activations
(`runtime/trellis_gemv.cu`, semantics in runtime/act_int8.py): one library per
(k, L, code), built with nvcc on first use and cached; called through ctypes on
torch's current stream (CUDA-graph capturable). Where nvcc or the build is
missing, `available()` is False (warned once) and the Triton float kernels run.

TQBUILD_TRELLIS_ACT: `auto` (default) — these kernels on CUDA for M ≤ 8 where the
code and geometry allow; `float` — never (the float-activation Triton kernels);
`int8` — also emulate int8 activations on CPU (runtime/trellis_torch.py).
TQBUILD_PDL=0: launch the kernels after x's quantization and the cols kernels'
split sum without programmatic dependent launch (sm_90+; by default each starts
while the kernel before it runs)."""

from __future__ import annotations

import ctypes
import functools
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from ..kernels import nvcc
from ..kernels.trellis_codes import BYTESUM_DIV
from . import gpu_info
from .act_int8 import GROUP

SOURCE = Path(__file__).with_name("trellis_gemv.cu")
CODE_IDS = {"1mad": 0, "mul1": 2}
MAX_M = 8
DTYPES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}

_libs: dict[tuple[int, int, str], ctypes.CDLL] = {}
_failed: dict[tuple[int, int, str], str] = {}


def mode() -> str:
    m = os.environ.get("TQBUILD_TRELLIS_ACT", "auto")
    if m not in ("auto", "float", "int8"):
        raise ValueError(f"TQBUILD_TRELLIS_ACT={m!r}: choose auto, float or int8")
    return m


def _flags(k: int, L: int, code: str) -> list[str]:
    """nvcc defines of one library; TQBUILD_GEMV_FLAGS adds tuning defines
    (e.g. "-DTQ_COLS_DEPTH=2": benchmark sweeps; part of the cache key); TQ_PDL_IN
    follows inductor's PDL unless set there (`gpu_info.pdl_defines`)."""
    extra = gpu_info.pdl_defines("TQBUILD_GEMV_FLAGS", "TQ_PDL_IN")
    return [f"-DTQ_K={k}", f"-DTQ_L={L}", f"-DTQ_CODE={CODE_IDS[code]}", *extra]


def _load(k: int, L: int, code: str) -> ctypes.CDLL:
    dll = nvcc.build(SOURCE, _flags(k, L, code))
    P, I, F, Z = ctypes.c_void_p, ctypes.c_int, ctypes.c_float, ctypes.c_size_t
    sig: dict[str, tuple[Any, list[Any]]] = {
        "tq_gemv_rows_fused": (I, [P, P, P, I, P, I, P] + [I] * 10 + [F, P]),
        "tq_gemv_cols": (I, [P, P, I, P, P, P, I, I] + [I] * 6 + [F, P]),
        "tq_gemv_cols_tc": (I, [P, P, I, P, P, I, P, P, I] + [I] * 7 + [F, P]),
        "tq_gemv_rows_mma": (I, [P, P, P, I, P, I] + [I] * 6 + [F, P]),
        "tq_gemv_rows_tc": (I, [P, P, P, I, P, I, P] + [I] * 7 + [F, P]),
        "tq_gemv_fused_smem": (Z, [I] * 4),
        "tq_gemv_mma_smem": (Z, [I] * 3),
        "tq_gemv_cols_smem": (Z, [I] * 2),
        "tq_gemv_cols_occupancy": (I, [I, I]),
        "tq_gemv_cols_attrs": (I, [I, P]),
        "tq_gemv_cols_raise": (I, [I, Z])}
    for name, (res, args) in sig.items():
        f = getattr(dll, name)
        f.restype, f.argtypes = res, args
    return dll


def geometry_ok(k: int, L: int, T: int, coded: int, in_features: int) -> bool:
    """Whole periods in power-of-two blocks along the coded dim, whole activation
    groups along the inputs."""
    ppb = T // 32
    return (T % 32 == 0 and ppb & (ppb - 1) == 0 and 1 <= k <= 4 and L <= 32
            and coded % T == 0 and in_features % GROUP == 0)


def available(x: torch.Tensor, code: str, k: int, L: int, T: int, coded: int,
              in_features: int, axis: int = 1) -> bool:
    """These kernels serve this call: CUDA, M ≤ 8, a byte-sum code, the geometry,
    the mode, a library that builds (built here on first use) and, coded along
    the inputs, the quantized x fitting in a block's shared memory."""
    M = x.shape[0]
    if not x.is_cuda or M > MAX_M or code not in CODE_IDS or mode() == "float" or \
            not geometry_ok(k, L, T, coded, in_features):
        return False
    lib = library(k, L, code)
    return lib is not None and (axis == 0 or tc_ok(M, in_features, T)
                                or _rows_fit(lib, M, in_features))


@functools.cache
def _rows_fit(lib: ctypes.CDLL, M: int, in_features: int) -> bool:
    """x [M, in_features] quantized fits a rows block's shared memory (asked once per
    shape: this runs on every decode call)."""
    c = rows_cfg(M)
    return lib.tq_gemv_fused_smem(M, in_features, c["RB"], c["warps"] * c["rgb"]) <= SMEM_LIMIT


def library(k: int, L: int, code: str) -> ctypes.CDLL | None:
    key = (k, L, code)
    if key in _libs:
        return _libs[key]
    if key in _failed:
        return None
    try:
        _libs[key] = _load(*key)
    except Exception as e:  # noqa: BLE001 - no nvcc, a compiler or driver failure
        _failed[key] = f"{type(e).__name__}: {e}"
        warnings.warn(f"int8 trellis kernels unavailable for k={k} L={L} {code} "
                      f"({_failed[key]}); using the float Triton kernels", stacklevel=3)
        return None
    return _libs[key]


def prebuild(cases: list[tuple[int, int, str]]) -> None:
    """Compile several (k, L, code) libraries in parallel (nvcc runs outside the GIL)."""
    todo = [c for c in cases if c not in _libs and c not in _failed]
    with ThreadPoolExecutor(max(1, min(len(todo), os.cpu_count() or 1))) as ex:
        list(ex.map(lambda c: library(*c), todo))


def prebuild_for(modules) -> list[tuple[int, int, str]]:
    """Compile, in parallel, the libraries a model's trellis modules (anything
    with k, L and code) will call on CUDA — at load, not at the first token."""
    cases = sorted({(m.k, m.L, m.code) for m in modules if m.code in CODE_IDS})
    if cases and mode() != "float" and torch.cuda.is_available():
        prebuild(cases)
        return cases
    return []


def aligned_words(words: torch.Tensor) -> torch.Tensor:
    """The words 16-byte aligned, as the trellis and pair kernels need them (they load a
    period's words as one vector at k = 2, 4): a misaligned view is copied."""
    return words.clone() if words.data_ptr() % 16 else words


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"int8 trellis {what} launch failed (cudaError {rc})")


SMEM_LIMIT = 200 << 10  # dynamic shared memory a block may take (H100/H200: 227 KB)


PREQUANT_FROM_M = 2  # the dp4a rows kernel reads x quantized once by quantize_x from this M
# on (H200, k = 3, PDL: M = 2 / 4 24.6 / 34.5 µs vs 25.5 / 35.9 with every block quantizing;
# M = 1 17.4 vs 16.8; bench/results/trellis_gemv-cuda-pdl.json)


def rows_cfg(M: int, cfg: dict | None = None) -> dict:
    """Rows per warp by M (registers). Default: a warp owns its rows (`warps` = 1
    per row group, no block-wide reduction), 16 row groups a block, blocks per SM
    at the kernel's occupancy (`bps` 0); `prequant`: x quantized once by a kernel
    before rather than by every block (from PREQUANT_FROM_M)."""
    c = {"RB": 2 if M <= 4 else 1, "warps": 1, "rgb": 16, "bps": 0,
         "prequant": M >= PREQUANT_FROM_M, **(cfg or {})}
    c["rgb"] = max(1, min(c["rgb"], 16 // c["warps"]))  # ≤ 512 threads
    return c


def _split_rows(nrows: int, splits: int) -> int:
    """Rows a split takes so that `splits` splits cover nrows: a multiple of 32."""
    return -(-nrows // (32 * splits)) * 32


def _halved_to_fit(per: int, fits) -> int:
    """per (a multiple of 32) halved, rounded up to a multiple of 32, until fits(per) or 32."""
    while per > 32 and not fits(per):
        per = -(-(per // 2) // 32) * 32
    return per


COLS_BPS = 1  # blocks an SM the default cols split fills (0: as many as the kernel's
# occupancy allows at that split). One block an SM of 8 warps (a split of 448 inputs for the
# 8B down_proj) beat two (224) at M = 1 on an H100: 4096 × 14336 k = 2 / 3 / 4 18.2 / 19.0 /
# 19.6 vs 19.0 / 19.9 / 19.8 µs, the 8B decode 380.3 vs 366.8 tokens/s; at M = 2 two blocks
# were 0–3 % faster (bench/results/cols_splits-cuda-s22a.json, decode_8b-cuda-s22a.json).
# The 16-warp block (the default since session 24) fits one an SM: bps 2 runs two waves


def cols_split(nrows: int, n_out: int, sms: int, occupancy, fits, bps: int = 0) -> int:
    """Input rows a cols block takes (a multiple of 32) by default: one full wave of
    blocks, `bps` an SM (0: the largest b such that b blocks of that split fit an SM,
    by `occupancy(per)`), no more rows than `fits(per)` allows in shared memory."""
    cap = _halved_to_fit(-(-nrows // 32) * 32, fits)
    blocks_x = -(-(n_out // 32) // 32)  # 32 output periods a block

    def per_for(b: int) -> int:
        return min(cap, _split_rows(nrows, max(1, sms * b // blocks_x)))

    if bps > 0:
        return per_for(bps)
    b = max(1, occupancy(32))  # the most blocks an SM holds (the smallest split)
    while b > 1 and occupancy(per_for(b)) < b:
        b -= 1
    return per_for(b)


@functools.cache
def _cols_default(lib: ctypes.CDLL, M: int, nrows: int, n_out: int, sms: int, bps: int) -> int:
    return cols_split(nrows, n_out, sms, lambda per: lib.tq_gemv_cols_occupancy(M, per),
                      lambda per: lib.tq_gemv_cols_smem(M, per) <= SMEM_LIMIT, bps)


def cols_per(nrows: int, n_out: int, M: int, lib: ctypes.CDLL, cfg: dict | None = None,
             device: int = 0) -> int:
    """Input rows a cols block takes (a multiple of 32): cfg's `per`, `splits` or
    `bps` (blocks an SM), by default `cols_split` at COLS_BPS."""
    if cfg and "per" in cfg:
        return int(cfg["per"])
    if cfg and "splits" in cfg:
        return _halved_to_fit(_split_rows(nrows, int(cfg["splits"])),
                              lambda per: lib.tq_gemv_cols_smem(M, per) <= SMEM_LIMIT)
    bps = int((cfg or {}).get("bps", COLS_BPS))
    return _cols_default(lib, M, nrows, n_out, gpu_info.sm_count(device), bps)


COLS_TC_MS = range(3, 9)  # cols on the tensor cores by default at these M (axis 0; H200,
# 5120 × 17408 k = 3: M = 4 52.4 µs vs dp4a 126.9, M = 8 56.9 vs 509; M = 2 50.4 vs 40.0;
# M = 3 not measured; bench/results/trellis_gemv-cuda-colstc.json)
COLS_TC_WARPS = 8


def cols_tc_fits(k: int, L: int) -> bool:
    """cols_tc decodes a thread's 4 consecutive weights from one 32-bit window."""
    return 3 * k + L <= 32


def cols_tc_serves(M: int, cfg: dict | None = None, *, k: int, L: int) -> bool:
    """Axis 0: the tensor-core cols kernel (cfg["tc"], or by default at COLS_TC_MS
    unless a cols cfg — splits / per — asks for the dp4a one), for a (k, L) it
    decodes (cfg["tc"] with one it does not: an error)."""
    c = cfg or {}
    if "tc" in c:
        if c["tc"] and not cols_tc_fits(k, L):
            raise ValueError(f"cols_tc needs 3k + L <= 32 (k={k}, L={L})")
        return bool(c["tc"])
    return M in COLS_TC_MS and not ({"splits", "per"} & set(c)) and cols_tc_fits(k, L)


def cols_tc_per(nrows: int, n_out: int, cfg: dict | None = None, device: int = 0) -> int:
    """Input rows a cols_tc block takes (a multiple of 32): cfg["splits"] splits of
    the inputs, by default ⌈3·SMs (of `device`) / output periods⌉ (5120 × 17408: 3
    splits, 52.4 µs at M = 4 vs 59.9 with 2, 54.6 with 5; trellis_gemv-cuda-colstc.json)."""
    c = cfg or {}
    if "per" in c:
        return int(c["per"])
    splits = int(c.get("splits", 0)) or -(-3 * gpu_info.sm_count(device) // max(1, n_out // 32))
    return _split_rows(nrows, splits)



MMA_FROM_M = 6  # rows: tensor cores from this M on (H200, 8192² and 17408 × 5120: M = 8
# 56–63 µs vs 72–93 on the dp4a kernel, M = 4 42–54 vs 36–50; bench/trellis_gemv.py;
# M = 5–7 not measured, the switch interpolates)
MMA_WARPS = 8
TC_MS = range(2, 5)  # rows_tc (tensor cores, x quantized once) by default at these M (H200,
# k = 3: M = 2 23.6 / 34.2 µs vs dp4a 25.7 / 35.5 on 8192² / 17408 × 5120, M = 4 32.5 / 45.7
# vs 35.9 / 49.6; M = 1 23 / 34 vs 17 / 24: dp4a; bench/results/trellis_gemv-cuda-tc2*.json)
TC_WARPS = 8
TC_ROWS_UP_TO = 8192  # from MMA_FROM_M, rows_tc still for up to this many output rows (H200,
# k = 3, M = 8: 4096² 17.2 µs vs mma 22.3, 8192² 53.5 vs 58.7; 14336 × 4096 53.8 vs 45.3,
# 17408 × 5120 76.6 vs 66.2, 28672 × 4096 93.7 vs 75.5; trellis_gemv-cuda-r6.json, -r4.json)


@functools.cache
def _mma_fits(lib: ctypes.CDLL, M: int, in_features: int, warps: int) -> bool:
    """x [M, in_features] quantized fits the mma kernel's shared memory (asked once
    per shape, as _rows_fit)."""
    return lib.tq_gemv_mma_smem(M, in_features, warps) <= SMEM_LIMIT


def tc_ok(M: int, in_features: int, T: int) -> bool:
    """rows_tc's geometry: rounds of 4 periods along the inputs and in a block."""
    return M <= MAX_M and (in_features // 32) % 4 == 0 and (T // 32) % 4 == 0


def rows_kernel(lib: ctypes.CDLL, M: int, in_features: int, T: int, cfg: dict | None,
                rows: int = 0) -> str:
    """Which rows kernel serves: "tc", "mma" or "dp4a". An explicit cfg["tc"] or
    cfg["mma"] wins (an error where its geometry or shared memory does not allow it);
    any other cfg (but `pdl` alone) picks the dp4a kernel; without one, rows_tc at TC_MS where
    its geometry allows (and from MMA_FROM_M for up to TC_ROWS_UP_TO output rows), the old
    tensor-core kernel from MMA_FROM_M where x fits, else the dp4a kernel (rows_tc where x
    does not fit the dp4a kernel's shared memory)."""
    c = cfg or {}
    if c.get("tc"):
        if not tc_ok(M, in_features, T):
            raise ValueError(f"rows_tc needs in_features and T multiples of 128 "
                             f"(got {in_features}, {T})")
        return "tc"
    if set(c) - {"pdl"} and not c.get("mma"):
        return "dp4a"
    if c.get("mma"):
        if not _mma_fits(lib, M, in_features, int(c.get("warps", MMA_WARPS))):
            raise ValueError(f"x [{M}, {in_features}] does not fit the mma kernel's shared "
                             "memory")
        return "mma"
    tc = tc_ok(M, in_features, T)
    if tc and (M in TC_MS or M >= MMA_FROM_M and 0 < rows <= TC_ROWS_UP_TO):
        return "tc"
    if M >= MMA_FROM_M and _mma_fits(lib, M, in_features, MMA_WARPS):
        return "mma"
    return "dp4a" if not tc or _rows_fit(lib, M, in_features) else "tc"


@functools.cache
def pdl(device: int) -> bool:
    """Programmatic dependent launch: sm_90+ and not switched off."""
    return (os.environ.get("TQBUILD_PDL", "1") != "0"
            and torch.cuda.get_device_capability(device) >= (9, 0))


def out_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype the kernels write for x: x's own where they can, else float32."""
    return x.dtype if x.dtype in DTYPES else torch.float32


def _workspace(x: torch.Tensor, in_features: int) -> torch.Tensor:
    """quantize_x's output: int8 q, scales and −510·Σq of x's groups (10 words a group)."""
    return torch.empty(10 * x.shape[0] * (in_features // 32), device=x.device, dtype=torch.int32)


def _partials(x: torch.Tensor, rows: int, per: int, out_features: int) -> torch.Tensor:
    """The cols kernels' per-split sums [splits, M, out] (empty for one split: the
    kernel writes the output itself)."""
    splits = -(-rows // per)
    return torch.empty(splits if splits > 1 else 0, x.shape[0], out_features, device=x.device,
                       dtype=torch.float32)


@nvcc.on_tensor_device
def matvec(x: torch.Tensor, words: torch.Tensor, scales: torch.Tensor, *, code: str, k: int,
           T: int, L: int, axis: int, out_features: int, in_features: int,
           cfg: dict | None = None, out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """x [M ≤ 8, in] -> [M, out] in out_dtype (float32, bfloat16 or float16: the
    kernel rounds its float32 sums once, as .to() would); words int32 [rows, nw]
    (plain layout), scales fp16 [rows]. Call `available()` first (it checks what
    this assumes)."""
    lib = library(k, L, code)
    assert lib is not None
    M = x.shape[0]
    rows, nw = words.shape
    if x.dtype not in DTYPES:
        x = x.float()
    x = x.contiguous()
    words = aligned_words(words)
    out = torch.empty(M, out_features, device=x.device, dtype=out_dtype)
    odt = DTYPES[out_dtype]
    factor = 1.0 / BYTESUM_DIV
    st = nvcc.stream_of(x)
    kind = rows_kernel(lib, M, in_features, T, cfg, rows) if axis == 1 else "cols"
    c = cfg or {}
    dev = x.device.index or 0
    use_pdl = int(c.get("pdl", pdl(dev)))
    if kind == "tc":
        ws = _workspace(x, in_features)
        _check(lib.tq_gemv_rows_tc(words.data_ptr(), scales.data_ptr(), x.data_ptr(),
                                   DTYPES[x.dtype], out.data_ptr(), odt, ws.data_ptr(), use_pdl, M,
                                   rows, nw, in_features, T, int(c.get("warps", TC_WARPS)), factor,
                                   st), "rows (tc)")
        return out
    if kind == "mma":
        w = int(c.get("warps", MMA_WARPS))
        _check(lib.tq_gemv_rows_mma(words.data_ptr(), scales.data_ptr(), x.data_ptr(),
                                    DTYPES[x.dtype], out.data_ptr(), odt, M, rows, nw,
                                    in_features, T, w, factor, st), "rows (mma)")
        return out
    if kind == "dp4a":
        r = rows_cfg(M, cfg)
        qx = _workspace(x, in_features) if r["prequant"] else None
        _check(lib.tq_gemv_rows_fused(words.data_ptr(), scales.data_ptr(), x.data_ptr(),
                                      DTYPES[x.dtype], out.data_ptr(), odt,
                                      None if qx is None else qx.data_ptr(), use_pdl, M, rows, nw,
                                      in_features, T, r["RB"], r["warps"], r["rgb"], r["bps"],
                                      factor, st), "rows")
        return out
    if cols_tc_serves(M, cfg, k=k, L=L):
        per = cols_tc_per(rows, out_features, cfg, dev)
        part = _partials(x, rows, per, out_features)
        ws = _workspace(x, in_features)
        _check(lib.tq_gemv_cols_tc(words.data_ptr(), x.data_ptr(), DTYPES[x.dtype],
                                   scales.data_ptr(), ws.data_ptr(), use_pdl, part.data_ptr(),
                                   out.data_ptr(), odt, M, rows, nw, out_features, T, per,
                                   int(c.get("warps", COLS_TC_WARPS)), factor, st), "cols (tc)")
        return out
    per = cols_per(rows, out_features, M, lib, cfg, dev)
    part = _partials(x, rows, per, out_features)
    _check(lib.tq_gemv_cols(words.data_ptr(), x.data_ptr(), DTYPES[x.dtype],
                            scales.data_ptr(), part.data_ptr(), out.data_ptr(), odt, use_pdl, M,
                            rows, nw, out_features, T, per, factor, st), "cols")
    return out
