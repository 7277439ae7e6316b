"""Load an artifact (bf16, MLX affine / microscaling, trellis) into transformers, f32.

Quantized tensors are dequantized as MLX's quantized matmul applies them
(affine: q·scale + bias formed in float32 from the stored scales; trellis:
f32 code × f32 scale); the artifact layout is
mapped back to transformers' (io.layout.to_hf)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

from ..formats.dequant import dequantize_module, entry_for
from ..formats.trellis import TrellisEntry
from ..io.layout import to_hf
from ..models import family_for
from . import trellis_cuda
from .fused_mlp import fuse_gate_up
from .fused_qkv import fuse_qkv
from .gqa_attention import use_gqa_attention
from .trellis_torch import TrellisLinear


def read_artifact_tensors(path: Path) -> dict[str, torch.Tensor]:
    out = {}
    for f in sorted(Path(path).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as h:
            for k in h.keys():
                out[k] = h.get_tensor(k)
    return out


def dequantized_state(path: Path, compute_dtype: torch.dtype | None = torch.float32
                      ) -> tuple[dict, dict[str, torch.Tensor]]:
    """(config, artifact-named weights). Affine modules are formed in
    `compute_dtype` (float32: as MLX's quantized matmul; None: the stored scales'
    dtype, `mx.dequantize`'s bits); other tensors keep their stored dtype."""
    path = Path(path)
    cfg = json.loads((path / "config.json").read_text())
    quant = cfg.get("quantization") or {}
    raw = read_artifact_tensors(path)
    out = {}
    for k, t in raw.items():
        if k.endswith((".scales", ".biases")):
            continue
        module = k[: -len(".weight")]
        if k.endswith(".weight") and f"{module}.scales" in raw:
            out[k] = dequantize_module(t, raw[f"{module}.scales"], raw.get(f"{module}.biases"),
                                       entry_for(quant, module), compute_dtype)
        else:
            out[k] = t
    return cfg, out


def hf_config(cfg: dict, fam):
    from transformers import AutoConfig

    c = dict(cfg)
    for k in ("quantization", "quantization_config"):
        c.pop(k, None)
    mt = c.pop("model_type")
    mt = (fam.hf_text_model_type or mt) if "text_config" not in c else mt
    return AutoConfig.for_model(mt, **c)


def load_torch(path: Path, dtype=torch.float32, *, packed: bool = False, device: str = "cpu"):
    """An artifact as a transformers CausalLM (eval mode, `dtype`).

    The artifact is rewritten, values unchanged, to a transformers-layout
    checkpoint in a temp dir, so transformers' own loader applies its
    conversions (fused experts and the like)."""
    import tempfile

    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    cfg, weights = dequantized_state(path)
    fam = family_for(cfg["model_type"])
    state = {k: v.contiguous() for k, v in to_hf(fam, weights).items()}
    config = hf_config(cfg, fam)
    hf_logging.disable_progress_bar()
    with tempfile.TemporaryDirectory() as tmp:
        save_file(state, f"{tmp}/model.safetensors", metadata={"format": "pt"})
        config.save_pretrained(tmp)
        model = AutoModelForCausalLM.from_pretrained(tmp, dtype=dtype)
    model = model.eval().to(device)
    if packed:
        pack_trellis_modules(model, path, cfg, fam, device)
    return model


def pack_trellis_modules(model, path: Path, cfg: dict, fam, device: str) -> int:
    """Swap every trellis module's dense weight for a packed TrellisLinear (decoded
    by the CUDA / Triton kernels on CUDA — their libraries built here — and by
    torch ops elsewhere)."""

    quant = cfg.get("quantization") or {}
    raw = read_artifact_tensors(path)
    made = []
    for module, entry in quant.items():
        if not (isinstance(entry, dict) and entry.get("mode") == "trellis"):
            continue
        hf = next(iter(to_hf(fam, {module + ".weight": torch.empty(0)})))[: -len(".weight")]
        if ".experts." in hf or TrellisEntry.from_config(entry).lead_dims(
                raw[module + ".weight"].ndim):
            continue  # stacked experts stay dense
        parent_name, _, leaf = hf.rpartition(".")
        parent = model.get_submodule(parent_name)
        old = getattr(parent, leaf)
        lin = TrellisLinear(raw[module + ".weight"], raw[module + ".scales"], entry,
                            old.bias.data if getattr(old, "bias", None) is not None else None)
        setattr(parent, leaf, lin.to(device))
        made.append(lin)
    if str(device).startswith("cuda"):
        trellis_cuda.prebuild_for(made)
        fuse_gate_up(model)  # one kernel call for gate and up (the same bits)
        fuse_qkv(model)  # and for q, k and v
        use_gqa_attention(model)  # one-token attention without repeat_kv
    return len(made)
