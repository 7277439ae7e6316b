"""Regenerate tqbuild/kernels/pair_table.py: the 512 value pairs of the `pair` trellis
code — Lloyd's k-means of a 2-D standard normal (2^20 samples, seed 0, 100 iterations,
float64), scaled to unit RMS over the 512 entries (a hashed trellis uses them about
equally often, as bench/pair_code_study.py assumed), rounded to int16 at 2^13 a unit,
sorted by angle then radius.

    python scripts/make_pair_table.py     # rewrites the table module (run once; committed)

The table is data: artifacts name the code, so it never changes once shipped (a new
table is a new code name). Rerunning on another machine may give other centroids
(BLAS order); the committed module is the definition.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

Q, UNIT = 9, 8192


def kmeans(q: int = Q, n: int = 1 << 20, iters: int = 100, seed: int = 0) -> np.ndarray:
    """2^q centroids of N(0, I_2) by Lloyd's iterations (float64; bench/pair_code_study.py
    uses it too, with fewer samples and iterations)."""
    g = np.random.default_rng(seed)
    pts = torch.from_numpy(g.standard_normal((n, 2)))
    cen = pts[torch.from_numpy(g.choice(n, 2**q, replace=False))].clone()
    for _ in range(iters):
        a = torch.cdist(pts, cen).argmin(dim=1)
        s = torch.zeros_like(cen).index_add_(0, a, pts)
        c = torch.bincount(a, minlength=2**q).double().view(-1, 1)
        cen = torch.where(c > 0, s / c.clamp(min=1), cen)
    return cen.numpy()


def main() -> None:
    c = kmeans()
    c = c / np.sqrt((c ** 2).mean())
    q = np.clip(np.round(c * UNIT), -32767, 32767).astype(np.int64)
    order = np.lexsort((np.hypot(q[:, 0], q[:, 1]), np.round(np.arctan2(q[:, 1], q[:, 0]), 6)))
    q = q[order]
    words = [(int(a) & 0xFFFF) | ((int(b) & 0xFFFF) << 16) for a, b in q]
    lines = [", ".join(f"0x{w:08X}" for w in words[i:i + 6]) + "," for i in range(0, len(words), 6)]
    body = "\n".join("    " + ln for ln in lines)
    out = Path(__file__).resolve().parents[1] / "tqbuild" / "kernels" / "pair_table.py"
    out.write_text(
        '"""The `pair` trellis code\'s 512 value pairs (scripts/make_pair_table.py): entry e is\n'
        "one uint32, its low int16 the step's first weight and its high int16 the second, in\n"
        'units of 2^-13 (k-means of a 2-D standard normal). Data: never edited."""\n\n'
        f"UNIT = {UNIT}\nENTRIES = (\n{body}\n)\n")
    print(f"wrote {out}: rms {np.sqrt((q.astype(float) ** 2).mean()) / UNIT:.5f}")


if __name__ == "__main__":
    main()
