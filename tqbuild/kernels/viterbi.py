"""Tail-biting Viterbi for QTIP's bitshift trellis (V = 1), vectorised in torch.

State s_t = ((s_{t−1} << k) | b_t) mod 2^L, so the predecessors of a state
whose top L−k bits are j are p = j + c·2^(L−k), c = 0 … 2^k − 1. The cost of a
path is the float32 sum of (code(s_t) − x_t)²; every add and square is its own
elementwise op in the same order on CPU and CUDA, so both pick the same path.
Ties go to the smallest c (torch.min returns the first minimum) and, for the
final state, to the smallest state (torch.argmin likewise).

Tail-biting as QTIP does it: run once on the sequence rolled by T/2, take the
top L−k bits of the state aligned with x[0] (the overlap), then rerun with the
first state's top bits and the last state's low bits both pinned to it, so the
T·k stored bits form one cycle and every window of L bits is a state.
"""

from __future__ import annotations

import numpy as np
import torch

from .trellis_codes import PAIR_CODES, code_table, pair_entries, pair_index, pair_table


def code_tensor(code: str, L: int, device) -> torch.Tensor:
    return torch.from_numpy(code_table(code, L).copy()).to(device)


def value_table(code: str, L: int, device) -> torch.Tensor:
    """The code's values by state: [2^L] (one a state), or [2^L, 2] for a pair code."""
    if code in PAIR_CODES:
        return torch.from_numpy(pair_table(L).copy()).to(device)
    return code_tensor(code, L, device)


def lookup(table: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
    """float32 values of per-weight states [.., T·n] from `value_table` (a pair
    table: a step's pair from its second weight's state, trellis_codes.values_of)."""
    if table.dim() == 2:
        return table[states[..., 1::2]].reshape(states.shape)
    return table[states]


def values(states: torch.Tensor, code: str, L: int) -> torch.Tensor:
    """float32 values of per-weight states [.., T·n] (trellis_codes.values_of, in torch)."""
    return lookup(value_table(code, L, states.device), states)


def _pass(x: torch.Tensor, table: torch.Tensor, L: int, k: int,
          overlap: torch.Tensor | None) -> torch.Tensor:
    """One Viterbi pass over x [B, T] -> int64 states [B, T].

    Costs are held "low-bits major": state s = j·2^k + b sits at b·2^(L−k) + j,
    so adding the best predecessor cost (indexed by j) broadcasts over the outer
    dim. The forward pass keeps only each step's best predecessor cost per j;
    the backtrack recomputes the 2^k candidate costs with the same float ops
    and takes the first c whose cost equals it (smallest c on ties)."""
    B, T = x.shape
    C, J = 2**k, 2 ** (L - k)
    dev = x.device
    code_t = table.view(J, C).t().contiguous().view(1, C, J)  # [b, j] -> code(j·C + b)
    cost0 = start_cost(x, table, L, k, overlap)
    cost = cost0.view(B, J, C).transpose(1, 2).contiguous()  # [B, C(b), J(j)]
    best = torch.empty(T, B, J, device=dev)  # best[t, :, j]: min over predecessors
    lo = torch.empty(B, C, J // C, device=dev)
    bufs = (torch.empty(B, C, J, device=dev), torch.empty(B, C, J, device=dev))
    for t in range(1, T):
        # predecessors of j: p = j + c·J, stored at (j mod C)·J + (j >> k) + c·(J/C)
        torch.amin(cost.view(B, C, C, J // C), dim=2, out=lo)
        best[t].view(B, J // C, C).copy_(lo.transpose(1, 2))
        nxt = bufs[t & 1]
        torch.sub(code_t, x[:, t].view(B, 1, 1), out=nxt)
        nxt.square_()
        nxt.add_(best[t].view(B, 1, J))
        cost = nxt
    final = cost.transpose(1, 2).reshape(B, -1)  # natural order
    return backtrack(best, final, cost0, x, table, L, k, overlap)


def backtrack(best: torch.Tensor, final: torch.Tensor, cost0: torch.Tensor, x: torch.Tensor,
              table: torch.Tensor, L: int, k: int, overlap: torch.Tensor | None
              ) -> torch.Tensor:
    """States from the forward pass: best [T, B, J] (best predecessor cost per step
    and group j), final [B, 2^L] and cost0 [B, 2^L] (natural order)."""
    B, T = x.shape
    C, J = 2**k, 2 ** (L - k)
    dev = x.device
    rows = torch.arange(B, device=dev)
    final = final.reshape(B, C, J)  # [c, low bits]
    if overlap is not None:  # s_{T−1}'s low L−k bits == overlap
        end = torch.full((B, C, J), float("inf"), device=dev)
        end[rows, :, overlap] = final[rows, :, overlap]
        final = end
    states = torch.empty(B, T, dtype=torch.int64, device=dev)
    s = torch.argmin(final.reshape(B, -1), dim=1)
    states[:, T - 1] = s
    cands = torch.arange(C, device=dev).view(1, C) * J
    for t in range(T - 1, 0, -1):
        j = s >> k
        p = j.view(B, 1) + cands  # [B, C] candidate predecessors, c ascending
        if t > 1:
            prev = best[t - 1].gather(1, p >> k)
            val = (table[p] - x[:, t - 1:t]).square() + prev
        else:
            val = cost0.gather(1, p)
        hit = val == best[t, rows, j].view(B, 1)
        c = torch.argmax(hit.to(torch.uint8), dim=1)  # first hit
        s = p[rows, c]
        states[:, t - 1] = s
    return states


def start_cost(x: torch.Tensor, table: torch.Tensor, L: int, k: int,
               overlap: torch.Tensor | None) -> torch.Tensor:
    """Path costs at t = 0, natural order [B, 2^L]; s_0's top L−k bits pinned to the
    overlap when given."""
    B = x.shape[0]
    C, J = 2**k, 2 ** (L - k)
    d0 = (table.view(1, -1) - x[:, :1]).square()
    if overlap is None:
        return d0
    rows = torch.arange(B, device=x.device)
    keep = torch.full((B, J, C), float("inf"), device=x.device)
    keep[rows, overlap] = d0.view(B, J, C)[rows, overlap]
    return keep.view(B, -1)


def _triton_or_torch(x, table, L, k, overlap):
    """The Triton pass; if it cannot compile or launch here, warn once and use the
    torch pass from then on (both choose the same states)."""
    import warnings

    from . import viterbi_triton

    try:
        return viterbi_triton.viterbi_pass(x, table, L, k, overlap)
    except Exception as e:  # noqa: BLE001 - any compiler/driver failure
        warnings.warn(f"Triton Viterbi unavailable ({type(e).__name__}: {e}); using the "
                      "torch path", stacklevel=2)
        viterbi_triton.triton = None
        return _pass(x, table, L, k, overlap)


def viterbi_tailbiting(x: torch.Tensor, L: int, k: int, code: str = "1mad",
                       table: torch.Tensor | None = None, finite: bool = False) -> torch.Tensor:
    """Quantize each row of x [B, T] (float32) -> int64 states [B, T].

    On CUDA the fused CUDA kernel (viterbi_cuda) runs both passes in one launch;
    without it (or for non-finite input) the Triton forward pass (L ≤ 12) or the
    torch pass. All choose the same states. `finite`: the caller vouches that x
    is finite, so no host sync checks it. TQBUILD_VITERBI=triton|torch forces
    an older path (benchmarks)."""
    if code in PAIR_CODES:
        return pair_tailbiting(x, L, k, finite)
    if not 1 <= k <= L // 2:
        raise ValueError(f"k must be in [1, L/2], got k={k}, L={L}")
    T = x.shape[1]
    if (T * k) < L:
        raise ValueError(f"a block of T={T} weights at k={k} holds fewer than L={L} bits")
    x = x.float().contiguous()
    table = code_tensor(code, L, x.device) if table is None else table
    from . import viterbi_cuda, viterbi_triton

    if viterbi_cuda.available(x, L, k) and (finite or bool(torch.isfinite(x).all())):
        return viterbi_cuda.viterbi_tailbiting(x, table, L, k, code)

    one = _triton_or_torch if viterbi_triton.available(x, L) else _pass
    rolled = torch.roll(x, T // 2, dims=1).contiguous()
    first = one(rolled, table, L, k, None)
    overlap = first[:, T // 2] >> k
    return one(x, table, L, k, overlap)


def quantize_blocks(x: torch.Tensor, L: int, k: int, code: str = "1mad",
                    chunk: int | None = None, finite: bool = False) -> torch.Tensor:
    """Many T-blocks [N, T] in chunks sized for the device -> int64 states [N, T]
    (`finite` as viterbi_tailbiting)."""
    N, T = x.shape
    table = None if code in PAIR_CODES else code_tensor(code, L, x.device)
    if chunk is None:
        chunk = default_chunk(L, k, T, x.device, code)
    out = torch.empty(N, T, dtype=torch.int64, device=x.device)
    for a in range(0, N, chunk):
        out[a:a + chunk] = viterbi_tailbiting(x[a:a + chunk], L, k, code, table, finite)
    return out


def default_chunk(L: int, k: int, T: int, device, code: str = "1mad") -> int:
    """Blocks per Viterbi call: cache-sized costs on CPU, ~2 GiB of state on CUDA."""
    S = 2**L
    per_block = 4 * T * 2 ** (L - k) + 16 * S  # stored best costs + work buffers
    if code in PAIR_CODES:  # one byte a class a step (the argmin) + work buffers
        per_block = (T // 2) * 2 ** (L - 2 * k) + 16 * S
    if torch.device(device).type == "cuda":
        return max(1, min(65536, (4 << 30) // per_block))
    return max(1, min(128, (4 << 20) // (12 * S), (256 << 20) // per_block))


def reconstruct(states: torch.Tensor, L: int, code: str = "1mad") -> torch.Tensor:
    return values(states, code, L)


def pair_tailbiting(x: torch.Tensor, L: int, k: int, finite: bool = False) -> torch.Tensor:
    """The pair code (two weights a state, trellis_codes): x [B, T] (T even, float32)
    -> per-weight int64 states [B, T] (the V = 1 reading of the bits they pack to).

    A step shifts K = 2k bits: s_u = ((s_{u−1} << K) | b_u) mod 2^L, predecessors of
    the states whose top L − K bits are j are j + c·2^(L−K). Step cost: the float32
    (t0 − x0)² + (t1 − x1)² of the state's table entry, each op rounded (the same
    ops on CPU and CUDA), plus the best predecessor's; ties to the smallest c and,
    at the end, the smallest state. Tail-biting as the V = 1 codes, in steps. On CUDA
    at L = 16 the CUDA kernels (pair_viterbi_cuda, the same states); `finite` as
    viterbi_tailbiting."""
    B, T = x.shape
    K = 2 * k
    if T % 2 or not 1 <= K <= L // 2:
        raise ValueError(f"the pair code needs an even T and 1 <= 2k <= L/2 "
                         f"(got T={T}, k={k}, L={L})")
    if T * k < L:
        raise ValueError(f"a block of T={T} weights at k={k} holds fewer than L={L} bits")
    from . import pair_viterbi_cuda

    if pair_viterbi_cuda.available(x, L, k) and (finite or bool(torch.isfinite(x).all())):
        steps = pair_viterbi_cuda.tailbiting_steps(x, k)
    else:
        steps = _pair_steps_torch(x, L, k)
    return weight_states(steps, k, L)


def _pair_steps_torch(x: torch.Tensor, L: int, k: int) -> torch.Tensor:
    """The pair code's tail-biting step states [B, T/2] in torch ops (any device)."""
    B, T = x.shape
    K, P = 2 * k, T // 2
    xp = x.float().contiguous().view(B, P, 2)
    tab = torch.from_numpy(pair_entries().copy()).to(x.device)
    idx = torch.from_numpy(pair_index(np.arange(2**L, dtype=np.uint32), L)).to(x.device)
    first = _pair_pass(torch.roll(xp, P // 2, dims=1).contiguous(), tab, idx, L, K, None)
    return _pair_pass(xp, tab, idx, L, K, first[:, P // 2] >> K)


def _pair_pass(x: torch.Tensor, tab: torch.Tensor, idx: torch.Tensor, L: int, K: int,
               overlap: torch.Tensor | None) -> torch.Tensor:
    """One pass over x [B, P, 2] -> int64 step states [B, P] (s_0's top L − K bits and
    s_{P−1}'s low L − K bits pinned to `overlap` where given)."""
    B, P, _ = x.shape
    C, J = 2**K, 2 ** (L - K)
    dev = x.device
    rows = torch.arange(B, device=dev)
    t0, t1 = tab[:, 0].view(1, -1), tab[:, 1].view(1, -1)

    def dist(t: int) -> torch.Tensor:  # [B, 2^L]
        d = (t0 - x[:, t, :1]).square_().add_((t1 - x[:, t, 1:]).square_())
        return d[:, idx]

    cost = dist(0)
    if overlap is not None:  # s_0 >> K == overlap
        keep = torch.full((B, J, C), float("inf"), device=dev)
        keep[rows, overlap] = cost.view(B, J, C)[rows, overlap]
        cost = keep.view(B, -1)
    arg = torch.empty(P, B, J, dtype=torch.uint8, device=dev)
    for t in range(1, P):
        best, a = cost.view(B, C, J).min(dim=1)  # first minimum: the smallest c
        arg[t] = a.to(torch.uint8)
        cost = best.view(B, J, 1).expand(B, J, C).reshape(B, -1).add_(dist(t))
    if overlap is not None:  # s_{P−1} mod 2^(L−K) == overlap
        end = torch.full((B, C, J), float("inf"), device=dev)
        end[rows, :, overlap] = cost.view(B, C, J)[rows, :, overlap]
        cost = end.view(B, -1)
    s = torch.argmin(cost, dim=1)
    out = torch.empty(B, P, dtype=torch.int64, device=dev)
    out[:, P - 1] = s
    for t in range(P - 1, 0, -1):
        j = s >> K
        s = j + arg[t, rows, j].long() * J
        out[:, t - 1] = s
    return out


def weight_states(steps: torch.Tensor, k: int, L: int) -> torch.Tensor:
    """Pair-code step states [B, P] -> the per-weight V = 1 states [B, 2P]: symbols
    b_{2u+1} = s_u's low k bits, b_{2u} the next k; state_t = Σ_i b_{t−i} << k·i
    (cyclic in the block) mod 2^L, so state_{2u+1} == s_u."""
    B, P = steps.shape
    m = (1 << k) - 1
    sym = torch.stack([(steps >> k) & m, steps & m], dim=2).reshape(B, 2 * P)
    st = torch.zeros_like(sym)
    for i in range(-(-L // k)):
        st |= torch.roll(sym, i, dims=1) << (k * i)
    return st & ((1 << L) - 1)
