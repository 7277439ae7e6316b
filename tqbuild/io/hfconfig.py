"""The artifact's config.json: the source config, untied, with the top-level
`rope_theta` mlx-lm reads and the `quantization` entries it expects."""

from __future__ import annotations

import copy

from ..formats import FORMATS
from ..formats.dequant import module_entry


def _rope_fields(cfg: dict) -> None:
    """transformers 5 keeps RoPE settings in `rope_parameters`; mlx-lm reads them
    at the top level."""
    rp = cfg.get("rope_parameters")
    if not isinstance(rp, dict):
        return
    if "rope_theta" in rp:
        cfg.setdefault("rope_theta", rp["rope_theta"])
        if "partial_rotary_factor" in rp:
            cfg.setdefault("partial_rotary_factor", rp["partial_rotary_factor"])
    elif isinstance(rp.get("full_attention"), dict):  # per-layer-type (gemma3)
        cfg.setdefault("rope_theta", rp["full_attention"].get("rope_theta"))
        if isinstance(rp.get("sliding_attention"), dict):
            cfg.setdefault("rope_local_base_freq", rp["sliding_attention"].get("rope_theta"))


def _period(layer_types: list, kind: str) -> int | None:
    """p if `kind` layers sit exactly at every p-th position (p-1, 2p-1, …)."""
    idx = [i for i, t in enumerate(layer_types) if t == kind]
    if not idx:
        return None
    p = idx[0] + 1
    return p if idx == list(range(p - 1, len(layer_types), p)) else None


def _mlx_lm_fields(cfg: dict) -> None:
    """Names mlx-lm's ModelArgs use where transformers 5 writes others."""
    if "num_local_experts" in cfg:
        cfg.setdefault("num_experts", cfg["num_local_experts"])
    types = cfg.get("layer_types")
    if isinstance(types, list):
        if "sliding_attention" in types and (p := _period(types, "full_attention")):
            cfg.setdefault("sliding_window_pattern", p)
        if "linear_attention" in types and (p := _period(types, "full_attention")):
            cfg.setdefault("full_attention_interval", p)


def artifact_config(source_config: dict, *, model_type: str | None, untied: bool,
                    quantization: dict | None, dtype: str = "bfloat16") -> dict:
    cfg = copy.deepcopy(source_config)
    for k in ("_name_or_path", "_model_name_or_path", "transformers_version"):
        cfg.pop(k, None)
    targets = [cfg] + ([cfg["text_config"]] if isinstance(cfg.get("text_config"), dict) else [])
    for c in targets:
        _rope_fields(c)
        _mlx_lm_fields(c)
        if untied:
            c["tie_word_embeddings"] = False
        c.setdefault("tie_word_embeddings", c.get("tie_word_embeddings", True))
    if model_type:
        cfg["model_type"] = model_type
    cfg["torch_dtype"] = cfg["dtype"] = dtype
    if quantization:
        cfg["quantization"] = quantization
        # transformers picks its loader by quant_method (runtime/hf_quantizer.py);
        # mlx-lm reads `quantization`
        cfg["quantization_config"] = {"quant_method": "tq-build", **quantization}
    return cfg


def quantization_entry(specs: dict, default) -> dict | None:
    """Global group_size/bits/mode + per-module overrides where a module differs.
    The global entry is an MLX mode (a trellis default would hide the affine
    modules from mlx-lm); trellis modules are always listed per module."""

    quantized = {m: s for m, s in specs.items() if s.quantized}
    if not quantized:
        return None
    def native(s) -> bool:
        return FORMATS[s.format].mlx_native

    plain = [s for s in quantized.values() if native(s)]
    base = default if default.quantized and native(default) else (
        plain[0] if plain else next(iter(quantized.values())))
    entry: dict = module_entry(base)
    for m, s in sorted(quantized.items()):
        if module_entry(s) != module_entry(base) or not native(s):
            entry[m] = module_entry(s)
    return entry
