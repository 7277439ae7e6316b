"""The numerics GPTQ and LDLQ share (seed W5c): dead input columns, the
damped inverse Cholesky factor, the damping ladder the guard climbs, and the
two error measures every module record carries."""

from __future__ import annotations

from collections.abc import Iterator

import torch


def mask_dead_columns(W: torch.Tensor, H: torch.Tensor) -> None:
    """Inputs that never fire (diag H = 0): unit diagonal, zero weights (in place)."""
    dead = torch.diag(H) == 0
    H[dead, dead] = 1.0
    W[:, dead] = 0.0


def inverse_cholesky_upper(H: torch.Tensor, damp: float) -> torch.Tensor | None:
    """U upper with (H + damp·mean(diag H)·I)⁻¹ = UᵀU; None if not positive definite."""
    n = H.shape[0]
    H = H + damp * torch.mean(torch.diag(H)) * torch.eye(n, dtype=H.dtype, device=H.device)
    L, info = torch.linalg.cholesky_ex(H)
    if int(info) != 0:
        return None
    U, info = torch.linalg.cholesky_ex(torch.cholesky_inverse(L), upper=True)
    if int(info) != 0 or not bool(torch.isfinite(U).all()):
        return None
    return U


def damping_ladder(damp: float, max_damp: float) -> Iterator[float]:
    """damp, 10·damp, 100·damp, ... up to max_damp: the guard's escalation."""
    d = damp
    while d <= max_damp * (1 + 1e-9):
        yield d
        d *= 10


def proxy_loss(w: torch.Tensor, wq: torch.Tensor, h: torch.Tensor) -> float:
    """tr((W − Q) H (W − Q)ᵀ)."""
    d = (w.double() - wq.double())
    return float(((d @ h.double()) * d).sum())


def relative_error(w: torch.Tensor, wq: torch.Tensor) -> float:
    """Relative Frobenius error ||W − Q|| / ||W||."""
    return float(torch.linalg.norm(w - wq) / torch.linalg.norm(w).clamp_min(1e-30))
