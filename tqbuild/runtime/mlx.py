"""Load a tq-build artifact into mlx-lm, trellis modules included.

`TrellisLinear` decodes its packed words with MLX ops only (two word gathers,
shifts, a mask and a code-table gather per weight, then × the fp16 scale in
float32), so it runs on every MLX backend; the decoded float32 weight is kept
after the first call. `load(path)` builds the mlx-lm model for the config,
swaps a TrellisLinear in for every `mode: trellis` module, lets mlx-lm's own
quantized layers take the affine / microscaling modules, and returns
(model, tokenizer) ready for `mlx_lm.generate`.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ..formats import format_of
from ..formats.trellis import TrellisEntry
from ..kernels.trellis_codes import code_table


class TrellisLinear(nn.Module):
    def __init__(self, weight: mx.array, scales: mx.array, *, k: int, T: int, L: int,
                 code: str, axis: int, interleave: bool, bias: mx.array | None = None):
        super().__init__()
        self.weight, self.scales = weight, scales
        if bias is not None:
            self.bias = bias
        self.k, self.T, self.L, self.axis, self.interleave = k, T, L, axis, interleave
        object.__setattr__(self, "_entry", TrellisEntry(k, T, L, code, axis, interleave))
        object.__setattr__(self, "_table", mx.array(code_table(code, L)))
        object.__setattr__(self, "_decoded", None)

    @classmethod
    def from_entry(cls, weight, scales, entry: dict, bias=None) -> TrellisLinear:
        te = TrellisEntry.from_config(entry)
        return cls(weight, scales, k=te.k, T=te.T, L=te.L, code=te.code, axis=te.axis,
                   interleave=te.interleave, bias=bias)

    def decode(self) -> mx.array:
        """float32 [out, in]."""
        words = self._entry.plain_words(self.weight)
        rows, nw = words.shape
        wpb = self.T * self.k // 32
        nb = nw // wpb
        w = words.reshape(rows, nb, wpb)
        off = (self.T - 1 - np.arange(self.T)) * self.k
        i0 = off // 32
        i1 = (i0 + 1) % wpb  # the window wraps to the block's first word
        sh = mx.array((off % 32).astype(np.uint32))
        lo = mx.take(w, mx.array(i0), axis=2) >> sh
        hi = (mx.take(w, mx.array(i1), axis=2) << (31 - sh)) << 1  # no shift by 32
        state = (lo | hi) & ((1 << self.L) - 1)
        vals = mx.take(self._table, state).reshape(rows, nb * self.T)
        out = vals * self.scales.astype(mx.float32)[:, None]
        return out if self.axis == 1 else out.T

    def __call__(self, x: mx.array) -> mx.array:
        if self._decoded is None:
            object.__setattr__(self, "_decoded", self.decode())
        y = x @ self._decoded.astype(x.dtype).T
        return y + self.bias if "bias" in self else y


def _set_module(root: nn.Module, path: str, module: nn.Module) -> None:
    parts = path.split(".")
    parent = root
    for p in parts[:-1]:
        parent = parent[int(p)] if isinstance(parent, list) else getattr(parent, p)
    if isinstance(parent, list):
        parent[int(parts[-1])] = module
    else:
        setattr(parent, parts[-1], module)


def load(path: str | Path, dtype=None):
    """-> (mlx-lm model, tokenizer or None when the artifact has none), trellis
    modules decoded by TrellisLinear."""
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
        if TrellisEntry.from_config(e).lead_dims(weights[f"{m}.weight"].ndim):
            raise ValueError(f"{m}: trellis-coded stacked experts are not supported by the "
                             "MLX runtime yet")
        _set_module(model, m, TrellisLinear.from_entry(
            weights[f"{m}.weight"], weights[f"{m}.scales"], e, weights.get(f"{m}.bias")))
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
    model.eval()
    mx.eval(model.parameters())
    has_tokenizer = any((path / f).is_file() for f in ("tokenizer.json", "tokenizer.model"))
    return model, load_tokenizer(path) if has_tokenizer else None
