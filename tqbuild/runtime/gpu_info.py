"""Facts about the GPU the decode kernels plan their launches for."""

from __future__ import annotations

import functools
import os

import torch


@functools.cache
def sm_count(device: torch.device | int = 0) -> int:
    """Streaming multiprocessors of a CUDA device (asked once per device)."""
    return torch.cuda.get_device_properties(device).multi_processor_count


def pdl_defines(env: str, define: str) -> list[str]:
    """The tuning defines in $env, and `define`=1 — the decode kernel launched with
    programmatic dependent launch, waiting for x, its own trigger after that — where
    inductor launches its kernels that way (TORCHINDUCTOR_ENABLE_PDL=1, read when the
    library is built) and $env does not set `define` itself. With inductor's PDL both
    measured +1.5 % decode (8B Q3, H100, bench/results/decode_8b-cuda-s16pp.json); without
    it ours gains nothing (no kernel before it triggers early)."""
    extra = os.environ.get(env, "").split()
    if not any(f.split("=")[0] == f"-D{define}" for f in extra) and inductor_pdl():
        extra.append(f"-D{define}=1")
    return extra


@functools.cache
def has_pdl(device: torch.device | int = 0) -> bool:
    """Whether a CUDA device runs programmatic dependent launch (sm_90+, not ROCm) — where
    inductor emits it too; Triton's gdc_wait does not compile for older GPUs."""
    return not torch.version.hip and torch.cuda.get_device_capability(device)[0] >= 9


def inductor_pdl() -> bool:
    """Whether torch.compile's kernels are launched with programmatic dependent launch."""
    try:
        from torch._inductor import config
    except Exception:  # noqa: BLE001 - a torch without inductor
        return False
    return bool(getattr(config.triton, "enable_pdl", False))
