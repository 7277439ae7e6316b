"""Human-readable description of a compiled plan (`tq-build plan`)."""

from __future__ import annotations

from collections import Counter

from .folds import touched
from .graph import Plan, estimate_peak_bytes, estimate_sizes


def _gb(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def describe(plan: Plan) -> str:
    r = plan.recipe
    lines = [f"recipe   {r.name}  ({r.file}, sha256 {r.hash[:12]})",
             f"model    {plan.family.model_type}: {plan.num_layers} layers, hidden {plan.hidden}, "
             f"head_dim {plan.head_dim}, tied={plan.tied}",
             f"output   {r.output}",
             "stages   " + " → ".join(plan.stage_names)]
    if plan.rotate:
        r1 = f"n={plan.hidden}" if plan.r1_on else "off"
        r2 = f"n={plan.head_dim}" if plan.r2_on else "off"
        lines.append(f"rotate   seed {plan.rotate.seed}; R1 {r1}; R2 {r2}")
    lines.append("units (tensors read; tensors each stage changes)")
    rows: list[tuple[str, str]] = []
    touched_by = {u.name: touched(plan, u, plan.hf_shapes) for u in plan.units}
    for u in plan.units:
        touched_by_u = touched_by[u.name]
        desc = f"reads {len(u.keys):>3}; " + (
            "; ".join(f"{s} {len(n)}" for s, n in touched_by_u.items()) or "pass-through")
        if rows and u.kind == "layer" and rows[-1][1] == desc and rows[-1][0].startswith("layer"):
            first = rows[-1][0].split()[-1].split("-")[0]
            rows[-1] = (f"layers {first}-{u.index}", desc)
        else:
            rows.append((u.name, desc))
    lines += [f"  {name:<12} {desc}" for name, desc in rows]
    layer0 = next((u for u in plan.units if u.kind == "layer"), None)
    if layer0 is not None:
        pre = f"{plan.family.layer_prefix}{layer0.index}."
        for stage, names in touched_by[layer0.name].items():
            short = sorted({n.removeprefix(pre) for n in names})
            lines.append(f"  {layer0.name} {stage}: {', '.join(short)}")
    if plan.specs:
        def group(s) -> str:
            if s.format == "trellis":
                return f"L{s.trellis.L} T{s.trellis.T} {s.trellis.code} axis {s.trellis.axis}"
            return f"g{s.group_}" if s.quantized else ""

        kinds = Counter((s.format, s.method, s.bits_ if s.quantized else None, group(s))
                        for s in plan.specs.values())
        lines.append("quantize")
        for (fmt, method, bits, gs), n in sorted(kinds.items(), key=str):
            what = f"{method} {fmt} {bits}-bit {gs}" if fmt != "none" else "kept unquantized"
            lines.append(f"  {n:>4} module(s): {what}")
    wp = r.write
    lines.append(f"peak memory (estimate)  {_gb(estimate_peak_bytes(plan, wp.shard_bytes))}")
    sizes = estimate_sizes(plan)
    lines.append(f"disk (estimate)         output {_gb(sizes['output'])}; work dir "
                 f"{_gb(sizes['workdir'])} (activations {_gb(sizes['activations'])})")
    if plan.dropped:
        lines.append(f"dropped  {len(plan.dropped)} tensor(s) mlx-lm does not load (mtp.*)")
    return "\n".join(lines)
