"""transformers integration: `AutoModelForCausalLM.from_pretrained(ARTIFACT)` on a
tq-build artifact (config.json `quantization_config.quant_method: tq-build`)
returns the transformers model with its quantized modules held packed —
trellis as runtime/trellis_torch.TrellisLinear (Triton kernels on CUDA),
affine as runtime/affine_torch.AffineLinear / AffineEmbedding, microscaling
formats dequantized to dense. Registered with transformers' quantizer registry
by `tqbuild.runtime.hf_register` when transformers' quantizer module loads.

Before weight loading the quantized modules are swapped for empty placeholders
(their packed tensors would not fit transformers' dense shapes); after it,
every module and tensor is set from the artifact's own files through the
layout map (io.layout.to_hf), so the values are exactly the torch loader's.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn
from transformers.quantizers.auto import register_quantization_config, register_quantizer
from transformers.quantizers.base import HfQuantizer
from transformers.utils.quantization_config import QuantizationConfigMixin

from ..formats import format_of
from ..formats.dequant import entry_for
from ..io.layout import to_hf
from ..models import family_for
from .affine_torch import AffineEmbedding, AffineLinear
from .fused_mlp import fuse_gate_up
from .fused_qkv import fuse_qkv
from .gqa_attention import use_gqa_attention
from .torch_load import read_artifact_tensors
from .trellis_torch import TrellisLinear

METHOD = "tq-build"


@register_quantization_config(METHOD)
class TqBuildConfig(QuantizationConfigMixin):
    """The artifact's `quantization` entry (global group_size/bits/mode and the
    per-module entries), carried as is."""

    def __init__(self, **entries):
        self.quant_method = METHOD
        self.entries = {k: v for k, v in entries.items() if k != "quant_method"}

    @classmethod
    def from_dict(cls, config_dict, return_unused_kwargs=False, **kwargs):
        cfg = cls(**config_dict)
        return (cfg, kwargs) if return_unused_kwargs else cfg

    def to_dict(self) -> dict:
        return {"quant_method": METHOD, **self.entries}


class _Pending(nn.Module):
    """Where a packed module goes once the artifact's tensors are read."""

    def __init__(self, old: nn.Module):
        super().__init__()
        self.embedding = isinstance(old, nn.Embedding)
        self.embed_scale = getattr(old, "embed_scale", None)


def artifact_dir(model) -> Path:
    ref = str(model.config._name_or_path)
    if Path(ref).is_dir():
        return Path(ref)
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(ref, local_files_only=True))


def packed_modules(path: Path) -> list[str]:
    """Artifact module names that carry a quantized weight (a `.scales` part)."""
    from safetensors import safe_open

    names = []
    for f in sorted(path.glob("*.safetensors")):
        with safe_open(str(f), "pt") as h:
            names += [k[: -len(".scales")] for k in h.keys() if k.endswith(".scales")]
    return names


def _hf_name(fam, module: str) -> str:
    if ".switch_mlp." in module:
        raise ValueError(f"{module}: stacked experts are not loaded by the transformers "
                         "quantizer; use tqbuild.runtime.torch_load.load_torch(path)")
    return next(iter(to_hf(fam, {module + ".weight": torch.empty(0, 0)})))[: -len(".weight")]


def _set(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, module)


@register_quantizer(METHOD)
class TqBuildQuantizer(HfQuantizer):
    requires_calibration = True  # loads pre-quantized artifacts only

    def validate_environment(self, *args, **kwargs):
        pass

    def param_needs_quantization(self, model, param_name: str, **kwargs) -> bool:
        return False

    def _process_model_before_weight_loading(self, model, **kwargs):
        self._path = path = artifact_dir(model)
        self._config = json.loads((path / "config.json").read_text())
        self._family = fam = family_for(self._config["model_type"])
        self._modules = {m: _hf_name(fam, m) for m in packed_modules(path)}
        for hf in self._modules.values():
            _set(model, hf, _Pending(model.get_submodule(hf)))
        model._keys_to_ignore_on_load_unexpected = {
            r"\.(scales|biases)$", *(rf"^{hf}\.weight$" for hf in self._modules.values())}
        return model

    def _process_model_after_weight_loading(self, model, **kwargs):
        fam = self._family
        quant = self._config.get("quantization") or {}
        raw = read_artifact_tensors(self._path)
        device = next(model.parameters()).device
        dtype = model.dtype
        for m, hf in self._modules.items():
            pending = model.get_submodule(hf)
            entry = entry_for(quant, m)
            w, s, b = raw[f"{m}.weight"], raw[f"{m}.scales"], raw.get(f"{m}.biases")
            bias = raw.get(f"{m}.bias")
            if entry.get("mode") == "trellis":
                new: nn.Module = TrellisLinear(w, s, entry, bias)
            elif entry.get("mode", "affine") == "affine" and pending.embedding:
                new = AffineEmbedding(w, s, b, entry["bits"], entry["group_size"], dtype,
                                      pending.embed_scale)
            elif entry.get("mode", "affine") == "affine":
                new = AffineLinear(w, s, b, entry["bits"], entry["group_size"], bias)
            else:  # microscaling formats: dense float values
                dense = format_of(entry).dequantize(w, s, b, entry, torch.float32).to(dtype)
                if pending.embedding:
                    new = nn.Embedding.from_pretrained(dense, freeze=True)
                else:
                    new = nn.Linear(dense.shape[1], dense.shape[0], bias=bias is not None)
                    new.weight.data, new.bias = dense, (nn.Parameter(bias) if bias is not None
                                                       else None)
            _set(model, hf, new.to(device))
        self._tie_packed_head(model)
        if device.type == "cuda":
            fuse_gate_up(model)  # one kernel call for gate and up (the same bits)
            fuse_qkv(model)  # and for q, k and v
            use_gqa_attention(model)  # one-token attention without repeat_kv
        packed = set(self._modules)
        dense = {k: v for k, v in raw.items() if k.rsplit(".", 1)[0] not in packed}
        state = model.state_dict()
        with torch.no_grad():
            for k, v in to_hf(fam, dense).items():
                if k in state and state[k].shape == v.shape:
                    state[k].copy_(v.to(state[k].dtype))
        return model

    def _tie_packed_head(self, model) -> None:
        """A tied lm_head over a packed embedding reads the embedding's tensors."""
        emb = model.get_input_embeddings()
        head = getattr(model, "lm_head", None)
        if isinstance(emb, AffineEmbedding) and isinstance(head, nn.Linear) and \
                "lm_head" not in self._modules.values():
            model.lm_head = emb.as_linear()

    @property
    def is_trainable(self) -> bool:
        return False

    def is_serializable(self, safe_serialization=None) -> bool:
        return False
