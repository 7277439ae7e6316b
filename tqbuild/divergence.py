"""KL(teacher ‖ candidate) per position from two sets of logits, in float64:
the one definition verify, eval and the KV-cache evaluation share (the
top-K bracket over a teacher dump is eval/teacher.py's)."""

from __future__ import annotations

import torch


def kl_rows(teacher, candidate) -> torch.Tensor:
    """Per-row KL over the last dim; torch tensors or numpy arrays."""
    p = torch.log_softmax(torch.as_tensor(teacher).double(), -1)
    q = torch.log_softmax(torch.as_tensor(candidate).double(), -1)
    return (p.exp() * (p - q)).sum(-1)


def mean_kl(teacher, candidate) -> float:
    return float(kl_rows(teacher, candidate).mean())
