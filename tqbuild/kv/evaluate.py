"""`tq-build kv eval`: teacher-forced KL of each KV-cache scheme against the
unquantized cache, on held-out text, through mlx-lm (float32 on CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx_lm.models import cache as mlx_cache

from ..divergence import kl_rows
from .mlx_cache import make_cache

SCHEMES = ("mlx-kv8", "mlx-kv4", "k8v8", "k8v4", "k8v3", "k8v2", "k4v3", "k4v2")


def _caches(model, scheme: str | None):
    if scheme is None:
        return mlx_cache.make_prompt_cache(model)
    if scheme.startswith("mlx-kv"):
        bits = int(scheme[6:])
        return [c.to_quantized(group_size=64, bits=bits) if type(c) is mlx_cache.KVCache else c
                for c in mlx_cache.make_prompt_cache(model)]
    return make_cache(model, scheme)


def run_logits(model, ids: np.ndarray, scheme: str | None, chunk: int):
    caches = _caches(model, scheme)
    out = []
    for s in range(0, len(ids), chunk):
        y = model(mx.array(ids[None, s:s + chunk]), cache=caches)
        mx.eval(y)
        out.append(np.array(y[0].astype(mx.float32)))
    return np.concatenate(out), caches


def evaluate(model_path: Path, text: str, tokens: int = 512, chunk: int = 64,
             schemes=SCHEMES) -> dict:
    from mlx_lm import load

    model, tok = load(str(model_path))
    model.set_dtype(mx.float32)
    ids = np.array(tok.encode(text)[:tokens], dtype=np.int32)
    teacher, base = run_logits(model, ids, None, chunk)
    attn = [c for c in base if type(c) is mlx_cache.KVCache]
    elems = sum(c.keys.shape[1] * c.keys.shape[3] * 2 * c.offset for c in attn)
    rows = {"unquantized (f32)": {"mean_kl": 0.0, "bits_per_element": 32.0,
                                  "bytes_per_token": sum(c.nbytes for c in attn) / len(ids)}}
    for s in schemes:
        lg, caches = run_logits(model, ids, s, chunk)
        kl = kl_rows(teacher, lg).numpy()
        quant = [c for c in caches if not isinstance(c, mlx_cache.RotatingKVCache)]
        nbytes = sum(c.nbytes for c in quant)
        rows[s] = {"mean_kl": float(kl.mean()), "max_kl": float(kl.max()),
                   "top1_agreement": float((teacher.argmax(-1) == lg.argmax(-1)).mean()),
                   "bits_per_element": 8 * nbytes / elems,
                   "bytes_per_token": nbytes / len(ids)}
    import os
    import platform

    host = {"machine": platform.machine(), "cores": os.cpu_count(),
            "mlx_device": str(mx.default_device()), "python": platform.python_version()}
    return {"model": str(model_path), "tokens": int(len(ids)), "chunk": chunk,
            "eval": "mlx-lm, float32", "host": host, "rows": rows}


def plot(result: dict, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, r in result["rows"].items():
        if r["mean_kl"] <= 0:
            continue
        ax.scatter(r["bits_per_element"], r["mean_kl"], color="C1" if "mlx" in name else "C0")
        ax.annotate(name, (r["bits_per_element"], r["mean_kl"]), fontsize=8,
                    textcoords="offset points", xytext=(4, 2))
    ax.set_xlabel("effective bits per K/V element")
    ax.set_ylabel("mean KL vs unquantized cache")
    ax.set_yscale("log")
    ax.set_title(f"KV quantization: {Path(result['model']).name}, {result['tokens']} tokens")
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def table(result: dict) -> str:
    lines = [f"{'scheme':<20} {'bits/elem':>9} {'bytes/token':>11} {'mean KL':>10} {'top-1':>7}"]
    for name, r in result["rows"].items():
        lines.append(f"{name:<20} {r['bits_per_element']:>9.2f} {r['bytes_per_token']:>11.0f} "
                     f"{r['mean_kl']:>10.5f} {100 * r.get('top1_agreement', 1.0):>6.1f}%")
    return "\n".join(lines)


def write(result: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "kv_eval.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, out / "kv_eval.png")
