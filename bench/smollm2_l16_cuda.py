"""SmolLM2 end to end at L = 12 and L = 16 on a CUDA device (issue 21: is L = 16
worth it end to end where the fused CUDA encoder makes it affordable?).

    python bench/smollm2_l16_cuda.py GGUF TEXT... [--out FILE] [--arms "A;B"]

Builds the smollm2-q35 recipe (the shipped settings: all MLP tensors along
axis 0, LDLQ steps of 16, alpha 1.1, refit) twice with `--device cuda`, once at
L = 12 and once at L = 16, from the given GGUF, and evaluates both (and the
previous L = 12 axis-1 coding) on every text: mean KL to the source, perplexity,
top-1, EOS probe on the first text. Both builds share one calibration (sampled
on the device), so the arms differ only in the trellis settings.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from hostinfo import host  # noqa: E402

ARMS = {
    "L12 axis-1 rows (before)": {"L": 12, "T": 192, "code": "1mad", "axis": "auto"},
    "L12 ax0 g16 a1.1 refit": {"L": 12, "T": 192, "code": "1mad", "axis": 0, "ldlq_group": 16,
                               "scale_alpha": 1.1, "refit": True},
    "L16 ax0 g16 a1.1 refit": {"L": 16, "T": 192, "code": "1mad", "axis": 0, "ldlq_group": 16,
                               "scale_alpha": 1.1, "refit": True},
    # the shipped recipe's coding (gate/up axis 0 steps of 16, down as before) at L 12 / 16
    "L12 shipped": {"L": 12, "T": 192, "code": "1mad", "axis": 0, "ldlq_group": 16},
    "L16 shipped": {"L": 16, "T": 192, "code": "1mad", "axis": 0, "ldlq_group": 16},
}
DOWN = {"L12 shipped": {"L": 12, "T": 192, "code": "1mad", "axis": "auto"},
        "L16 shipped": {"L": 16, "T": 192, "code": "1mad", "axis": "auto"}}


def main() -> None:
    args = sys.argv[1:]
    out = Path(args[args.index("--out") + 1]) if "--out" in args else \
        ROOT / "bench/results/smollm2_l16-cuda.json"
    pick = args[args.index("--arms") + 1].split(";") if "--arms" in args else list(ARMS)[:3]
    args = [a for i, a in enumerate(args)
            if a not in ("--out", "--arms") and (i == 0 or args[i - 1] not in ("--out", "--arms"))]
    gguf, texts = Path(args[0]), [Path(t) for t in args[1:]]
    work = Path("/tmp/l16work")
    from tqbuild.eval.run import evaluate

    res: dict = {"host": host(), "recipe": "recipes/smollm2-q35.yaml", "texts": [str(t) for t in
                                                                           texts], "arms": []}
    for name in pick:
        trellis = ARMS[name]
        r = yaml.safe_load((ROOT / "recipes/smollm2-q35.yaml").read_text())
        r["source"] = {"path": str(gguf)}
        r["output"] = str(work / "out" / name.split()[0] / name.replace(" ", "_"))
        r["name"] = "l16-" + name.replace(" ", "-").replace(".", "")
        for rule in r["stages"][4]["quantize"]["rules"]:
            if rule.get("format") == "trellis":
                down = "down_proj" in rule["match"] and name in DOWN
                rule["trellis"] = DOWN[name] if down else trellis
        rp = work / f"{r['name']}.yaml"
        rp.parent.mkdir(parents=True, exist_ok=True)
        rp.write_text(yaml.safe_dump(r, sort_keys=False))
        t = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "tqbuild", str(rp), "--workdir", str(work),
                            "--device", "cuda"], capture_output=True, text=True)
        secs = time.perf_counter() - t
        print(name, "build", p.returncode, round(secs, 1), p.stderr[-600:] if p.returncode else "",
              flush=True)
        if p.returncode:
            continue
        src = next((work / "cache" / "gguf").iterdir())
        per = [evaluate(Path(r["output"]), src, text=tx, workdir=work, device="cuda",
                        probe=i == 0) for i, tx in enumerate(texts)]
        kl = [e["mean_kl"] for e in per]
        row = {"arm": name, "trellis": trellis, "build_seconds": round(secs, 1),
               "bits_per_weight": per[0].get("bits_per_weight"), "mean_kl": sum(kl) / len(kl),
               "kl": kl, "ppl": [e["perplexity"] for e in per],
               "top1": [e["top1_agreement"] for e in per], "eos_probe": {
                   k: per[0]["eos_probe"][k] for k in ("prompts", "immediate_eos", "empty")}}
        print(json.dumps(row), flush=True)
        res["arms"].append(row)
        toks = sorted((work / "cache" / "calib").glob("*.npy"))
        if toks:  # the GPU-sampled calibration: distinct tokens per sequence
            ids = np.load(toks[-1])
            res["calibration_distinct_tokens_per_row"] = float(np.mean(
                [len(np.unique(r)) for r in ids]))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
