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

import torch

from .trellis_codes import code_table


def code_tensor(code: str, L: int, device) -> torch.Tensor:
    return torch.from_numpy(code_table(code, L).copy()).to(device)


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
    table = code_tensor(code, L, x.device)
    if chunk is None:
        chunk = default_chunk(L, k, T, x.device)
    out = torch.empty(N, T, dtype=torch.int64, device=x.device)
    for a in range(0, N, chunk):
        out[a:a + chunk] = viterbi_tailbiting(x[a:a + chunk], L, k, code, table, finite)
    return out


def default_chunk(L: int, k: int, T: int, device) -> int:
    """Blocks per Viterbi call: cache-sized costs on CPU, ~2 GiB of state on CUDA."""
    S = 2**L
    per_block = 4 * T * 2 ** (L - k) + 16 * S  # stored best costs + work buffers
    if torch.device(device).type == "cuda":
        return max(1, min(65536, (4 << 30) // per_block))
    return max(1, min(128, (4 << 20) // (12 * S), (256 << 20) // per_block))


def reconstruct(states: torch.Tensor, L: int, code: str = "1mad") -> torch.Tensor:
    return code_tensor(code, L, states.device)[states]
