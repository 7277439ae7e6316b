"""The tail-biting Viterbi pass as one Triton program per T-block (CUDA).

The forward pass (the hot loop) runs here with the same float32 operations as
kernels/viterbi.py — every add and multiply rounded on its own (launched with
`enable_fp_fusion=False`, no FMA contraction) — so its per-step best costs
and final costs are bit-identical to the torch path's; the final argmin and
the backtrack (T small steps) are the torch path's own code, so the chosen
states are too. The 2^L path costs live in registers, laid out [c, j] so the
best predecessor of group j is a min over axis 0.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - CPU-only installs
    triton = None

MAX_L = 12  # register budget of one program


if triton is not None:

    @triton.jit
    def _viterbi_pass(x_ptr, code_ptr, best_ptr, final_ptr, overlap_ptr, T: tl.constexpr,
                      HAS_OVERLAP: tl.constexpr, L: tl.constexpr, K: tl.constexpr):
        pid = tl.program_id(0).to(tl.int64)
        C: tl.constexpr = 1 << K
        J: tl.constexpr = 1 << (L - K)
        S: tl.constexpr = 1 << L
        s_nat = tl.arange(0, C)[:, None] * J + tl.arange(0, J)[None, :]  # [c, j] -> c·J + j
        code = tl.load(code_ptr + s_nat)
        xrow = x_ptr + pid * T
        brow = best_ptr + pid * T * J
        x0 = tl.load(xrow)
        d = code - x0
        cost = d * d
        ov = 0
        if HAS_OVERLAP:  # s_0's top L−k bits are the overlap
            ov = tl.load(overlap_ptr + pid)
            cost = tl.where((s_nat >> K) == ov, cost, float("inf"))
        jr = tl.arange(0, J)
        for t in range(1, T):
            best = tl.min(cost, axis=0)  # [j]: min over predecessors j + c·J
            tl.store(brow + t * J + jr, best)
            d = code - tl.load(xrow + t)
            # new state s = j·C + b takes best[j]: broadcast over b in natural order
            spread = tl.reshape(tl.broadcast_to(best[:, None], (J, C)), (C, J))
            cost = d * d + spread
        tl.store(final_ptr + pid * S + s_nat, cost)  # natural order


def available(x: torch.Tensor, L: int) -> bool:
    import os

    return triton is not None and x.is_cuda and L <= MAX_L and \
        os.environ.get("TQBUILD_VITERBI", "cuda") != "torch"


def viterbi_pass(x: torch.Tensor, table: torch.Tensor, L: int, k: int,
                 overlap: torch.Tensor | None) -> torch.Tensor:
    """x [B, T] float32 (CUDA) -> int64 states [B, T]."""
    from .viterbi import backtrack, start_cost

    B, T = x.shape
    J = 2 ** (L - k)
    best = torch.empty(B, T, J, device=x.device)
    final = torch.empty(B, 2**L, device=x.device)
    ov = overlap if overlap is not None else torch.zeros(B, dtype=torch.int64,
                                                          device=x.device)
    warps = max(1, min(8, 2**L // 512))
    _viterbi_pass[(B,)](x, table, best, final, ov.contiguous(), T,
                        HAS_OVERLAP=overlap is not None, L=L, K=k, num_warps=warps,
                        enable_fp_fusion=False)
    return backtrack(best.transpose(0, 1), final, start_cost(x, table, L, k, overlap), x,
                     table, L, k, overlap)
