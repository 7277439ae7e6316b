"""A trellis code of value pairs (V = 2, QTIP's HYB form) against mul1 (V = 1), by the
MSE the tail-biting Viterbi reaches on i.i.d. N(0, 1) data (CPU).

    python bench/pair_code_study.py [--seqs 512] [--ks 2,3,4] [--ls 12,16] [--qs 9,10]
        # -> bench/results/pair_code_study.json

Why: the mul1 decode costs ~4.4 instructions a weight (window, mask, hash, IDP4A), and
the decode kernels are issue-bound there. A pair code shifts 2k bits a step; each
state's hash s·C picks one of 2^Q value pairs from a table, so two weights cost: window
(SHF), hash (IMAD — the bits of s·C below L do not depend on the bits above the state,
so no mask), one LOP3 forming the entry's address in a per-lane replicated shared
table ((h & mask) | lane·4: index = bits [L−Q, L) of s·C, scaled by a multiplier
C·2^(7−L+Q) onto bit 7), LDS, and one IDP2A with the int8 inputs — ~2.5 a weight.
The table: 2^Q centroids of a 2-D standard normal by Lloyd's k-means (seeded), rounded
to int16 on a common scale. Each code is scaled to unit RMS over its states.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "scripts"))

from hostinfo import host  # noqa: E402
from make_pair_table import kmeans  # noqa: E402

from tqbuild.kernels.trellis_codes import code_table  # noqa: E402
from tqbuild.kernels.viterbi import viterbi_tailbiting  # noqa: E402

T = 256
HASH = 0x83DCD12D  # exllamav3's mul1 multiplier (odd)


def kmeans_pairs(q: int, seed: int = 0, n: int = 1 << 18, iters: int = 40) -> np.ndarray:
    """2^q centroids of a 2-D standard normal (the shipped table's k-means, fewer samples)."""
    return kmeans(q, n, iters, seed)


def pair_table(L: int, q: int, cen: np.ndarray, mult: int = HASH) -> torch.Tensor:
    """float32 [2^L, 2]: each state's pair, int16-rounded centroids, unit RMS."""
    scale = 32000.0 / np.abs(cen).max()
    c16 = np.round(cen * scale).astype(np.int16).astype(np.float64)
    s = np.arange(2**L, dtype=np.uint64)
    idx = (((s * mult) & 0xFFFFFFFF) >> (L - q)) & (2**q - 1)
    v = c16[idx]
    v = v / np.sqrt((v ** 2).mean())
    return torch.from_numpy(v.astype(np.float32))


def pair_viterbi(x: torch.Tensor, tab: torch.Tensor, L: int, K: int,
                 overlap: torch.Tensor | None) -> torch.Tensor:
    """One pass over x [B, P, 2] (P steps of two weights), K = 2k bits a step ->
    int64 states [B, P]; s' = (s << K | b) mod 2^L; ties to the smallest c / state."""
    B, P, _ = x.shape
    C, J = 2**K, 2 ** (L - K)
    t0, t1 = tab[:, 0].view(1, -1), tab[:, 1].view(1, -1)

    def dist(t):
        return (t0 - x[:, t, :1]).square() + (t1 - x[:, t, 1:]).square()

    cost = dist(0)
    if overlap is not None:  # s_0 >> K == overlap
        keep = torch.full((B, J, C), float("inf"))
        rows = torch.arange(B)
        keep[rows, overlap] = cost.view(B, J, C)[rows, overlap]
        cost = keep.view(B, -1)
    arg = torch.empty(P, B, J, dtype=torch.uint8 if C <= 256 else torch.int16)
    for t in range(1, P):
        best, a = cost.view(B, C, J).min(dim=1)  # predecessors of class j: j + c·J
        arg[t] = a.to(arg.dtype)
        cost = best.view(B, J, 1).expand(B, J, C).reshape(B, -1) + dist(t)
    if overlap is not None:  # s_{P−1}'s low L−K bits == overlap
        end = torch.full((B, C, J), float("inf"))
        rows = torch.arange(B)
        end[rows, :, overlap] = cost.view(B, C, J)[rows, :, overlap]
        cost = end.view(B, -1)
    s = cost.argmin(dim=1)
    out = torch.empty(B, P, dtype=torch.int64)
    out[:, P - 1] = s
    rows = torch.arange(B)
    for t in range(P - 1, 0, -1):
        j = s >> K
        s = j + arg[t, rows, j].long() * J
        out[:, t - 1] = s
    return out


def pair_tailbiting(x: torch.Tensor, tab: torch.Tensor, L: int, k: int) -> torch.Tensor:
    B, T_ = x.shape
    xp = x.view(B, T_ // 2, 2)
    P, K = T_ // 2, 2 * k
    first = pair_viterbi(torch.roll(xp, P // 2, dims=1).contiguous(), tab, L, K, None)
    overlap = first[:, P // 2] >> K
    return pair_viterbi(xp, tab, L, K, overlap)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqs", type=int, default=512)
    ap.add_argument("--ks", default="2,3,4")
    ap.add_argument("--ls", default="12,16")
    ap.add_argument("--qs", default="9,10")
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(a.seqs, T, generator=g)
    res: dict = {"host": host(), "T": T, "sequences": a.seqs, "hash": HASH, "cases": []}
    cens = {q: kmeans_pairs(q) for q in (int(v) for v in a.qs.split(","))}
    for L in (int(v) for v in a.ls.split(",")):
        for k in (int(v) for v in a.ks.split(",")):
            if 4 * k > L:
                continue
            t0 = time.perf_counter()
            mt = code_table("mul1", L)
            mt = torch.from_numpy(mt / np.sqrt((mt.astype(np.float64) ** 2).mean()))
            states = viterbi_tailbiting(x, L, k, "mul1", table=mt.float())
            cases = [{"L": L, "k": k, "code": "mul1", "mse": float(((mt[states] - x) ** 2).mean()),
                      "seconds": time.perf_counter() - t0}]
            for q, cen in cens.items():
                if q > L:
                    continue
                t0 = time.perf_counter()
                tab = pair_table(L, q, cen)
                st = pair_tailbiting(x, tab, L, k)
                rec = tab[st].reshape(x.shape)
                # tail-biting: consecutive states overlap in L − 2k bits, the last wraps
                nxt = torch.roll(st, -1, dims=1)
                ok = bool(((st & (2 ** (L - 2 * k) - 1)) == (nxt >> (2 * k))).all())
                cases.append({"L": L, "k": k, "code": f"pair-q{q}",
                              "mse": float(((rec - x) ** 2).mean()), "cyclic": ok,
                              "seconds": time.perf_counter() - t0})
            for c in cases:
                c["rate_distortion_bound"] = 2.0 ** (-2 * k)
                print(json.dumps(c), flush=True)
            res["cases"] += cases
    out = HERE / "results" / f"pair_code_study{a.tag}.json"
    out.write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
