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

import numpy as np
import torch

from . import mlx_affine, trellis


def module_entry(spec) -> dict:
    """QuantSpec -> the config entry a loader reads."""
    if spec.format == "trellis":
        from ..stages.trellis import trellis_entry

        return {"group_size": spec.trellis.T, "bits": spec.bits, "mode": "trellis",
                "trellis": trellis_entry(spec)}
    return {"group_size": spec.group_, "bits": spec.bits_,
            "mode": spec.format if spec.mx else "affine"}


def entry_for(quant: dict, module: str) -> dict:
    e = quant.get(module)
    return e if isinstance(e, dict) else quant


def dequantize_module(weight: torch.Tensor, scales: torch.Tensor, biases: torch.Tensor | None,
                      entry: dict, compute_dtype: torch.dtype | None = None) -> torch.Tensor:
    """-> float32 weight in the artifact's [.., out, in] layout. `compute_dtype`:
    the dtype affine values are formed in (default: the stored scales', as
    `mx.dequantize`; float32: as MLX's quantized matmul uses them)."""
    mode = entry.get("mode", "affine")
    if mode == "trellis":
        t = entry["trellis"]
        if t.get("version") != trellis.VERSION:
            raise ValueError(f"trellis format version {t.get('version')} is not supported "
                             f"(this tq-build reads version {trellis.VERSION})")
        lead = weight.shape[:-3] if t["interleave"] else weight.shape[:-2]
        per = weight.shape[len(lead):]
        ws = weight.numpy().reshape(-1, *per)
        ss = scales.numpy().reshape(ws.shape[0], -1)
        mats = [trellis.decode(w, s, k=entry["bits"], T=entry["group_size"], L=t["L"],
                               code=t["code"], axis=t["axis"], interleaved=t["interleave"])
                for w, s in zip(ws, ss, strict=True)]
        return torch.from_numpy(np.stack(mats)).reshape(*lead, *mats[0].shape)
    if mode != "affine":
        import mlx.core as mx

        w = mx.dequantize(mx.array(weight.numpy()), mx.array(scales.numpy()),
                          group_size=entry["group_size"], bits=entry["bits"], mode=mode)
        return torch.from_numpy(np.array(w.astype(mx.float32)))
    if compute_dtype is not None:
        scales, biases = scales.to(compute_dtype), biases.to(compute_dtype)
    return mlx_affine.dequantize_packed(weight, scales, biases, entry["bits"],
                                        entry["group_size"]).float()
