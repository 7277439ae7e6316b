"""report.json and report.png in the work dir after a build: timings and the
per-layer proxy error (relative weight error ‖W − Ŵ‖/‖W‖ and, where a Hessian
was used, the Hessian-weighted proxy loss) — host-dependent, never in the
artifact."""

from __future__ import annotations

import platform
import re
from pathlib import Path

from ..io.atomic import write_json


def per_layer(modules: dict) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for m, rec in modules.items():
        hit = re.search(r"\.layers\.(\d+)\.", m)
        if not hit or "proxy_rel_error" not in rec:
            continue
        row = out.setdefault(int(hit.group(1)), {"errors": [], "hessian_loss": 0.0})
        row["errors"].append(rec["proxy_rel_error"])
        hl = rec.get("hessian_proxy_loss") or {}
        row["hessian_loss"] += float(hl.get("gptq_or_kept", hl.get("kept", 0.0)))
    return {i: {"mean_rel_error": sum(r["errors"]) / len(r["errors"]),
                "max_rel_error": max(r["errors"]), "hessian_proxy_loss": r["hessian_loss"]}
            for i, r in sorted(out.items())}


def write_report(path: Path, recipe: str, seconds: float, computed: list, stats: dict,
                 modules: dict, device: str) -> None:
    layers = per_layer(modules)
    write_json(path / "report.json", {
        "recipe": recipe, "seconds": round(seconds, 2), "computed_units": computed,
        "unit_seconds": {u: s.get("seconds") for u, s in stats.items()},
        "host": {"machine": platform.machine(), "python": platform.python_version(),
                 "device": device},
        "per_layer": {str(i): v for i, v in layers.items()}})
    if layers:
        plot(layers, recipe, path / "report.png")


def plot(layers: dict[int, dict], recipe: str, dest: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = list(layers)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(xs, [layers[i]["mean_rel_error"] for i in xs], marker="o", label="mean")
    ax.plot(xs, [layers[i]["max_rel_error"] for i in xs], marker=".", ls="--", label="max")
    ax.set_xlabel("layer")
    ax.set_ylabel("relative weight error ‖W − Ŵ‖/‖W‖")
    ax.set_title(f"{recipe}: per-layer proxy error")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    tmp = dest.with_name(dest.stem + ".part.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(dest)
