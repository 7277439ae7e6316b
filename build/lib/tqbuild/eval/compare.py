"""`tq-build compare`: several artifacts through one instrument, a table and a
KL-vs-bits-per-weight plot."""

from __future__ import annotations

from pathlib import Path

from ..io.atomic import write_json
from .run import evaluate, render


def compare(artifacts: list[Path], source: Path, *, tokens: int, device: str, workdir: Path,
            out: Path) -> str:
    rows = [evaluate(a, source, tokens=tokens, device=device, workdir=workdir)
            for a in artifacts]
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "compare.json", {"rows": rows})
    plot_kl_vs_bpw(rows, out / "kl_vs_bpw.png")
    return render(rows) + f"\nwrote {out}/compare.json and {out}/kl_vs_bpw.png"


def plot_kl_vs_bpw(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in rows:
        x, y = r["bits_per_weight"] or 16, max(r["mean_kl"], 1e-6)
        ax.scatter([x], [y])
        ax.annotate(r["recipe"] or Path(r["artifact"]).name, (x, y), fontsize=7)
    ax.set_xlabel("bits per weight (decoder-layer linears)")
    ax.set_ylabel("mean KL(source ‖ artifact)")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
