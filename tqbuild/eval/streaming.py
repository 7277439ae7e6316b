"""Forward passes that hold one decoder layer at a time: embeddings → each layer
(materialised from the checkpoint, run on every evaluation window, dropped) →
final norm and lm_head, window by window. Peak memory is one layer plus the
windows' hidden states and one window's logits, never the model — so the
teacher dump and the candidate's evaluation of a 27B model fit a machine that
holds one layer.

Tensors come from a reader with HF names: `SourceReader` (a source
checkpoint's shards) or `ArtifactReader` (an artifact: quantized modules
dequantized one at a time as the torch loader does, in float32, through the
layout map io.layout.to_hf).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import safe_open

from ..formats import format_of
from ..formats.dequant import dequantize_module, entry_for
from ..io.layout import to_hf
from ..io.source import Source
from ..models import family_for
from ..stages.layer_forward import LayerRunner, layer_tensors, text_family


class SourceReader:
    def __init__(self, path: Path):
        self.source = Source(Path(path))
        self.config = self.source.config

    def keys(self) -> list[str]:
        return self.source.keys()

    def get(self, name: str, device: torch.device | str | None = None) -> torch.Tensor:
        return self.source.get(name, device)


class ArtifactReader:
    """An artifact's tensors under their HF names, dequantized on request."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.config = json.loads((self.path / "config.json").read_text())
        self.family = family_for(self.config["model_type"])
        self.quant = self.config.get("quantization") or {}
        self._file: dict[str, Path] = {}
        shapes: dict[str, list[int]] = {}
        for f in sorted(self.path.glob("*.safetensors")):
            with safe_open(str(f), "pt") as h:
                for k in h.keys():
                    self._file[k] = f
                    shapes[k] = list(h.get_slice(k).get_shape())
        self._hf: dict[str, str] = {}  # HF name -> artifact tensor
        for k, shape in shapes.items():
            if k.endswith((".scales", ".biases")):
                continue
            module = k[: -len(".weight")]
            if k.endswith(".weight") and f"{module}.scales" in shapes:
                e = entry_for(self.quant, module)
                shape = format_of(e).logical_shape(shape, e)
            for hf in to_hf(self.family, {k: torch.empty(shape, device="meta")}):
                self._hf[hf] = k
        self._last: tuple[str, dict] | None = None  # stacked experts: one stack cached

    def keys(self) -> list[str]:
        return list(self._hf)

    def _raw(self, key: str) -> torch.Tensor | None:
        if key not in self._file:
            return None
        with safe_open(str(self._file[key]), "pt") as h:
            return h.get_tensor(key)

    def get(self, name: str) -> torch.Tensor:
        key = self._hf[name]
        if self._last is None or self._last[0] != key:
            t = self._raw(key)
            assert t is not None  # every indexed key is in a shard
            module = key[: -len(".weight")]
            scales = self._raw(f"{module}.scales") if key.endswith(".weight") else None
            if scales is not None:
                t = dequantize_module(t, scales, self._raw(f"{module}.biases"),
                                      entry_for(self.quant, module), torch.float32)
            self._last = (key, to_hf(self.family, {key: t}))
        return self._last[1][name].float()


def reader_for(path: Path) -> SourceReader | ArtifactReader:
    """An artifact (it has optiq_metadata.json) or a source checkpoint."""
    return ArtifactReader(path) if (Path(path) / "optiq_metadata.json").is_file() \
        else SourceReader(path)


@torch.no_grad()
def stream_logits(reader, ids: torch.Tensor, window: int, on_window: Callable,
                  device: str = "cpu") -> None:
    """Calls on_window(start, float32 logits [t, V]) for each window of `ids`
    (independent windows, as eval.metrics.forward_logits)."""
    tc, fam = text_family(reader.config)
    runner = LayerRunner(reader.config, fam, device)
    embed = reader.get(f"{fam.embed}.weight")
    starts = list(range(0, ids.numel(), window))
    xs = [runner.embed(embed, ids[s:s + window])[None] for s in starts]
    keys = reader.keys()
    for i in range(int(tc["num_hidden_layers"])):
        rel = layer_tensors(reader.get, keys, fam, i)
        layer = runner.layer(i, rel)
        del rel
        xs = [runner.run(i, layer, x) for x in xs]
        del layer
    norm = runner.final_norm(reader.get(f"{fam.final_norm}.weight"))
    head_name = f"{fam.lm_head}.weight"
    head = (reader.get(head_name) if head_name in keys else embed).to(device)
    del embed
    for s, x in zip(starts, xs, strict=True):
        on_window(s, (norm(x.to(device))[0] @ head.T).float().cpu())
