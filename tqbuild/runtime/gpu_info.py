"""Facts about the GPU the decode kernels plan their launches for."""

from __future__ import annotations

import functools

import torch


@functools.cache
def sm_count(device: torch.device | int = 0) -> int:
    """Streaming multiprocessors of a CUDA device (asked once per device)."""
    return torch.cuda.get_device_properties(device).multi_processor_count
