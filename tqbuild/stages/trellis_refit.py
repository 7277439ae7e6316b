"""Trellis scales refit after coding: with the codes fixed, the per-sequence
scales that minimise the Hessian-weighted error tr((W − Q) H (W − Q)ᵀ) are a
closed-form least-squares solution (issue 21's "scales refit after coding").

axis 1 (a scale per row r): s_r = (c_r H w_r) / (c_r H c_r), rows independent.
axis 0 (a scale per input column j): the error couples the columns through H,
so s solves (H ∘ CᵀC) s = b with b_j = Σ_i H_ij (WᵀC)_ij.

The fp16-rounded refit is kept only where it lowers the proxy (per row for
axis 1, as a whole for axis 0), so the proxy never increases. Builds use it with
`trellis: {refit: true}` (stages/trellis.refit)."""

from __future__ import annotations

import torch

from .guard import proxy_loss


def refit_scales(w: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor, h: torch.Tensor,
                 axis: int) -> torch.Tensor:
    """w, codes [out, in] (codes: the unscaled code values, original orientation),
    scales fp16 [rows for axis 1 | in for axis 0], h [in, in] -> refit fp16 scales."""
    W, C, H = w.double(), codes.double(), h.double().to(w.device)
    old = scales.double().to(w.device)
    if axis == 1:
        CH = C @ H
        num, den = (CH * W).sum(1), (CH * C).sum(1)
        new = torch.where(den > 0, num / den.clamp_min(1e-300), old).to(torch.float16)
        s = new.double()
        base = ((W @ H) * W).sum(1)

        def row_loss(v):
            return base - 2 * v * num + v * v * den

        return torch.where(row_loss(s) < row_loss(old), new, scales.to(w.device))
    M = H * (C.T @ C)
    b = (H * (W.T @ C)).sum(0)
    M = M + 1e-12 * M.diagonal().mean() * torch.eye(M.shape[0], dtype=M.dtype, device=M.device)
    try:
        new = torch.linalg.solve(M, b).to(torch.float16)
    except RuntimeError:  # singular (dead columns): keep the scales
        return scales
    if not torch.isfinite(new).all():
        return scales
    before = proxy_loss(w, C * old[None, :], h)
    after = proxy_loss(w, C * new.double()[None, :], h)
    return new if after < before else scales.to(w.device)
