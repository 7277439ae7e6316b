"""One artifact tensor -> its stored tensors and module record, for every
format: the driver splits stacked experts into matrices, pairs each with its
Hessian, quantizes each through the format's matrix function, lets the format
assemble the stored tensors, and records the joined method and the guard
events tagged with module and matrix."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..recipe import GuardParams, QuantSpec
from .affine import assemble_affine, quantize_affine_matrix, quantize_mx
from .trellis import assemble_trellis, quantize_trellis_matrix

# format -> (quantize one matrix, assemble the tensor)
MATRIX_QUANTIZERS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "affine": (quantize_affine_matrix, assemble_affine),
    "trellis": (quantize_trellis_matrix, assemble_trellis),
}


def matrices(w: torch.Tensor) -> list[torch.Tensor]:
    """A 2-D weight, or a stacked [.., E, out, in] one as its E matrices."""
    return [w] if w.ndim == 2 else list(w.reshape(-1, *w.shape[-2:]))


def joined_method(results) -> str:
    methods = sorted({r.method for r in results})
    return methods[0] if len(methods) == 1 else "+".join(methods)


def quantize_tensor(name: str, w: torch.Tensor, spec: QuantSpec,
                    dtype: torch.dtype = torch.bfloat16,
                    hessians: list[torch.Tensor | None] | None = None,
                    guard: GuardParams | None = None) -> tuple[dict, dict]:
    """-> ({artifact tensors}, {module record for the metadata}).

    `hessians` has one entry per matrix: one for a 2-D weight, one per expert
    for a stacked [E, out, in] weight."""
    return encode_tensor(name, w, spec, dtype, hessians, guard)()


def encode_tensor(name: str, w: torch.Tensor, spec: QuantSpec,
                  dtype: torch.dtype = torch.bfloat16,
                  hessians: list[torch.Tensor | None] | None = None,
                  guard: GuardParams | None = None
                  ) -> Callable[[], tuple[dict, dict]]:
    """quantize_tensor in two steps: this call quantizes every matrix (the device
    work); the returned function assembles the stored tensors and the record
    (host copies, packing, hashes), so a GPU build can run it beside the next
    tensor's quantization."""
    guard = guard or GuardParams()
    if not spec.quantized:
        out = ({name: w.to(dtype)}, {"method": "none", "format": str(dtype)[6:], "bits": 16})
        return lambda: out
    if spec.mx:  # quantized by MLX itself, whole tensor, no Hessian (here, in the
        # calling thread: MLX's streams are per thread)
        done = quantize_mx(name, w, spec, dtype)
        return lambda: done
    one, assemble = MATRIX_QUANTIZERS[spec.format]
    mats = matrices(w)
    hs = hessians or [None] * len(mats)
    results = [one(m, h, spec, guard, dtype) for m, h in zip(mats, hs, strict=True)]

    def finish() -> tuple[dict, dict]:
        tensors, record, extra = assemble(name, w, results, spec, hessians, dtype, guard)
        record["method"] = joined_method(results)
        module = name[: -len(".weight")]
        events = [dict(e, module=module, matrix=i) for i, r in enumerate(results)
                  for e in r.events] + extra
        if events:
            record["guard_events"] = events
        return tensors, record

    return finish
