"""What a SmolLM2 artifact costs where it runs: resident memory and greedy decode
speed in MLX for each artifact kind, packed trellis vs dense-cached, next to
the source (float32 and bf16) and mlx-lm's own 4-bit g64 conversion.

Each configuration runs in its own process (RSS is per process): load, one
forward, then 64 greedy tokens after a 32-token prompt (activations float32:
MLX's CPU backend is slow at bf16; OpenBLAS preloaded where
present). Reported: the model's parameter bytes
(`resident_bytes`: trellis words+scales, dense caches, everything else), the
artifact's trellis payload, VmRSS after load, peak RSS, decode tokens/s.

  python bench/mlx_runtime.py [--artifacts out/smollm2-trellis-k3 out/smollm2-q35]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def status_mib(field: str = "VmRSS") -> float:
    """/proc/self/status VmRSS (now) or VmHWM (this process's peak; unlike
    ru_maxrss it does not carry the parent's peak across fork + exec)."""
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def trellis_payload(path: Path) -> int:
    """Bytes of the trellis modules' tensors in the artifact."""
    from safetensors import safe_open

    quant = json.loads((path / "config.json").read_text()).get("quantization") or {}
    mods = {m for m, e in quant.items() if isinstance(e, dict) and e.get("mode") == "trellis"}
    n = 0
    for f in path.glob("*.safetensors"):
        with safe_open(str(f), "np") as h:
            n += sum(h.get_tensor(k).nbytes for k in h.keys() if k.rsplit(".", 1)[0] in mods)
    return n


def one(kind: str, path: Path, out: Path) -> None:
    """Runs in the child process."""
    import mlx.core as mx
    import numpy as np
    from mlx_lm.generate import generate_step

    from tqbuild.runtime.mlx import load, resident_bytes

    base = status_mib()
    if kind.startswith("source") or kind == "mlx-lm-4bit":
        from mlx_lm import load as mlx_load

        model, tok = mlx_load(str(path))
        if kind == "source-bf16":
            model.set_dtype(mx.bfloat16)
    else:
        model, tok = load(path, dtype=mx.float32, cache_dense=kind.endswith("dense"))
    mx.eval(model.parameters())
    ids = np.array(tok.encode((ROOT / "data/eval/python-stdlib-docstrings.txt").read_text()
                              )[:32], dtype=np.int32)
    mx.eval(model(mx.array(ids)[None].astype(mx.int32)))  # dense caches fill here
    after_load = status_mib()
    res = resident_bytes(model)
    times, toks = [], []
    t0 = time.perf_counter()
    for tk, _ in generate_step(mx.array(ids), model, max_tokens=64):
        t1 = time.perf_counter()
        times.append(t1 - t0)
        toks.append(int(tk))
        t0 = t1
    peak = status_mib("VmHWM")
    out.write_text(json.dumps({
        "kind": kind, "artifact": str(path), "params_mib": {k: v / 2**20 for k, v in res.items()},
        "rss_before_load_mib": base, "rss_after_load_mib": after_load, "peak_rss_mib": peak,
        "decode_tok_per_s": (len(times) - 1) / sum(times[1:]), "tokens": toks[:16]}))


def main() -> None:
    from tqbuild.environment import fast_blas_reexec

    fast_blas_reexec(sys.argv)  # MLX's CPU build ships a reference BLAS (~3 GFLOP/s)
    ap = argparse.ArgumentParser()
    ap.add_argument("--artifacts", nargs="+", type=Path,
                    default=[ROOT / "out/smollm2-trellis-k3", ROOT / "out/smollm2-q35"])
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/mlx_runtime-cpu.json")
    ap.add_argument("--one", nargs=3)
    a = ap.parse_args()
    if a.one:
        one(a.one[0], Path(a.one[1]), Path(a.one[2]))
        return
    from hostinfo import host
    from kv_cache import smollm2_dir


    src = smollm2_dir()
    tmp = Path(tempfile.mkdtemp())
    from mlx_lm import convert

    convert(str(src), mlx_path=str(tmp / "mlx4"), quantize=True, q_bits=4, q_group_size=64)
    runs = [("source-f32", src), ("source-bf16", src), ("mlx-lm-4bit", tmp / "mlx4")]
    for p in a.artifacts:
        runs += [(f"{p.name}:packed", p), (f"{p.name}:dense", p)]
    rows = []
    for kind, path in runs:
        f = tmp / "r.json"
        subprocess.run([sys.executable, __file__, "--one", kind.split(":")[-1]
                        if ":" in kind else kind, str(path), str(f)], check=True)
        r = json.loads(f.read_text())
        r["kind"] = kind
        if ":" in kind:
            r["trellis_payload_mib"] = trellis_payload(path) / 2**20
        rows.append(r)
        print(f"{kind:34s} params {sum(r['params_mib'].values()):7.1f} MiB "
              f"(trellis {r['params_mib']['trellis']:.1f}, dense cache "
              f"{r['params_mib']['dense_cache']:.1f})  RSS {r['rss_after_load_mib']:7.1f} MiB "
              f"peak {r['peak_rss_mib']:7.1f}  {r['decode_tok_per_s']:6.1f} tok/s", flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"host": host(), "model": "SmolLM2-135M-Instruct",
                                 "protocol": "mlx-lm; own process per row (OpenBLAS preloaded); "
                                             "32-token prompt, 64 greedy tokens, float32 "
                                             "activations (source-bf16: bf16)",
                                 "ld_preload": os.environ.get("LD_PRELOAD"),
                                 "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
