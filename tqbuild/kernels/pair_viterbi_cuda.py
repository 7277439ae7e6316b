"""The pair code's CUDA Viterbi (`pair_viterbi.cu`, L = 16): built on first CUDA use with
nvcc into a cached shared library, called through ctypes on torch's current stream —
four launches per chunk of sequences (each pass's forward kernel and its backtrack), no
host sync. Bit-identical to the torch path (`viterbi._pair_pass`). Where nvcc or the
build is missing, or a one-time check against the torch path fails, `available()` is
False (warned once) and the torch path runs."""

from __future__ import annotations

import ctypes
import os
import warnings
from pathlib import Path

import torch

from . import nvcc
from .trellis_codes import pair_entries

SOURCE = Path(__file__).with_name("pair_viterbi.cu")
MAX_T = 4096

_lib: ctypes.CDLL | None = None
_failed: str | None = None


def _build() -> ctypes.CDLL:
    dll = nvcc.build(SOURCE, ["-fmad=false"])
    f = dll.tq_pair_viterbi
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                  ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    dll.tq_pair_viterbi_scratch.restype = ctypes.c_int64
    dll.tq_pair_viterbi_scratch.argtypes = [ctypes.c_int, ctypes.c_int]
    return dll


def available(x: torch.Tensor, L: int, k: int) -> bool:
    """CUDA (sm_90: the shared-memory plan), L = 16, k = 2..4, T even and ≤ MAX_T, a
    library that builds and passes its check."""
    global _lib, _failed
    T = x.shape[-1]
    if os.environ.get("TQBUILD_VITERBI", "cuda") != "cuda" or not x.is_cuda or L != 16 or \
            k not in (2, 3, 4) or T % 2 or T > MAX_T or _failed is not None or \
            torch.cuda.get_device_capability(x.device)[0] < 9:
        return False
    if _lib is None:
        try:
            _lib = _build()
            _self_check(x.device)
        except Exception as e:  # noqa: BLE001 - no nvcc, a compiler/driver failure, a mismatch
            _lib, _failed = None, f"{type(e).__name__}: {e}"
            warnings.warn(f"pair-code CUDA Viterbi unavailable ({_failed}); using the torch "
                          "path", stacklevel=3)
            return False
    return True


def _self_check(device: torch.device) -> None:
    """Once a process: a few sequences against the torch path (the kernels assume
    dynamic shared memory at shared address 0x400; a device where that fails is caught
    here rather than coding garbage)."""
    from .viterbi import _pair_steps_torch

    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(3, 32, generator=g)
    for k in (2, 3, 4):
        got = tailbiting_steps(x.to(device), k).cpu()
        want = _pair_steps_torch(x, 16, k)
        if not torch.equal(got, want):
            raise RuntimeError(f"the CUDA pair Viterbi disagrees with the torch path at k={k}")


@nvcc.on_tensor_device
def tailbiting_steps(x: torch.Tensor, k: int) -> torch.Tensor:
    """x [B, T] float32 (CUDA, finite) -> int64 step states [B, T/2], in launches of at
    most an eighth of the device's memory of scratch."""
    assert _lib is not None
    B, T = x.shape
    x = x.float().contiguous()
    out = torch.empty(B, T // 2, dtype=torch.int64, device=x.device)
    entries = torch.from_numpy(pair_entries().copy()).to(x.device)
    per = int(_lib.tq_pair_viterbi_scratch(k, T))
    total = torch.cuda.get_device_properties(x.device).total_memory
    chunk = max(1, int(min(16 << 30, max(1 << 30, total // 8)) // per))
    stream = nvcc.stream_of(x)
    scratch = torch.empty(min(B, chunk) * per, dtype=torch.uint8, device=x.device)
    for a in range(0, B, chunk):
        n = min(chunk, B - a)
        rc = _lib.tq_pair_viterbi(x[a:].data_ptr(), entries.data_ptr(), n, T, k,
                                  scratch.data_ptr(), out[a:].data_ptr(), stream)
        if rc != 0:
            raise RuntimeError(f"CUDA pair Viterbi launch failed (code {rc})")
    return out
