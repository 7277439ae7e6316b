"""MLX's microscaling formats (mxfp4, nvfp4, mxfp8): packed codes and one
shared scale per group, no bias; quantized and dequantized by MLX itself,
so their values are exactly what `mlx_lm` computes."""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from .spec import FormatSpec

# mode -> (bits, group size): MLX fixes both
MX_FORMATS = {"mxfp4": (4, 32), "nvfp4": (4, 16), "mxfp8": (8, 32)}


def mlx_dtype(dtype: str):
    import mlx.core as mx

    return {"bfloat16": mx.bfloat16, "float16": mx.float16}.get(dtype, mx.float32)


def mx_dequant(q, scales, group_size: int, bits: int, mode: str, dtype):
    """MLX's dequantized values in the artifact dtype (an mx dtype), and the sha256
    of their raw bytes (recorded at build, checked by `tq-build verify`)."""
    import mlx.core as mx

    deq = mx.dequantize(q, scales, group_size=group_size, bits=bits, mode=mode).astype(dtype)
    view = deq.view(mx.uint16 if deq.dtype.size == 2 else mx.uint32)
    raw = bytes(memoryview(view))  # type: ignore[arg-type]  # a buffer; mlx's stubs omit it
    return deq, hashlib.sha256(raw).hexdigest()


class MicroscalingFormat(FormatSpec):
    def __init__(self, mode: str):
        self.name = mode
        self.bits, self.group_size = MX_FORMATS[mode]

    def config_entry(self, spec) -> dict:
        return {"group_size": self.group_size, "bits": self.bits, "mode": self.name}

    def dequantize(self, weight, scales, biases, entry, compute_dtype=None) -> torch.Tensor:
        import mlx.core as mx

        w = mx.dequantize(mx.array(weight.numpy()), mx.array(scales.numpy()),
                          group_size=entry["group_size"], bits=entry["bits"], mode=self.name)
        return torch.from_numpy(np.array(w.astype(mx.float32)))

    def values_hash(self, tensors, entry, dtype) -> str:
        import mlx.core as mx

        return mx_dequant(mx.array(tensors["weight"].numpy()),
                          mx.array(tensors["scales"].numpy()), entry["group_size"],
                          entry["bits"], self.name, mlx_dtype(dtype))[1]

    def stored_bytes(self, spec, shape, dtype_bytes) -> int:
        n = int(np.prod(shape))
        return n * self.bits // 8 + n // self.group_size

    def describe(self, rec: dict) -> str:
        return self.name


MX = {mode: MicroscalingFormat(mode) for mode in MX_FORMATS}
