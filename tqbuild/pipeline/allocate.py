"""Per-tensor trellis k to an average-bits budget (seed "Q3 mixed k").

The sensitivity table is JSON `{tensor: {k: measured loss}}` (tensor = the
artifact module path, `.weight` optional). Every tensor starts at the smallest
k; the upgrade with the largest loss decrease per added bit·parameter that
still fits the budget is taken until none fits. gate_proj and up_proj of one
layer move together (they read the same input and are fused by runtimes).
Ties break on the tensor name, so the map is deterministic.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from ..errors import RecipeError
from ..io.paths import checked


def tie_key(module: str) -> str:
    return re.sub(r"\.(gate_proj|up_proj)$", ".gate_up_proj", module)


def load_table(path: Path, where: str) -> dict[str, dict[int, float]]:
    path = checked(path, what="sensitivity table", where=where, kind="file",
                   fix="write it with `tq-build sensitivity` or fix the `kmap:` path "
                   "(relative to the recipe)", error=RecipeError)
    try:
        raw = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RecipeError(f"sensitivity table {path} is not valid JSON ({e})", where=where,
                          fix="the table is {tensor: {k: loss}}") from None
    if not isinstance(raw, dict):
        raise RecipeError(f"sensitivity table {path} is not a JSON object", where=where,
                          fix="the table is {tensor: {k: loss}}")
    table: dict[str, dict[int, float]] = {}
    for name, row in raw.items():
        if name.startswith("_"):  # provenance of the measurement
            continue
        try:
            table[name.removesuffix(".weight")] = {int(k): float(v) for k, v in row.items()}
        except (AttributeError, TypeError, ValueError):
            raise RecipeError(f"sensitivity table {path}: entry {name!r} is not {{k: loss}}",
                              where=where, fix="write numbers keyed by k, e.g. "
                              '{"2": 0.31, "3": 0.08, "4": 0.02}') from None
    return table


def allocate(sizes: dict[str, int], budget: float, choices: tuple[int, ...],
             table: dict[str, dict[int, float]] | None, where: str = "") -> dict[str, int]:
    """modules -> k with Σ n·k / Σ n ≤ budget."""
    ks = sorted(set(choices))
    if table is None:
        k = max([c for c in ks if c <= budget] or [math.floor(budget)])
        return {m: k for m in sizes}
    groups: dict[str, list[str]] = {}
    for m in sorted(sizes):
        groups.setdefault(tie_key(m), []).append(m)
    loss: dict[str, dict[int, float]] = {}
    for g, members in groups.items():
        for m in members:
            row = table.get(m)
            missing = [k for k in ks if row is None or k not in row]
            if missing:
                raise RecipeError(f"the sensitivity table has no loss for {m} at k = "
                                  f"{', '.join(map(str, missing))}", where=where,
                                  fix="measure every matched tensor at every k in `choices`")
        loss[g] = {k: sum(table[m][k] for m in members) for k in ks}
    n = {g: sum(sizes[m] for m in members) for g, members in groups.items()}
    total = sum(n.values())
    cur = {g: ks[0] for g in groups}
    used = ks[0] * total
    if used > budget * total + 1e-9:
        raise RecipeError(f"budget {budget} is below the smallest k = {ks[0]}", where=where,
                          fix=f"raise `budget` to at least {ks[0]} or add a smaller k")
    while True:
        best = None
        for g in sorted(groups):
            i = ks.index(cur[g])
            if i + 1 == len(ks):
                continue
            step = ks[i + 1] - cur[g]
            if used + step * n[g] > budget * total + 1e-9:
                continue
            gain = (loss[g][cur[g]] - loss[g][ks[i + 1]]) / (step * n[g])
            if best is None or gain > best[0]:
                best = (gain, g, step)
        if best is None or best[0] <= 0:
            break
        _, g, step = best
        cur[g] += step
        used += step * n[g]
    return {m: cur[tie_key(m)] for m in sizes}
