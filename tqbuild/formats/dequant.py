"""Any stored quantized module back to its values, from its config entry
(`quantization[module]` or the global entry): affine and MLX microscaling
exactly as MLX computes them, trellis as f32(code) · f32(scale).

Affine values come in two precisions. `mx.dequantize` computes q·scale + bias
in the scales' dtype (bf16: two roundings, up to one bf16 ulp of the group's
bias per weight); that is what the build hashes. MLX's quantized matmul (CPU
and Metal) instead upcasts the stored scales and biases and forms the weight
in float32, so a runtime computing in float32 must use `compute_dtype=float32`
to agree with it (SmolLM2 rot-rtn4: torch vs MLX mean KL 4.9e-3 with bf16
values, 1e-6 with float32 ones)."""

from __future__ import annotations

import torch

from . import FORMATS, format_of


def module_entry(spec) -> dict:
    """QuantSpec -> the config entry a loader reads."""
    return FORMATS[spec.format].config_entry(spec)


def entry_for(quant: dict, module: str) -> dict:
    e = quant.get(module)
    return e if isinstance(e, dict) else quant


def dequantize_module(weight: torch.Tensor, scales: torch.Tensor, biases: torch.Tensor | None,
                      entry: dict, compute_dtype: torch.dtype | None = None) -> torch.Tensor:
    """-> float32 weight in the artifact's [.., out, in] layout. `compute_dtype`:
    the dtype affine values are formed in (default: the stored scales', as
    `mx.dequantize`; float32: as MLX's quantized matmul uses them)."""
    return format_of(entry).dequantize(weight, scales, biases, entry, compute_dtype)
