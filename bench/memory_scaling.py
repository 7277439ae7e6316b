"""Peak host memory of a streaming GPTQ build must not grow with the layer
count: the same synthetic llama (hidden 1024, intermediate 2816) built with N
and 2N layers, peak RSS and time per layer of each.

    python bench/memory_scaling.py [--layers 6]  -> bench/results/memory_scaling.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from hostinfo import host

RECIPE = """name: mem-{n}
source: {{path: {src}}}
output: {out}
workdir: {work}
calibration: {{source: {{self_generated: true}}, samples: 16, seq_len: 128}}
stages:
  - untie
  - norm_fold
  - rotate: {{seed: 1}}
  - calibrate
  - quantize: {{default: {{method: gptq, bits: 4, group_size: 64}}}}
  - write: {{shard_size: 64MB}}
"""


def make_source(path: Path, layers: int) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = AutoConfig.for_model("llama", hidden_size=1024, intermediate_size=2816,
                               num_hidden_layers=layers, num_attention_heads=16,
                               num_key_value_heads=4, head_dim=64, vocab_size=4096,
                               tie_word_embeddings=False)
    AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).save_pretrained(path)


def build(tmp: Path, layers: int) -> dict:
    src = tmp / f"src-{layers}"
    make_source(src, layers)
    recipe = tmp / f"r{layers}.yaml"
    recipe.write_text(RECIPE.format(n=layers, src=src, out=tmp / f"out-{layers}",
                                    work=tmp / "work"))
    # first run samples and caches the calibration tokens (that step loads the whole
    # model by design); the measured run streams with the tokens cached
    subprocess.run([sys.executable, "-m", "tqbuild", str(recipe)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for sub in ("units", "acts"):
        shutil.rmtree(tmp / "work" / f"mem-{layers}" / sub)
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "tqbuild", str(recipe)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    if status:
        raise SystemExit(proc.stderr.read().decode()[-2000:])
    wall = time.perf_counter() - t
    report = json.loads((tmp / "work" / f"mem-{layers}" / "report.json").read_text())
    per_layer = [v for k, v in report["unit_seconds"].items() if k.startswith("layer")]
    return {"layers": layers, "wall_s": round(wall, 1),
            "peak_rss_mib": round(usage.ru_maxrss / 1024),
            "mean_layer_s": round(sum(per_layer) / len(per_layer), 2),
            "source_mib": round(sum(f.stat().st_size for f in src.glob("*.safetensors")) / 2**20)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=6)
    n = ap.parse_args().layers
    with tempfile.TemporaryDirectory(dir=Path(__file__).parent.parent / ".tq-work"
                                     if (Path(__file__).parent.parent / ".tq-work").is_dir()
                                     else None) as d:
        rows = [build(Path(d), n), build(Path(d), 2 * n)]
    result = {"what": "streaming GPTQ build (16×128 self-generated tokens, cached; 64 MB "
                      "shards) of a synthetic llama at N and 2N layers",
              "host": host(), "rows": rows,
              "rss_ratio_2N_over_N": round(rows[1]["peak_rss_mib"] / rows[0]["peak_rss_mib"], 3)}
    out = Path(__file__).parent / "results" / "memory_scaling.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
