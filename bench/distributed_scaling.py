"""Wall time of one build on 1 vs N ranks (`tq-build RECIPE --nproc N`): a
synthetic wide llama (hidden 2048, intermediate 5632, 2 layers; random bf16
weights), self-generated calibration, GPTQ 4-bit g128 — Hessian capture split
by samples, the layer's tensors split by cost. The artifacts must be
byte-identical; the JSON records both wall times and the scaling efficiency
t1 / (N · tN).

    python bench/distributed_scaling.py [--nproc 2] [--device cpu|cuda]
    -> bench/results/distributed_scaling-<device>.json

On CPU the ranks are gloo processes with --threads threads each (default 1:
1 core vs N cores, the CPU analogue of 1 vs N GPUs); with --device cuda one
GPU per rank (NCCL) when there are N GPUs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from hostinfo import host

RECIPE = """name: scaling
source: {{path: {src}}}
output: out
workdir: work
calibration:
  source: {{self_generated: true}}
  samples: {samples}
  seq_len: {seq}
  batch_size: 4
stages:
  - untie
  - norm_fold
  - rotate: {{seed: 3}}
  - calibrate
  - quantize:
      default: {{method: gptq, bits: 4, group_size: 128}}
  - write
"""


def make_source(path: Path, hidden: int, inter: int, layers: int) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                      num_attention_heads=hidden // 128, num_key_value_heads=hidden // 512,
                      head_dim=128, vocab_size=4096, tie_word_embeddings=False)
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(path)
    return path


def digests(out: Path) -> dict[str, str]:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(out.iterdir())}


def phases(log: Path) -> dict[str, float]:
    """Seconds before the first unit (source load + calibration sampling, on
    rank 0 alone) and per unit, from the build's --log-json events."""
    ev = [json.loads(line) for line in log.read_text().splitlines()]
    start = next(e["time"] for e in ev if e["event"] == "build_start")
    first = next(e["time"] for e in ev if e["event"] == "unit_start")
    out = {"before_units": round(first - start, 2)}
    out.update({e["unit"]: e["seconds"] for e in ev if e["event"] == "unit_end"})
    return out


def build(tmp: Path, src: Path, n: int, args) -> float:
    """Each build in its own dir under the same relative names: the recipe text,
    and so the artifact's metadata, is the same for every rank count."""
    (tmp / f"n{n}").mkdir()
    r = tmp / f"n{n}" / "r.yaml"
    r.write_text(RECIPE.format(src=src, samples=args.samples, seq=args.seq))
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "tqbuild", r.name, "--nproc", str(n), "--device",
                        args.device, "--threads", str(args.threads), "--no-lock",
                        "--log-json", "log.jsonl"],
                       cwd=r.parent, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if p.returncode:
        sys.exit(f"--nproc {n} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--inter", type=int, default=5632)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads per rank, the same for both builds: CPU matmul "
                         "results depend on the thread count, so byte identity (and a fair "
                         "1-vs-N comparison) holds at equal threads per process")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        src = make_source(tmp / "src", args.hidden, args.inter, args.layers)
        t1 = build(tmp, src, 1, args)
        tn = build(tmp, src, args.nproc, args)
        d1, dn = digests(tmp / "n1" / "out"), digests(tmp / f"n{args.nproc}" / "out")
        p1, pn = phases(tmp / "n1" / "log.jsonl"), phases(tmp / f"n{args.nproc}" / "log.jsonl")
        differ = sorted(f for f in d1.keys() | dn.keys() if d1.get(f) != dn.get(f))
    res = {"host": host(), "device": args.device, "what": "tq-build of a synthetic llama "
           f"(hidden {args.hidden}, intermediate {args.inter}, {args.layers} layers), "
           f"{args.samples} self-generated samples × {args.seq} tokens, GPTQ 4-bit g128",
           "nproc": args.nproc, "threads_per_rank": args.threads, "wall_s_1": round(t1, 2),
           f"wall_s_{args.nproc}": round(tn, 2),
           "speedup": round(t1 / tn, 3), "scaling_efficiency": round(t1 / (args.nproc * tn), 3),
           "byte_identical": not differ, "files_differing": differ,
           "phases_s_1": p1, f"phases_s_{args.nproc}": pn,
           "layer_units_speedup": round(sum(v for k, v in p1.items() if k.startswith("layer"))
                                        / sum(v for k, v in pn.items() if k.startswith("layer")),
                                        3)}
    print(json.dumps(res, indent=2))
    out = Path(__file__).parent / "results" / f"distributed_scaling-{args.device}.json"
    out.write_text(json.dumps(res, indent=2) + "\n")
    if differ:
        sys.exit(f"the artifacts differ: {differ}")


if __name__ == "__main__":
    main()
