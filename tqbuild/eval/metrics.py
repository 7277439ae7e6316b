"""Perplexity and KL(teacher ‖ candidate) from full-vocabulary logits."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..divergence import kl_rows

DECISIVE_MARGIN = 0.05  # logits; below it the teacher's own top-1 is a near-tie


@dataclass
class Comparison:
    tokens: int
    mean_kl: float
    max_kl: float
    top1_agreement: float
    decisive_top1_agreement: float  # over positions whose teacher top-2 margin >= 0.05


def window_logits(model, ids: torch.Tensor, window: int = 512):
    """Yields (start, float32 logits [t, V]) for each independent window of a
    1-D id tensor (on the ids' device)."""
    with torch.no_grad():
        for s in range(0, ids.numel(), window):
            yield s, model(ids[s:s + window][None]).logits[0].float()


def forward_logits(model, ids: torch.Tensor, window: int = 512) -> torch.Tensor:
    """float32 logits [T, V] for a 1-D id tensor, in independent windows."""
    return torch.cat([lg for _, lg in window_logits(model, ids, window)])


def window_nll(logits: torch.Tensor, ids: torch.Tensor) -> tuple[float, int]:
    """Summed next-token NLL inside one window, and the number of predictions."""
    if ids.numel() < 2:
        return 0.0, 0
    return float(torch.nn.functional.cross_entropy(logits[:-1], ids[1:], reduction="sum")), \
        ids.numel() - 1


def perplexity(logits: torch.Tensor, ids: torch.Tensor, window: int = 512) -> float:
    """exp(mean NLL) of next-token prediction inside each window."""
    parts = [window_nll(logits[s:s + window], ids[s:s + window])
             for s in range(0, ids.numel(), window)]
    return float(torch.exp(torch.tensor(sum(a for a, _ in parts) / sum(n for _, n in parts))))


def compare(teacher: torch.Tensor, candidate: torch.Tensor) -> Comparison:
    """Per-position KL(teacher ‖ candidate), computed in float64."""
    kl = kl_rows(teacher, candidate)
    same = teacher.argmax(-1) == candidate.argmax(-1)
    top2 = teacher.float().topk(2, -1).values
    decisive = (top2[:, 0] - top2[:, 1]) >= DECISIVE_MARGIN
    return Comparison(tokens=teacher.shape[0], mean_kl=float(kl.mean()), max_kl=float(kl.max()),
                      top1_agreement=float(same.double().mean()),
                      decisive_top1_agreement=float(same[decisive].double().mean()))
