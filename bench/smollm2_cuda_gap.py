"""Why a SmolLM2 build on CUDA scores worse than the same recipe built on the CPU
(issue 21: smollm2-q35 docstrings KL 0.553 built and evaluated on an H200 vs
0.33 built and evaluated on the CPU).

    python bench/smollm2_cuda_gap.py GGUF CPU_TOKENS.npy CPU_META.json TEXT... [--out F]

Builds recipes/smollm2-q35.yaml twice with `--device cuda`: once as a user
would (calibration tokens sampled on the GPU) and once with the CPU build's
calibration tokens put in the GPU build's cache slot, so the two CUDA builds
differ only in their tokens and the second differs from the CPU build only in
where it ran. Evaluates both on CUDA on every text, the second also on the CPU
(first text), and compares each module's recorded proxy error with the CPU
build's metadata (CPU_META: its optiq_metadata.json). Separates the three
suspects: the tokens, the encoders on CUDA, the evaluation on CUDA.
"""

from __future__ import annotations

import json
import shutil
import statistics
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


def build(gguf: Path, work: Path, name: str) -> tuple[Path, float, str]:
    r = yaml.safe_load((ROOT / "recipes/smollm2-q35.yaml").read_text())
    r["source"] = {"path": str(gguf)}
    r["output"] = str(work / "out" / name)
    r["name"] = f"gap-{name}"
    rp = work / f"{name}.yaml"
    rp.parent.mkdir(parents=True, exist_ok=True)
    rp.write_text(yaml.safe_dump(r, sort_keys=False))
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "tqbuild", str(rp), "--workdir", str(work),
                        "--device", "cuda", "--no-lock"], capture_output=True, text=True)
    secs = time.perf_counter() - t
    print(name, "build rc", p.returncode, round(secs, 1), p.stderr[-800:] if p.returncode else "",
          flush=True)
    return Path(r["output"]), secs, p.stderr[-800:] if p.returncode else ""


def kind(mod: str) -> str:
    return ("gate/up" if "gate_proj" in mod or "up_proj" in mod else
            "down" if "down_proj" in mod else "attention" if "self_attn" in mod else "other")


def proxy_vs_cpu(meta: Path, cpu_meta: dict) -> dict:
    """Per module kind: the CUDA build's proxy_rel_error over the CPU build's,
    and how many modules reconstruct to the same bytes."""
    mods = json.loads((meta / "optiq_metadata.json").read_text())["modules"]
    ratios: dict[str, list[float]] = {}
    same = {"equal": 0, "differ": 0}
    for m, d in mods.items():
        c = cpu_meta["modules"].get(m)
        if not c or "proxy_rel_error" not in d or not c.get("proxy_rel_error"):
            continue
        ratios.setdefault(kind(m), []).append(d["proxy_rel_error"] / c["proxy_rel_error"])
        h = d.get("recon_sha256") or d.get("dequant_sha256")
        same["equal" if h == (c.get("recon_sha256") or c.get("dequant_sha256")) else
             "differ"] += 1
    return {"modules_same_bytes": same, **{
        k: {"n": len(v), "mean_ratio": statistics.mean(v), "min": min(v), "max": max(v)}
        for k, v in ratios.items()}}


def main() -> None:
    args = sys.argv[1:]
    out = Path(args[args.index("--out") + 1]) if "--out" in args else \
        ROOT / "bench/results/smollm2_cuda_gap-cuda.json"
    args = [a for i, a in enumerate(args) if a != "--out" and (i == 0 or args[i - 1] != "--out")]
    gguf, cpu_tokens, cpu_meta_f = Path(args[0]), Path(args[1]), Path(args[2])
    texts = [Path(t) for t in args[3:]]
    cpu_meta = json.loads(cpu_meta_f.read_text())
    from tqbuild.eval.run import evaluate

    base = Path("/tmp/gap")
    shutil.rmtree(base, ignore_errors=True)
    res: dict = {"host": host(), "recipe": "recipes/smollm2-q35.yaml",
                 "cpu_build_token_sha256": cpu_meta["calibration"]["token_sha256"],
                 "texts": [t.name for t in texts], "arms": []}

    def save() -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=1) + "\n")

    for arm in ("gpu-sampled tokens", "cpu tokens"):
        work = base / arm.split()[0]
        if arm == "cpu tokens":  # the CPU build's tokens in the GPU build's cache slot
            slot = next((base / "gpu-sampled").rglob("cache/calib/*.npy"))
            dst = work / slot.relative_to(base / "gpu-sampled")
            dst.parent.mkdir(parents=True, exist_ok=True)
            np.save(dst, np.load(cpu_tokens))
        art, secs, err = build(gguf, work, arm.split()[0])
        row: dict = {"arm": arm, "build_seconds": round(secs, 1)}
        if err:
            row["error"] = err
            res["arms"].append(row)
            save()
            continue
        meta = json.loads((art / "optiq_metadata.json").read_text())
        row["token_sha256"] = meta["calibration"]["token_sha256"]
        row["proxy_vs_cpu_build"] = proxy_vs_cpu(art, cpu_meta)
        print(json.dumps(row), flush=True)
        src = next((work / "cache" / "gguf").iterdir())
        evals = [("cuda", tx, i == 0) for i, tx in enumerate(texts)]
        if arm == "cpu tokens":
            evals.append(("cpu", texts[0], False))
        row["eval"] = []
        for dev, tx, probe in evals:
            t = time.perf_counter()
            e = evaluate(art, src, text=tx, workdir=work, device=dev, probe=probe)
            ev = {"device": dev, "text": tx.name, "mean_kl": e["mean_kl"],
                  "ppl": e["perplexity"], "top1": e["top1_agreement"],
                  "seconds": round(time.perf_counter() - t, 1)}
            if probe:
                ev["eos_probe"] = {k: e["eos_probe"][k] for k in
                                   ("prompts", "immediate_eos", "empty")}
            print(json.dumps(ev), flush=True)
            row["eval"].append(ev)
            save()
        res["arms"].append(row)
        save()


if __name__ == "__main__":
    main()
