"""The tail-biting Viterbi pass as one Triton program per T-block (CUDA).

Same semantics and the same float32 operations as kernels/viterbi.py, so the
chosen states are bit-identical to the torch path on CPU: every add and
multiply is rounded on its own (launched with `enable_fp_fusion=False`, no
FMA contraction), ties go to the smallest predecessor index c and the
smallest final state. The 2^L path costs live in registers, laid out [c, j]
so the best predecessor of group j is a min over axis 0; the best cost per
(step, j) goes to global memory for the backtrack, which re-derives each
step's choice in the same program.
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
    def _viterbi_pass(x_ptr, code_ptr, best_ptr, states_ptr, overlap_ptr, T: tl.constexpr,
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
        if HAS_OVERLAP:  # s_{T−1}'s low L−k bits are the overlap
            cost = tl.where((s_nat & (J - 1)) == ov, cost, float("inf"))
        s = tl.argmin(tl.reshape(cost, (S,)), axis=0, tie_break_left=True).to(tl.int64)
        tl.debug_barrier()  # the best costs written above are read back below
        srow = states_ptr + pid * T
        tl.store(srow + T - 1, s)
        cr = tl.arange(0, C).to(tl.int64)
        for i in range(0, T - 1):
            t = T - 1 - i
            j = s >> K
            p = j + cr * J  # candidate predecessors, c ascending
            target = tl.load(brow + t * J + j)
            dp = tl.load(code_ptr + p) - tl.load(xrow + t - 1)
            prev = tl.load(brow + (t - 1) * J + (p >> K), mask=t > 1, other=0.0)
            val = dp * dp + prev
            if HAS_OVERLAP:
                first = tl.where((p >> K) == ov, dp * dp, float("inf"))
            else:
                first = dp * dp
            val = tl.where(t > 1, val, first)
            c = tl.argmax((val == target).to(tl.int32), axis=0, tie_break_left=True)
            s = j + c.to(tl.int64) * J
            tl.store(srow + t - 1, s)


def available(x: torch.Tensor, L: int) -> bool:
    return triton is not None and x.is_cuda and L <= MAX_L


def viterbi_pass(x: torch.Tensor, table: torch.Tensor, L: int, k: int,
                 overlap: torch.Tensor | None) -> torch.Tensor:
    """x [B, T] float32 (CUDA) -> int64 states [B, T]."""
    B, T = x.shape
    J = 2 ** (L - k)
    best = torch.empty(B, T, J, device=x.device)
    states = torch.empty(B, T, dtype=torch.int64, device=x.device)
    ov = overlap if overlap is not None else states  # unused when HAS_OVERLAP is off
    warps = max(1, min(8, 2**L // 512))
    _viterbi_pass[(B,)](x, table, best, states, ov.contiguous(), T,
                        HAS_OVERLAP=overlap is not None, L=L, K=k, num_warps=warps,
                        enable_fp_fusion=False)
    return states
