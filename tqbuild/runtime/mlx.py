"""Load a tq-build artifact into mlx-lm, trellis modules included.

`load(path)` builds the mlx-lm model for the config, swaps a packed
TrellisLinear (runtime/mlx_trellis.py) in for every `mode: trellis` module
and a TrellisSwitchLinear for trellis-coded stacked experts, lets mlx-lm's
own quantized layers take the affine / microscaling modules, and returns
(model, tokenizer) ready for `mlx_lm.generate`.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn

from ..formats import format_of
from ..formats.trellis import TrellisEntry
from .mlx_trellis import TrellisLinear, TrellisSwitchLinear, resident_bytes

__all__ = ["TrellisLinear", "TrellisSwitchLinear", "load", "resident_bytes"]


def _get_module(root: nn.Module, path: str) -> nn.Module:
    for p in path.split("."):
        root = root[int(p)] if isinstance(root, list) else getattr(root, p)
    return root


def _set_module(root: nn.Module, path: str, module: nn.Module) -> None:
    parent_path, _, leaf = path.rpartition(".")
    parent = _get_module(root, parent_path) if parent_path else root
    if isinstance(parent, list):
        parent[int(leaf)] = module
    else:
        setattr(parent, leaf, module)


def load(path: str | Path, dtype=None, cache_dense: bool = False):
    """-> (mlx-lm model, tokenizer or None when the artifact has none). Trellis
    modules stay packed (decoded per call); `cache_dense=True` keeps each one's
    decoded weight (in the activation dtype) after its first call instead."""
    from mlx_lm.utils import _get_classes, load_tokenizer

    path = Path(path)
    config = json.loads((path / "config.json").read_text())
    quant = dict(config.get("quantization") or {})
    trellis = {m: e for m, e in quant.items()  # what MLX's own layers cannot load
               if isinstance(e, dict) and not format_of(e).mlx_native}
    affine = {k: v for k, v in quant.items() if k not in trellis}
    cfg = copy.deepcopy(config)
    for key in ("quantization", "quantization_config"):
        cfg.pop(key, None)
    weights: dict[str, mx.array] = {}
    for f in sorted(path.glob("*.safetensors")):
        weights.update(mx.load(str(f)))
    model_class, args_class = _get_classes(config=cfg)
    model = model_class(args_class.from_dict(cfg))
    if hasattr(model, "sanitize"):
        weights = model.sanitize(weights)
    for m, e in trellis.items():
        w, s, b = weights[f"{m}.weight"], weights[f"{m}.scales"], weights.get(f"{m}.bias")
        if TrellisEntry.from_config(e).lead_dims(w.ndim):
            _set_module(model, m, TrellisSwitchLinear(w, s, e, b))
        else:
            _set_module(model, m, TrellisLinear.from_entry(w, s, e, b, cache_dense))
    if "bits" in affine:
        def predicate(p, m):
            if p in affine and isinstance(affine[p], dict):
                return affine[p]
            return hasattr(m, "to_quantized") and f"{p}.scales" in weights

        nn.quantize(model, group_size=affine["group_size"], bits=affine["bits"],
                    mode=affine.get("mode", "affine"), class_predicate=predicate)
    model.load_weights(list(weights.items()), strict=True)
    if dtype is not None:
        model.set_dtype(dtype)
        for m in trellis:  # the fp16 scales are part of the format
            _get_module(model, m).scales = weights[f"{m}.scales"]
    model.eval()
    mx.eval(model.parameters())
    has_tokenizer = any((path / f).is_file() for f in ("tokenizer.json", "tokenizer.model"))
    return model, load_tokenizer(path) if has_tokenizer else None
