"""The package installed from pyproject.toml alone (no requirements.txt) into a
fresh virtual environment builds a recipe to the end: every runtime import is
declared (a build used to crash at its report plot without matplotlib)."""

from __future__ import annotations

import shutil
import subprocess
import venv
from pathlib import Path

from tiny import make_model, save_bf16

ROOT = Path(__file__).resolve().parent.parent
RECIPE = """name: pkg
source: {{path: {src}}}
output: out/pkg
calibration: {{source: {{self_generated: true}}, samples: 2, seq_len: 16}}
stages:
  - untie
  - norm_fold
  - rotate: {{seed: 1}}
  - calibrate
  - quantize: {{default: {{method: gptq, bits: 4, group_size: 32}}}}
"""


def test_pyproject_only_install_builds(tmp_path):
    import torch

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"

    def pip(*args):
        p = subprocess.run([str(py), "-m", "pip", "install", "-q", *args], capture_output=True,
                           text=True, timeout=1200)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]

    # the same torch as this environment first (a bare `torch` would pull a CUDA build)
    pip(f"torch=={torch.__version__.split('+')[0]}")
    # from a copy: setuptools writes build/ beside the pyproject it builds
    pkg = tmp_path / "pkg"
    shutil.copytree(ROOT / "tqbuild", pkg / "tqbuild",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", pkg / "pyproject.toml")
    pip(str(pkg))
    src = save_bf16(make_model("llama"), tmp_path / "src")
    (tmp_path / "r.yaml").write_text(RECIPE.format(src=src))
    p = subprocess.run([str(env_dir / "bin" / "tq-build"), "r.yaml", "--no-lock"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    assert (tmp_path / "out" / "pkg" / "optiq_metadata.json").is_file()
    assert (tmp_path / ".tq-work" / "pkg" / "report.png").stat().st_size > 1000
    # the CUDA sources compiled on first GPU use ship in the package
    p = subprocess.run([str(py), "-c", "import pathlib, tqbuild; r = pathlib.Path("
                        "tqbuild.__file__).parent; print((r / 'kernels/viterbi_cuda.cu').is_file()"
                        ", (r / 'runtime/trellis_gemv.cu').is_file())"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.stdout.split() == ["True", "True"], p.stdout + p.stderr[-2000:]
