"""Self-generated calibration sampled one decoder layer at a time (recipe
`calibration: {stream: true}`): for each new token the batch's hidden state
passes through layer 0, 1, … — each materialised from the checkpoint shards
and dropped unless it fits the resident budget — with one KV cache for the
whole batch. Peak memory is the resident layers plus the cache, never the
model, so a 27B source samples on a machine that holds one layer (at the cost
of reading every layer once per token when they do not stay resident).

The sampling rule is the whole-model sampler's (stages/sampling.py, for
either calibration version); only the forward runs layer by layer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from ..io.source import Source
from ..recipe import CalibrateParams
from .layer_forward import LayerRunner, layer_tensors, text_family
from .sampling import sample_tokens

RESIDENT_BYTES = 2 << 30  # materialised layers kept between tokens up to this many bytes


def step_cache(cfg):
    """A model-wide DynamicCache whose reported lengths stay at the step's start
    while that step's layers run one at a time (the whole-model forward reads
    them once, before any layer has appended the new token)."""
    from transformers.cache_utils import CacheLayerMixin, DynamicCache

    class StepCache(DynamicCache):
        frozen: dict[int, tuple[int, tuple[int, int]]] | None = None

        def freeze(self, query_length: int) -> None:
            self.frozen = {i: (layer.get_seq_length(), layer.get_mask_sizes(query_length))
                           for i, layer in enumerate(self.layers)
                           if isinstance(layer, CacheLayerMixin)}

        def _idx(self, i: int) -> int:
            assert self.frozen is not None
            return i if i in self.frozen else min(self.frozen)

        def get_seq_length(self, layer_idx: int = 0) -> int:
            if not self.frozen:
                return super().get_seq_length(layer_idx)
            return self.frozen[self._idx(layer_idx)][0]

        def get_mask_sizes(self, query_length: int, layer_idx: int) -> tuple[int, int]:
            if not self.frozen:
                return super().get_mask_sizes(query_length, layer_idx)
            return self.frozen[self._idx(layer_idx)][1]

    return StepCache(config=cfg)


class StreamedModel:
    """The source checkpoint as embeddings → layers → norm/head, layers
    materialised on demand (kept while they fit `resident_bytes`)."""

    def __init__(self, source_dir: Path, device: str = "cpu",
                 resident_bytes: int = RESIDENT_BYTES):
        self.source = Source(Path(source_dir))
        config = self.source.config
        tc, self.fam = text_family(config)
        self.runner = LayerRunner(config, self.fam, device)
        self.layers = int(tc["num_hidden_layers"])
        self.vocab = int(tc["vocab_size"])
        bos = tc.get("bos_token_id", config.get("bos_token_id"))
        self.bos = bos[0] if isinstance(bos, list) else bos
        self.keys = keys = self.source.keys()
        self.embed_w = self.source.get(f"{self.fam.embed}.weight").float()
        head = f"{self.fam.lm_head}.weight"
        self.head = (self.source.get(head).float() if head in keys
                     else self.embed_w).to(device)
        self.norm = self.runner.final_norm(self.source.get(f"{self.fam.final_norm}.weight"))
        self.budget = resident_bytes
        self._resident: dict[int, torch.nn.Module] = {}
        self._resident_bytes = 0

    def layer(self, i: int) -> torch.nn.Module:
        if i in self._resident:
            return self._resident[i]
        mod = self.runner.layer(i, layer_tensors(
            lambda k: self.source.get(k, self.runner.device), self.keys, self.fam, i))
        size = sum(p.numel() * p.element_size() for p in mod.parameters())
        if self._resident_bytes + size <= self.budget:
            self._resident[i] = mod
            self._resident_bytes += size
        return mod

    @torch.no_grad()
    def next_logits(self, cache, ids: torch.Tensor, position: int) -> torch.Tensor:
        """float32 logits [b, V] of the last position after feeding `ids` [b, 1]."""
        cache.freeze(ids.shape[1])
        x = self.runner.embed(self.embed_w, ids)
        pos = torch.full(ids.shape, position, dtype=torch.long, device=x.device)
        for i in range(self.layers):
            x = self.runner.step(i, self.layer(i), x, cache, pos)
        return F.linear(self.norm(x[:, -1]), self.head).float()


def self_generated_streamed(source_dir: Path, p: CalibrateParams, device: str = "cpu",
                            resident_bytes: int = RESIDENT_BYTES) -> np.ndarray:
    model = StreamedModel(source_dir, device, resident_bytes)
    return sample_tokens(p, model.bos, model.vocab, lambda: step_cache(model.runner.cfg),
                         model.next_logits)
