"""GPTQ (Frantar et al. 2022), the paper's algorithm, into MLX's affine format.

Columns are quantized in order (or by descending diag(H) with act-order);
each column's error, scaled by the inverse Hessian's Cholesky factor, is
propagated to the later columns of its block at once and to the columns after
the block lazily. Group parameters are taken from the fully updated weights
when a group starts (static groups from the original weights with act-order,
DESIGN §8) and rounded to the stored dtype before they are used. Two defects
of mlx-lm's copy (seed W5a) are avoided: the in-block update covers exactly
the rest of the block, and the block's error buffer is indexed locally.

The guard (seed W5c): a failed Cholesky or group scales above `scale_ratio` ×
the matrix's RTN scale ceiling escalate damping ×10 up to `max_damp`, then fall
back to RTN; finally GPTQ is kept only if its proxy loss tr((W−Q) H (W−Q)ᵀ)
under the undamped H is not above RTN's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..formats import mlx_affine
from .guard import damping_ladder, inverse_cholesky_upper, mask_dead_columns, proxy_loss


@dataclass
class AffineResult:
    q: torch.Tensor  # int32 [rows, cols]
    scales: torch.Tensor  # [rows, groups] stored dtype
    biases: torch.Tensor
    method: str  # "gptq" | "rtn"
    damp: float | None = None
    events: list[dict] = field(default_factory=list)
    proxy_loss: float = 0.0
    rtn_proxy_loss: float = 0.0


class GroupParams:
    """A group's stored (scale, bias) and its float64 quantize operands, derived
    once per group rather than per column (mlx_affine.value_operands)."""

    def __init__(self, s: torch.Tensor, b: torch.Tensor):
        self.s, self.b = s, b
        self.bias, self.div = mlx_affine.value_operands(s, b, torch.float64)


def quantize_column(w: torch.Tensor, gp: GroupParams, bits: int
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """(q int, dequantized value in float64 as the runtime computes it) of a
    float64 column: q as mlx_affine.quantize_values."""
    q = mlx_affine.quantize_with(w, gp.bias, gp.div, bits)
    deq = (q.to(gp.s.dtype) * gp.s + gp.b).double()  # one rounding per op, as mx.dequantize
    return q.to(torch.int32), deq


def gptq_core(w: torch.Tensor, h: torch.Tensor, bits: int, group_size: int, damp: float,
              block_size: int = 128, act_order: bool = False,
              dtype: torch.dtype = torch.bfloat16) -> AffineResult | None:
    """One GPTQ pass; None if the damped Hessian is not positive definite."""
    rows, cols = w.shape
    W = w.double().clone()
    H = h.double().clone()
    mask_dead_columns(W, H)
    ngroups = cols // group_size
    dev = W.device
    scales = torch.empty(rows, ngroups, dtype=dtype, device=dev)
    biases = torch.empty(rows, ngroups, dtype=dtype, device=dev)
    perm = torch.argsort(torch.diag(H), descending=True, stable=True) if act_order else None
    params: dict[int, GroupParams] = {}  # group -> operands, made when its scales are
    if act_order:
        for g in range(ngroups):  # static groups on the original contiguous columns
            block = W[:, g * group_size:(g + 1) * group_size]
            scales[:, g], biases[:, g] = mlx_affine.group_params(block, bits, dtype)
            params[g] = GroupParams(scales[:, g], biases[:, g])
        W, H = W[:, perm], H[perm][:, perm]
    U = inverse_cholesky_upper(H, damp)
    if U is None:
        return None
    Q = torch.zeros_like(W)
    qint = torch.zeros(rows, cols, dtype=torch.int32, device=dev)
    for i1 in range(0, cols, block_size):
        i2 = min(i1 + block_size, cols)
        W1 = W[:, i1:i2].clone()
        E1 = torch.zeros_like(W1)
        U1 = U[i1:i2, i1:i2]
        for i in range(i2 - i1):
            col = i1 + i
            orig = int(perm[col]) if perm is not None else col
            g = orig // group_size
            if not act_order and orig % group_size == 0:
                # the group's columns as updated so far (in-block part lives in W1)
                blk = torch.cat([W1[:, i:], W[:, i2:]], 1)[:, :group_size]
                scales[:, g], biases[:, g] = mlx_affine.group_params(blk, bits, dtype)
                params[g] = GroupParams(scales[:, g], biases[:, g])
            qi, deq = quantize_column(W1[:, i], params[g], bits)
            Q[:, col], qint[:, col] = deq, qi
            err = (W1[:, i] - deq) / U1[i, i]
            W1[:, i:] -= err[:, None] * U1[i, i:][None, :]
            E1[:, i] = err
        W[:, i2:] -= E1 @ U[i1:i2, i2:]
    if perm is not None:
        inv = torch.argsort(perm)
        Q, qint = Q[:, inv], qint[:, inv]
    return AffineResult(q=qint, scales=scales, biases=biases, method="gptq", damp=damp)


def gptq_guarded(w: torch.Tensor, h: torch.Tensor, bits: int, group_size: int, *,
                 damp: float = 0.01, block_size: int = 128, act_order: bool = False,
                 scale_ratio: float = 4.0, max_damp: float = 10.0,
                 dtype: torch.dtype = torch.bfloat16) -> AffineResult:
    """GPTQ with the divergence guard; never worse than RTN on the proxy loss."""
    h = h.to(w.device)
    q_r, s_r, b_r = mlx_affine.quantize_rtn(w, bits, group_size, dtype)
    rtn = AffineResult(q=q_r, scales=s_r, biases=b_r, method="rtn")
    rtn.rtn_proxy_loss = rtn.proxy_loss = proxy_loss(
        w, mlx_affine.dequantize(q_r, s_r, b_r, group_size), h)
    ceiling = float(s_r.float().max())
    events: list[dict] = []
    for d in damping_ladder(damp, max_damp):
        res = gptq_core(w, h, bits, group_size, d, block_size, act_order, dtype)
        if res is None:
            events.append({"event": "cholesky_failed", "damp": d})
        elif ceiling > 0 and float(res.scales.float().max()) > scale_ratio * ceiling:
            events.append({"event": "scale_diverged", "damp": d,
                           "max_scale": float(res.scales.float().max()), "rtn_ceiling": ceiling})
        else:
            res.proxy_loss = proxy_loss(
                w, mlx_affine.dequantize(res.q, res.scales, res.biases, group_size), h)
            res.rtn_proxy_loss = rtn.proxy_loss
            if res.proxy_loss > rtn.proxy_loss:
                events.append({"event": "rtn_better", "damp": d, "gptq_loss": res.proxy_loss,
                               "rtn_loss": rtn.proxy_loss})
                break
            if events:
                events.append({"event": "recovered", "damp": d})
            res.events = events
            return res
    events.append({"event": "fallback_rtn"})
    rtn.events = events
    return rtn
