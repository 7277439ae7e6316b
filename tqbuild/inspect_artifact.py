"""`tq-build inspect ARTIFACT`: what an artifact holds, from its files alone."""

from __future__ import annotations

import json
from pathlib import Path

from safetensors import safe_open

from .errors import BadInput
from .formats import FORMATS
from .formats.dequant import entry_for

DTYPE_BITS = {"BF16": 16, "F16": 16, "F32": 32, "U32": 32, "I32": 32, "U8": 8, "I8": 8}


def inspect(path: Path) -> dict:
    path = Path(path)
    meta_file = path / "optiq_metadata.json"
    if not (path / "config.json").is_file():
        raise BadInput(f"{path} is not an artifact (config.json missing)",
                       fix="pass a directory tq-build wrote")
    meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
    cfg = json.loads((path / "config.json").read_text())
    quant = cfg.get("quantization") or {}
    tensors: dict[str, tuple[list[int], str]] = {}
    for f in sorted(path.glob("*.safetensors")):
        with safe_open(str(f), "pt") as h:
            for k in h.keys():
                sl = h.get_slice(k)
                tensors[k] = (list(sl.get_shape()), sl.get_dtype())

    def nbytes(name: str) -> int:
        shape, dt = tensors[name]
        n = 1
        for d in shape:
            n *= d
        return n * DTYPE_BITS[dt] // 8

    modules, layer_bits, layer_weights, total = {}, 0, 0, 0
    for name, (shape, dt) in tensors.items():
        total += nbytes(name)
        if not name.endswith(".weight") or len(shape) < 2:
            continue
        module = name[: -len(".weight")]
        rec = meta.get("modules", {}).get(module) or _from_config(module, quant, tensors)
        parts = [name] + [f"{module}.{s}" for s in ("scales", "biases")
                          if f"{module}.{s}" in tensors]
        stored = sum(nbytes(p) for p in parts)
        bits = rec.get("bits", DTYPE_BITS[dt])
        fmt = FORMATS.get(rec.get("format") or "")
        logical = fmt.logical_shape(list(shape), rec) if fmt else list(shape)
        weights = 1
        for d in logical:
            weights *= d
        modules[module] = {"format": rec.get("format", dt.lower()), "bits": bits,
                           "group_size": rec.get("group_size"), "method": rec.get("method"),
                           "shape": logical, "bytes": stored, "weights": weights}
        if ".layers." in module:
            layer_bits += stored * 8
            layer_weights += weights
    return {
        "artifact": str(path),
        "recipe": meta.get("recipe", {}).get("name"),
        "bits_per_weight": round(layer_bits / layer_weights, 4) if layer_weights else None,
        "total_bytes": total,
        "modules": modules,
        "weight_transforms": meta.get("weight_transforms", []),
        "calibration": meta.get("calibration"),
        "guard_events": meta.get("guard_events", []),
    }


def _from_config(module: str, quant: dict, tensors: dict) -> dict:
    """A module record from config.json alone (artifacts other tools wrote)."""
    if f"{module}.scales" not in tensors or not quant:
        return {}
    e = entry_for(quant, module)
    rec = {"format": e.get("mode", "affine"), "bits": e["bits"], "group_size": e["group_size"]}
    if "trellis" in e:
        rec["trellis"] = e["trellis"]
    return rec


def render(info: dict) -> str:
    lines = [f"artifact  {info['artifact']}  (recipe {info['recipe']})",
             f"size      {info['total_bytes'] / 2**20:.1f} MiB; decoder-layer linears "
             f"{info['bits_per_weight']} bits per weight (packed weights + scales + biases)"]
    for t in info["weight_transforms"]:
        r1 = f"R1 n={t['r1']['n']}" if t.get("r1") else "R1 off"
        r2 = f"R2 n={t['r2']['n']}" if t.get("r2") else "R2 off"
        lines.append(f"transform {t['id']}: seed {t['seed']}, {r1}, {r2}; "
                     f"deviations: {', '.join(t['deviations'])}")
    c = info["calibration"]
    if c:
        lines.append(f"calib     {c['source']}: {c['samples']} × {c['seq_len']} tokens, "
                     f"seed {c['seed']}, hessians {c['hessians']}, "
                     f"tokens sha256 {c['token_sha256'][:12]}")
    lines.append(f"guard     {len(info['guard_events'])} event(s)")
    lines.append(f"{'module':<44} {'format':<7} {'bits':>4} {'group':>5} {'method':<6} "
                 f"{'shape':<16} {'bytes':>10}")
    for m, r in info["modules"].items():
        lines.append(f"{m:<44} {r['format']:<7} {r['bits']:>4} {r['group_size'] or '':>5} "
                     f"{r['method'] or '':<6} {'x'.join(map(str, r['shape'])):<16} "
                     f"{r['bytes']:>10}")
    return "\n".join(lines)
