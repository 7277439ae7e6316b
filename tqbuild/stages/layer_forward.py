"""Run one decoder layer at a time, with transformers' own layer classes.

The base model is built on the meta device from the HF config; every layer is
replaced by a pass-through, the final norm by identity, and the rotary
embeddings are rebuilt for real. To run layer i, a real layer i (materialised
from the folded tensors) is put in its slot: the base model's forward then
makes the masks and position embeddings that layer expects (sliding windows,
linear attention) and returns exactly that layer's output.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

from ..models import family_for
from ..models.base import Family
from .hf_cache import cache_kwargs


def text_family(config: dict) -> tuple[dict, Family]:
    """The text model's config (a vision-language checkpoint's `text_config`,
    else the config itself) and its family."""
    tc = config.get("text_config", config)
    return tc, family_for(tc.get("model_type", config.get("model_type")))


def layer_tensors(get, keys, family: Family, i: int) -> dict[str, torch.Tensor]:
    """Layer i's tensors, `get(name)` for every checkpoint name under its prefix,
    keyed relative to the layer ("mlp.down_proj.weight"), as LayerRunner.layer takes them."""
    prefix = f"{family.layer_prefix}{i}."
    return {k[len(prefix):]: get(k) for k in keys if k.startswith(prefix)}


class PassThrough(nn.Module):
    def forward(self, hidden_states, *args, **kwargs):
        return hidden_states


def text_config(config: dict, family: Family):
    from transformers import AutoConfig

    c = dict(config.get("text_config", config))
    for k in ("quantization", "quantization_config"):
        c.pop(k, None)
    mt = c.pop("model_type")
    mt = family.hf_text_model_type or mt
    cfg = AutoConfig.for_model(mt, **c)
    cfg._attn_implementation = "sdpa"
    return cfg


def to_module_state(rel: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Checkpoint names -> the layer module's parameter names (per-expert
    matrices fused into `experts.gate_up_proj` / `experts.down_proj`)."""
    out: dict[str, torch.Tensor] = {}
    experts: dict[tuple[str, str], dict[int, torch.Tensor]] = {}
    for k, v in rel.items():
        parts = k.split(".")
        if "experts" in parts and parts[parts.index("experts") + 1].isdigit():
            i = parts.index("experts")
            key = (".".join(parts[: i + 1]), parts[i + 2])
            experts.setdefault(key, {})[int(parts[i + 1])] = v
        else:
            out[k] = v
    for (base, proj), by_e in experts.items():
        if proj == "gate_proj":
            continue
        idx = sorted(by_e)
        if proj == "up_proj":
            gates = experts[(base, "gate_proj")]
            out[f"{base}.gate_up_proj"] = torch.stack(
                [torch.cat([gates[e], by_e[e]], 0) for e in idx])
        else:
            out[f"{base}.down_proj"] = torch.stack([by_e[e] for e in idx])
    return out


class LayerRunner:
    def __init__(self, config: dict, family: Family, device: str = "cpu"):
        from transformers import AutoModel

        self.cfg = text_config(config, family)
        self.family = family
        self.device = torch.device(device)
        with torch.device("meta"):
            base = AutoModel.from_config(self.cfg, dtype=torch.float32)
        self.meta_layers = list(base.layers)
        self.meta_norm = base.norm
        base.layers = nn.ModuleList(PassThrough() for _ in self.meta_layers)
        base.norm = nn.Identity()
        for name, mod in list(base.named_children()):
            if "rotary" in name:
                setattr(base, name, type(mod)(config=self.cfg).to(self.device))
        self.base = base
        self.embed_scale = (math.sqrt(self.cfg.hidden_size)
                            if family.embed_scale_sqrt_hidden else 1.0)

    def embed(self, weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.embedding(ids.long().to(self.device), weight.to(self.device))
        return x * self.embed_scale if self.embed_scale != 1.0 else x

    def layer(self, i: int, rel_state: dict[str, torch.Tensor]) -> nn.Module:
        """Layer i materialised from checkpoint-named float32 tensors (relative names)."""
        mod = copy.deepcopy(self.meta_layers[i]).to_empty(device=self.device)  # meta copy: free
        state = {k: v.to(self.device, torch.float32) for k, v in to_module_state(rel_state).items()}
        mod.load_state_dict(state, strict=True)
        return mod.eval()

    def final_norm(self, weight: torch.Tensor) -> nn.Module:
        """The model's final norm, materialised with `weight` (HF semantics)."""
        mod = copy.deepcopy(self.meta_norm).to_empty(device=self.device)
        mod.load_state_dict({"weight": weight.to(self.device, torch.float32)}, strict=True)
        return mod.eval()

    @torch.no_grad()
    def run(self, i: int, layer: nn.Module, x: torch.Tensor, on_sample=None) -> torch.Tensor:
        """Layer i's output for inputs x [samples, T, hidden], one sample at a time:
        a GEMM's rounding can depend on its row count, so batching would make the
        activations (and every Hessian after them) depend on how samples are grouped."""
        self.base.layers[i] = layer
        outs = []
        try:
            for s in range(x.shape[0]):
                if on_sample is not None:
                    on_sample(s, 1)
                y = self.base(inputs_embeds=x[s:s + 1].to(self.device),
                              use_cache=False).last_hidden_state
                outs.append(y.to(x.device))
        finally:
            self.base.layers[i] = PassThrough()
        return torch.cat(outs)

    @torch.no_grad()
    def step(self, i: int, layer: nn.Module, x: torch.Tensor, cache, position_ids: torch.Tensor
             ) -> torch.Tensor:
        """Layer i on new tokens x [b, t, hidden] at `position_ids`, reading and
        appending to the model-wide `cache` (incremental decoding, whole batch)."""
        self.base.layers[i] = layer
        try:
            return self.base(inputs_embeds=x.to(self.device), use_cache=True,
                             position_ids=position_ids,
                             **cache_kwargs(self.base, cache)).last_hidden_state
        finally:
            self.base.layers[i] = PassThrough()
