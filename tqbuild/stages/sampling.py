"""The self-generated calibration sampling rule, whatever runs the model (the
whole loaded model in calib_data, or one layer at a time in calib_stream)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ..recipe import CalibrateParams


def draw(logits: torch.Tensor, p: CalibrateParams, g: torch.Generator) -> torch.Tensor:
    """Next tokens [b, 1] (CPU) from float logits [b, V] at `temperature` (float64
    softmax). Version 2 computes on the logits' device (the uniforms come from the
    CPU generator), so a GPU build does not move [b, V] float64 to the host."""
    if p.version == 1:
        probs = torch.softmax(logits.double().cpu() / p.temperature, -1)
        return torch.multinomial(probs, 1, generator=g)
    cdf = torch.softmax(logits.double() / p.temperature, -1).cumsum(-1)
    u = torch.rand(cdf.shape[0], 1, generator=g, dtype=torch.float64).to(cdf.device)
    pick = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).clamp_max(cdf.shape[1] - 1)
    return pick.cpu()


@torch.no_grad()
def sample_tokens(p: CalibrateParams, bos: int | None, vocab: int,
                  new_cache: Callable[[], object],
                  next_logits: Callable[[object, torch.Tensor, int], torch.Tensor]
                  ) -> np.ndarray:
    """`samples` sequences of `seq_len` tokens, seeded, in batches of `p.batch`
    with one cache each: every sequence starts with BOS (or a seeded random token);
    next_logits(cache, ids [b, 1], position) -> logits [b, V] runs the model."""
    g = torch.Generator().manual_seed(p.seed)
    out = []
    for s in range(0, p.samples, p.batch):
        b = min(p.batch, p.samples - s)
        first = (torch.full((b, 1), bos) if bos is not None
                 else torch.randint(0, vocab, (b, 1), generator=g))
        cache, ids, seq = new_cache(), first, [first]
        for t in range(p.seq_len - 1):
            ids = draw(next_logits(cache, ids, t), p, g)
            seq.append(ids)
        out.append(torch.cat(seq, 1))
    return torch.cat(out).numpy().astype(np.int32)
