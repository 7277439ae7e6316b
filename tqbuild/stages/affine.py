"""Affine quantization of artifact tensors into MLX's format."""

from __future__ import annotations

import torch

from ..formats import mlx_affine
from ..recipe import QuantSpec

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def quantize_tensor(name: str, w: torch.Tensor, spec: QuantSpec,
                    dtype: torch.dtype = torch.bfloat16) -> tuple[dict, dict]:
    """-> ({artifact tensors}, {module record for the metadata})."""
    module = name[: -len(".weight")]
    if spec.format == "none":
        return {name: w.to(dtype)}, {"method": "none", "format": "bf16", "bits": 16}
    q, scales, biases = mlx_affine.quantize_rtn(w, spec.bits, spec.group_size, dtype)
    wq = mlx_affine.dequantize(q, scales, biases, spec.group_size)
    words = torch.from_numpy(mlx_affine.pack(q.numpy(), spec.bits))
    record = {"method": spec.method, "format": "affine", "bits": spec.bits,
              "group_size": spec.group_size,
              "proxy_rel_error": round(mlx_affine.proxy_error(w, wq.float()), 6),
              "dequant_sha256": mlx_affine.dequant_hash(wq)}
    return {name: words, f"{module}.scales": scales, f"{module}.biases": biases}, record
