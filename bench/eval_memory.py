"""Peak memory of `tq-build eval` (teacher dump + candidate evaluation) and of
`tq-build sensitivity`, whole model vs layer-streamed, on SmolLM2 (the q35
artifact) and on a synthetic llama with SmolLM2's layer shapes and 4× its
layers (120, random weights). Each run is its own process (VmHWM), eval with a
fresh work dir (no cached dump); sensitivity after its folded reference was
built by another process (the build streams on its own), measuring the
down_proj of the first and last layer at k = 2, 3, 4 (noise method, 512 tokens).

  python bench/eval_memory.py [--out bench/results/eval_memory-cpu.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

CHILD = """
import sys, json, time
from pathlib import Path
from tqbuild.eval.run import evaluate
art, src, wd, stream = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
t = time.perf_counter()
r = evaluate(Path(art), Path(src), tokens=1024, window=512, workdir=Path(wd), probe=False,
             stream=stream)
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
print(json.dumps({"peak_mib": int(hwm) / 1024, "seconds": time.perf_counter() - t,
                  "perplexity": r["perplexity"], "source_perplexity": r["source_perplexity"],
                  "mean_kl": r["mean_kl"], "top1_agreement": r["top1_agreement"]}))
"""


SENS_CHILD = """
import sys, json, time
from pathlib import Path
from tqbuild.eval.sensitivity import fold_reference, sensitivity
recipe, wd, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
if mode == "fold":
    fold_reference(recipe, wd)
    raise SystemExit
t = time.perf_counter()
table = sensitivity(recipe, method="noise", tokens=512, workdir=wd, stream=mode == "1",
                    log=lambda m: None)
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
print(json.dumps({"peak_mib": int(hwm) / 1024, "seconds": time.perf_counter() - t,
                  "table": table}))
"""

SENS_RECIPE = """name: sens-mem
source: {{path: {src}}}
output: {out}
stages:
  - untie
  - norm_fold
  - rotate: {{r1: random_hadamard, r2: random_hadamard, seed: 42}}
  - quantize:
      default: {{bits: 4, group_size: 64}}
      rules:
        - {{match: 'layers\\.(0|{last})\\.mlp\\.down_proj$', format: trellis,
           bits: {{kmap: k.json, budget: 3.0}}, trellis: {{T: 192, axis: 0}}}}
"""


def measure_sensitivity(src: Path, layers: int, tmp: Path) -> dict:
    d = Path(tempfile.mkdtemp(dir=tmp))
    (d / "r.yaml").write_text(SENS_RECIPE.format(src=src, out=d / "out", last=layers - 1))
    run = [sys.executable, "-c", SENS_CHILD, str(d / "r.yaml"), str(d / "w")]
    subprocess.run(run + ["fold"], capture_output=True, text=True, check=True, cwd=d)
    out = {}
    for stream in (False, True):
        p = subprocess.run(run + [str(int(stream))], capture_output=True, text=True,
                           check=True, cwd=d)
        out[stream] = json.loads(p.stdout.strip().splitlines()[-1])
    return out


def measure(art: Path, src: Path, stream: bool) -> dict:
    wd = tempfile.mkdtemp()
    p = subprocess.run([sys.executable, "-c", CHILD, str(art), str(src), wd, str(int(stream))],
                       capture_output=True, text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def synthetic(src: Path, out: Path, layers: int) -> tuple[Path, Path]:
    """A random llama with SmolLM2's config but `layers` layers (bf16, with
    SmolLM2's tokenizer) and a 4-bit RTN artifact of it built by tq-build."""
    import shutil

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(src)
    cfg.num_hidden_layers = layers
    torch.manual_seed(0)
    m = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)
    m.save_pretrained(out / "src")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if (src / f).is_file():
            shutil.copy(src / f, out / "src" / f)
    (out / "r.yaml").write_text(f"name: synth\nsource: {{path: {out / 'src'}}}\n"
                                f"output: {out / 'art'}\nstages:\n  - quantize:\n"
                                "      default: {bits: 4, group_size: 64}\n")
    subprocess.run([sys.executable, "-m", "tqbuild", str(out / "r.yaml"), "--no-lock",
                    "--workdir", str(out / "w")], check=True, capture_output=True)
    return out / "art", out / "src"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/eval_memory-cpu.json")
    a = ap.parse_args()
    from hostinfo import host
    from kv_cache import smollm2_dir

    src = smollm2_dir()
    rows = {}
    cases = {"smollm2 (30 layers)": (ROOT / "out/smollm2-q35", src)}
    tmp = Path(tempfile.mkdtemp())
    cases["synthetic 120 layers"] = synthetic(src, tmp, 120)
    sens = {}
    for name, (_art, s) in cases.items():
        layers = 120 if "120" in name else 30
        both = measure_sensitivity(s, layers, tmp)
        worst = max(abs(both[True]["table"][m][k] / both[False]["table"][m][k] - 1)
                    for m in both[False]["table"] for k in both[False]["table"][m])
        for stream, r in both.items():
            sens[f"{name}, {'streamed' if stream else 'whole model'}"] = {
                "peak_mib": r["peak_mib"], "seconds": r["seconds"]}
            print(f"{name:22s} sensitivity {'streamed' if stream else 'whole':8s} peak "
                  f"{r['peak_mib']:7.0f} MiB  {r['seconds']:6.1f} s", flush=True)
        sens[f"{name}, largest relative difference streamed vs whole"] = worst
    for name, (art, s) in cases.items():
        for stream in (False, True):
            t = time.perf_counter()
            r = measure(art, s, stream)
            rows[f"{name}, {'streamed' if stream else 'whole model'}"] = r
            print(f"{name:22s} {'streamed' if stream else 'whole':8s} peak {r['peak_mib']:7.0f} "
                  f"MiB  {time.perf_counter() - t:6.1f} s  ppl {r['perplexity']:.4f} "
                  f"KL {r['mean_kl']:.5f}", flush=True)
    a.out.write_text(json.dumps({"host": host(), "protocol": "tq-build eval (teacher dump + "
                                 "candidate), 1024 tokens of the bundled text, windows of 512, "
                                 "no probe, fresh work dir, own process per row (VmHWM)",
                                 "rows": rows, "sensitivity": sens}, indent=1) + "\n")


if __name__ == "__main__":
    main()
