"""Peak work-dir size of the SmolLM2 GPTQ build with activations pruned
(`calibration.keep: last`, the default) and kept (`keep: all`), sampled every
0.2 s while the build runs.

    python bench/workdir_pruning.py   -> bench/results/workdir_pruning.json
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hostinfo import host

ROOT = Path(__file__).resolve().parent.parent


def tree_bytes(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.exists() else 0


def run(keep: str, work: Path, out: Path) -> dict:
    cmd = [sys.executable, "-m", "tqbuild", str(ROOT / "recipes" / "smollm2-gptq4.yaml"),
           "--workdir", str(work), "--output", str(out), "--force",
           "--set", f"calibration.keep={keep}"]
    recipe_dir = work / "smollm2-gptq4"
    for sub in ("units", "acts"):
        subprocess.run(["rm", "-rf", str(recipe_dir / sub)])
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, tree_bytes(recipe_dir))
        time.sleep(0.2)
    assert proc.returncode == 0
    return {"keep": keep, "peak_workdir_mib": round(peak / 2**20, 1),
            "final_workdir_mib": round(tree_bytes(recipe_dir) / 2**20, 1),
            "acts_files_at_end": len(list((recipe_dir / "acts").glob("*.safetensors")))}


def main() -> None:
    with tempfile.TemporaryDirectory(dir=ROOT / ".tq-work") as d:
        work, out = Path(d) / "w", Path(d) / "o"
        # calibration tokens first (sampling is not what this measures)
        subprocess.run([sys.executable, "-m", "tqbuild", "plan", str(ROOT / "recipes" /
                        "smollm2-gptq4.yaml"), "--workdir", str(work)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rows = [run("last", work, out), run("all", work, out)]
    res = {"what": "SmolLM2-135M GPTQ build (128×256 calibration tokens, 30 layers): work dir "
                   "size sampled every 0.2 s", "host": host(), "rows": rows}
    (ROOT / "bench" / "results" / "workdir_pruning.json").write_text(json.dumps(res, indent=2)
                                                                     + "\n")
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
