"""Affine quantization of one artifact tensor into MLX's format: RTN, or GPTQ
with the Hessian(s) of its input (one per expert for stacked experts)."""

from __future__ import annotations

from typing import Any

import torch

from ..errors import BadInput
from ..formats import mlx_affine
from ..formats.mx import mx_dequant
from ..recipe import GuardParams, QuantSpec
from .gptq import AffineResult, gptq_guarded
from .guard import proxy_loss, relative_error

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def quantize_affine_matrix(w: torch.Tensor, h: torch.Tensor | None, spec: QuantSpec,
                           guard: GuardParams, dtype: torch.dtype) -> AffineResult:
    """One matrix: GPTQ (guarded) with its Hessian, else RTN."""
    if spec.method == "gptq" and h is not None:
        return gptq_guarded(w, h, spec.k, spec.group_size, damp=spec.damp,
                            block_size=spec.block_size, act_order=spec.act_order,
                            scale_ratio=guard.scale_ratio, max_damp=guard.max_damp,
                            dtype=dtype)
    q, s, b = mlx_affine.quantize_rtn(w, spec.k, spec.group_size, dtype)
    res = AffineResult(q=q, scales=s, biases=b, method="rtn")
    if h is not None:
        res.proxy_loss = res.rtn_proxy_loss = proxy_loss(
            w, mlx_affine.dequantize(q, s, b, spec.group_size), h)
    if spec.method == "gptq":
        res.events = [{"event": "no_hessian_rtn"}]
    return res


def quantize_mx(name: str, w: torch.Tensor, spec: QuantSpec, dtype: torch.dtype
                ) -> tuple[dict, dict]:
    """MLX's microscaling formats (mxfp4 / nvfp4 / mxfp8), quantized by MLX itself
    from the weight in the stored dtype, as `mlx_lm.convert` would."""
    try:
        import mlx.core as mx
    except ImportError:
        raise BadInput(f"format {spec.format} (tensor {name}) is quantized with MLX, "
                       "which is not installed", fix="pip install mlx (mlx[cpu] on Linux)"
                       ) from None
    import numpy as np

    module = name[: -len(".weight")]
    src = mx.array(w.detach().to(dtype).float().cpu().numpy()).astype(
        {torch.bfloat16: mx.bfloat16, torch.float16: mx.float16}.get(dtype, mx.float32))
    # microscaling modes return (codes, scales): mlx's stubs declare the affine triple
    q, scales = mx.quantize(src, group_size=spec.group_, bits=spec.bits_,  # type: ignore[misc]
                            mode=spec.format)
    deq, digest = mx_dequant(q, scales, spec.group_, spec.bits_, spec.format, src.dtype)
    err = relative_error(w.cpu(), torch.from_numpy(np.array(deq.astype(mx.float32))))
    record = {"method": "rtn", "format": spec.format, "bits": spec.bits_,
              "group_size": spec.group_, "proxy_rel_error": round(err, 6),
              "dequant_sha256": digest}
    return {name: torch.from_numpy(np.array(q)),
            f"{module}.scales": torch.from_numpy(np.array(scales))}, record


def assemble_affine(name: str, w: torch.Tensor, results: list[AffineResult], spec: QuantSpec,
                    hessians, dtype: torch.dtype, guard=None) -> tuple[dict, dict, list]:
    """Per-matrix results -> (artifact tensors, module record, extra events)."""
    module = name[: -len(".weight")]
    q_dev = torch.stack([r.q for r in results]).reshape(w.shape)
    words = torch.from_numpy(mlx_affine.pack_torch(q_dev, spec.k))  # packed where q is
    q = q_dev.cpu()
    scales = torch.stack([r.scales.cpu() for r in results]).reshape(*w.shape[:-1], -1)
    biases = torch.stack([r.biases.cpu() for r in results]).reshape(*w.shape[:-1], -1)
    wq = mlx_affine.dequantize(q, scales, biases, spec.group_size)
    record: dict[str, Any] = {
        "format": "affine", "bits": spec.bits, "group_size": spec.group_size,
        "proxy_rel_error": round(relative_error(w.cpu(), wq.float()), 6),
        "dequant_sha256": mlx_affine.dequant_hash(wq)}
    if spec.method == "gptq" and hessians is not None:
        record["damp"] = sorted({r.damp for r in results if r.damp is not None})
        record["act_order"] = spec.act_order
        record["hessian_proxy_loss"] = {"gptq_or_kept": sum(r.proxy_loss for r in results),
                                        "rtn": sum(r.rtn_proxy_loss for r in results)}
    return {name: words, f"{module}.scales": scales, f"{module}.biases": biases}, record, []
