"""The interface every stored format implements (one object per format,
collected in `formats.FORMATS`). A module's config entry (`config.json`
`quantization[module]`, or the global entry) names its format by `mode`; the
metadata record by `format`. Everything that depends on the format asks the
spec object: which tensors a module stores, its logical shape, its values,
the hash a build records for them, its size on disk."""

from __future__ import annotations

import numpy as np
import torch


class FormatSpec:
    name: str = ""
    parts: tuple[str, ...] = ("scales",)  # tensors stored beside `.weight`
    hash_key: str = "dequant_sha256"  # the metadata field holding the values' hash
    # MLX's own quantized layers load it (an MLX `mode`): it may be the config's
    # global entry; otherwise every module is listed and a tq-build runtime loads it
    mlx_native: bool = True

    def config_entry(self, spec) -> dict:
        """QuantSpec -> the config entry a loader reads."""
        raise NotImplementedError

    def logical_shape(self, stored: list[int], entry: dict) -> list[int]:
        """Stored `.weight` shape -> the weight's [.., out, in] (default: each row
        packed into uint32 words, `bits` per weight, as MLX's modes store it)."""
        return [*stored[:-1], stored[-1] * 32 // entry["bits"]]

    def dequantize(self, weight: torch.Tensor, scales: torch.Tensor,
                   biases: torch.Tensor | None, entry: dict,
                   compute_dtype: torch.dtype | None = None) -> torch.Tensor:
        """Stored tensors -> float32 weight [.., out, in]."""
        raise NotImplementedError

    def values_hash(self, tensors: dict[str, torch.Tensor], entry: dict, dtype: str) -> str:
        """sha256 of the values a build recorded under `hash_key` (tensors: the
        module's `weight`, `scales`, ... by part name; dtype: the artifact's)."""
        raise NotImplementedError

    def stored_bytes(self, spec, shape: tuple[int, ...], dtype_bytes: int) -> int:
        """Estimated bytes of a module quantized with `spec` (for disk checks)."""
        raise NotImplementedError

    def encode_cost(self, spec, shape: tuple[int, ...]) -> float:
        """Relative work of quantizing a tensor (to spread a layer over ranks):
        GPTQ ∝ weights × columns, RTN ∝ weights."""
        n = float(np.prod(shape))
        return n * shape[-1] if spec.uses_hessian else n

    def budget_overhead(self, spec) -> float:
        """Bits per weight a bit budget pays besides the codes (group parameters)."""
        return 0.0

    def describe(self, rec: dict) -> str:
        """A module record in a few words (model card, plan)."""
        return f"{self.name} {rec['bits']}-bit"
