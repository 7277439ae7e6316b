"""The fused CUDA tail-biting Viterbi (`viterbi_cuda.cu`): built on first CUDA use
with nvcc into a cached shared library and called through ctypes on torch's
current stream — one launch per chunk of sequences (four at L = 16, k ≥ 2: each
pass's forward kernel, then its backtrack kernel), no host sync. Never built at install
time; where nvcc or the build is missing, `available()` is False and the
callers keep the Triton / torch paths (warned once). TQBUILD_VITERBI_FLAGS adds
nvcc defines (benchmark variants, e.g. "-DTQ_VIT_REG=1"; part of the cache key).
At L = 16, k = 2 the launches alternate between two streams (torch's current one and a
side stream, joined before returning; `streams`), so one launch's partly filled last
wave and backtrack kernels overlap the other's forward passes."""

from __future__ import annotations

import ctypes
import os
import warnings
from pathlib import Path

import torch

from ..environment import env_int
from . import nvcc

SOURCE = Path(__file__).with_suffix(".cu")
CASES = {12: (1, 2, 3, 4), 16: (1, 2, 3, 4)}
BP_BUDGET: int | None = None  # bytes of global scratch a launch (T·2^(L−k) backpointers a
# block, or 4 bytes a class minimum of each kept step, and the backtrack kernel's 8 bytes of
# links: `tq_viterbi_scratch_bytes`); None: `scratch_budget`
MAX_T_L16 = 1024  # the L = 16 kernels' shared-memory plan (MAX_T in the .cu)

_lib = None
_failed: str | None = None


def flags() -> list[str]:
    return ["-fmad=false", *os.environ.get("TQBUILD_VITERBI_FLAGS", "").split()]


def _build() -> ctypes.CDLL:
    dll = nvcc.build(SOURCE, flags())
    f = dll.tq_viterbi_tailbiting
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_int] * 5 + [ctypes.c_void_p] * 3
    dll.tq_viterbi_scratch_bytes.restype = ctypes.c_int64
    dll.tq_viterbi_scratch_bytes.argtypes = [ctypes.c_int] * 3
    return dll


def available(x: torch.Tensor, L: int, k: int) -> bool:
    global _lib, _failed
    if os.environ.get("TQBUILD_VITERBI", "cuda") != "cuda" or not x.is_cuda or \
            k not in CASES.get(L, ()) or _failed is not None or \
            (L == 16 and k >= 2 and x.shape[-1] > MAX_T_L16):
        return False
    if _lib is None:
        try:
            _lib = _build()
        except Exception as e:  # noqa: BLE001 - no nvcc, a compiler or driver failure
            _failed = f"{type(e).__name__}: {e}"
            warnings.warn(f"CUDA Viterbi unavailable ({_failed}); using the Triton/torch "
                          "path", stacklevel=3)
            return False
    return True


MODES = {"1mad": 1, "mul1": 2}  # the kernel's computed codes (mode 0: the table)


def launch_sizes(B: int, cap: int, streams: int = 1) -> list[int]:
    """Sequences a launch for B sequences: the fewest launches of at most cap // streams
    each (launches in flight together share the scratch budget of `cap` sequences), a
    multiple of `streams` of them where B allows, as even as can be. Each launch costs a
    partly filled last wave and its backtrack kernels whatever its size: 2560 sequences
    under a cap of 2558 ran as 2558 + 2."""
    if B <= 0:
        return []
    each = max(1, cap // streams)
    n = -(-B // each)  # launches the cap needs
    n = min(B, -(-n // streams) * streams)  # a multiple of the streams
    q, r = divmod(B, n)
    return [q + 1] * r + [q] * (n - r)


def scratch_budget(device: torch.device) -> int:
    """Scratch bytes a launch: an eighth of the device's memory, 1 to 16 GB (BP_BUDGET
    where set). Each launch of the L = 16, k >= 2 kernels ends with a backtrack kernel
    whose time hardly depends on its sequences, and a partly filled last wave: fewer,
    larger launches waste less of both (4 GB held 511 sequences a launch at k = 3)."""
    if BP_BUDGET is not None:
        return BP_BUDGET
    total = torch.cuda.get_device_properties(device).total_memory
    return int(min(16 << 30, max(1 << 30, total // 8)))


@nvcc.on_tensor_device
def viterbi_tailbiting(x: torch.Tensor, table: torch.Tensor, L: int, k: int, code: str
                       ) -> torch.Tensor:
    """x [B, T] float32 (CUDA, finite) -> int64 states [B, T]: both passes and their
    backtracks, in launches of at most `scratch_budget` bytes of scratch."""
    B, T = x.shape
    x = x.contiguous()
    mode = MODES.get(code, 0)  # byte-sum codes computed in registers, else the table
    table = table.contiguous()
    out = torch.empty(B, T, dtype=torch.int64, device=x.device)
    assert _lib is not None
    per = int(_lib.tq_viterbi_scratch_bytes(L, k, T))
    n_streams = streams(L, k)
    sizes = launch_sizes(B, scratch_budget(x.device) // per, n_streams)
    if not sizes:
        return out  # no sequences
    lanes = _streams(x.device, min(len(sizes), n_streams))
    bps = [torch.empty(max(sizes[i::len(lanes)]) * per, dtype=torch.uint8, device=x.device)
           for i in range(len(lanes))]  # each stream's own scratch
    main = lanes[0]  # torch's current stream
    for side in lanes[1:]:
        side.wait_stream(main)  # x, table and the scratch ready
    a = 0
    for i, n in enumerate(sizes):
        rc = _lib.tq_viterbi_tailbiting(x[a:].data_ptr(), table.data_ptr(), n, T, L, k, mode,
                                        bps[i % len(lanes)].data_ptr(), out[a:].data_ptr(),
                                        ctypes.c_void_p(lanes[i % len(lanes)].cuda_stream))
        if rc != 0:
            raise RuntimeError(f"CUDA Viterbi launch failed (cudaError {rc})")
        a += n
    for side in lanes[1:]:
        main.wait_stream(side)  # the states written (and the scratch free) for main's work
    return out


def streams(L: int, k: int) -> int:
    """Streams the launches alternate between: TQBUILD_VITERBI_STREAMS, else 2 at L = 16,
    k = 2 — whose backtrack kernels, forming the rows between the kept minima, take
    longest — and 1 elsewhere (H100, per-tensor M weights/s 1 → 2 streams: k = 2 24.3 →
    27.8 gate-like, 25.8 → 27.4 down-like; k = 3 33.8 → 33.2, 29.7 → 29.3; k = 4 31.0 →
    29.2, 27.6 → 25.9, bench/results/viterbi_cuda-cuda-s14bs*.json)."""
    return env_int("TQBUILD_VITERBI_STREAMS", 2 if (L, k) == (16, 2) else 1, least=1)


_side: dict[tuple[int, int], list[torch.cuda.Stream]] = {}


def _streams(device: torch.device, n: int) -> list[torch.cuda.Stream]:
    """torch's current stream on `device`, then n − 1 side streams of its own (made once a
    device and current stream: LDLQ's row parts, each on its stream, do not queue behind
    each other's side work; torch's stream pool bounds how many current streams there are)."""
    idx = device.index if device.index is not None else torch.cuda.current_device()
    main = torch.cuda.current_stream(device)
    side = _side.setdefault((idx, main.stream_id), [])
    while len(side) < n - 1:
        side.append(torch.cuda.Stream(device=idx))
    return [main, *side[: n - 1]]
