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
    return (_inverse_cholesky_upper_reversed if H.is_cuda else _inverse_cholesky_upper_direct)(H)


def _inverse_cholesky_upper_direct(H: torch.Tensor) -> torch.Tensor | None:
    """chol(H⁻¹) as written: Cholesky, inverse, Cholesky again (CPU builds)."""
    L, info = torch.linalg.cholesky_ex(H)
    if int(info) != 0:
        return None
    U, info = torch.linalg.cholesky_ex(torch.cholesky_inverse(L), upper=True)
    if int(info) != 0 or not bool(torch.isfinite(U).all()):
        return None
    return U


def _inverse_cholesky_upper_reversed(H: torch.Tensor) -> torch.Tensor | None:
    """The same U in half the float64 work (CUDA builds): H = R Rᵀ with R upper
    (the Cholesky factor of H with rows and columns reversed, reversed back), so
    H⁻¹ = (R⁻¹)ᵀ R⁻¹ and U = R⁻¹ — one Cholesky and one triangular inverse on GEMMs
    instead of Cholesky, inverse and Cholesky again. Equal up to rounding; CPU
    builds keep the path their locked artifacts were made with (CUDA builds are
    reproducible on their own, not byte-equal to CPU ones: README)."""
    Lr, info = torch.linalg.cholesky_ex(H.flip(0, 1))
    if int(info) != 0:
        return None
    U = lower_triangular_inverse(Lr).flip(0, 1)
    return U if bool(torch.isfinite(U).all()) else None


def lower_triangular_inverse(L: torch.Tensor, leaf: int = 1024,
                             out: torch.Tensor | None = None) -> torch.Tensor:
    """L⁻¹ of a lower-triangular L by halves: [[A, 0], [B, C]]⁻¹ =
    [[A⁻¹, 0], [−C⁻¹ B A⁻¹, C⁻¹]] (two GEMMs a level, triangular solves below
    `leaf`), written into one output buffer."""
    n = L.shape[0]
    if out is None:
        out = torch.zeros_like(L)
    if n <= leaf:
        eye = torch.eye(n, dtype=L.dtype, device=L.device)
        out.copy_(torch.linalg.solve_triangular(L, eye, upper=False))
        return out
    h = n // 2
    lower_triangular_inverse(L[:h, :h], leaf, out[:h, :h])
    lower_triangular_inverse(L[h:, h:], leaf, out[h:, h:])
    out[h:, :h] = -(out[h:, h:] @ (L[h:, :h] @ out[:h, :h]))
    return out


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
