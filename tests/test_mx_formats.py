"""MLX's microscaling formats as `format:` choices: mxfp4, nvfp4, mxfp8 (per
module by rule); the artifact loads in stock mlx-lm and its dequantized bytes
match the build's record."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_run import cli
from conftest import write_recipe

pytest.importorskip("mlx_lm")
HERE = Path(__file__).parent

CHECK = """
import hashlib, json, sys
import mlx.core as mx
from mlx_lm.utils import load_model
from pathlib import Path
model, _ = load_model(Path(sys.argv[1]))
meta = json.loads((Path(sys.argv[1]) / "optiq_metadata.json").read_text())["modules"]
bad, n = [], 0
for name, m in model.named_modules():
    if hasattr(m, "scales"):
        n += 1
        w = mx.dequantize(m.weight, m.scales, getattr(m, "biases", None), group_size=m.group_size,
                          bits=m.bits, mode=m.mode)
        raw = bytes(memoryview(w.view(mx.uint16)))
        if hashlib.sha256(raw).hexdigest() != meta[name]["dequant_sha256"]:
            bad.append(name)
print(json.dumps({"n": n, "bad": bad, "modes": sorted({m.mode for _, m in model.named_modules()
                                                      if hasattr(m, "scales")})}))
"""


def test_microscaling_formats_load_in_stock_mlx_lm(tmp_path, tiny_source):
    write_recipe(tmp_path / "r.yaml", name="mx", source=tiny_source(), stages=[
        "untie", "norm_fold", "rotate",
        {"quantize": {"default": {"format": "mxfp4"}, "rules": [
            {"match": "down_proj", "format": "mxfp8"},
            {"match": "self_attn", "format": "nvfp4"},
            {"match": "embed_tokens", "format": "affine", "bits": 8, "group_size": 64}]}}])
    p = cli(tmp_path, "r.yaml")
    assert p.returncode == 0, p.stderr
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["quantization"]["mode"] == "mxfp4"
    assert cfg["quantization"]["model.layers.0.mlp.down_proj"]["mode"] == "mxfp8"
    assert cfg["quantization"]["model.layers.0.self_attn.q_proj"] == {
        "group_size": 16, "bits": 4, "mode": "nvfp4"}
    r = subprocess.run([sys.executable, "-c", CHECK, str(tmp_path / "out")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["bad"] == [] and res["n"] == 16
    assert res["modes"] == ["affine", "mxfp4", "mxfp8", "nvfp4"]
    np.save(tmp_path / "ids.npy", np.arange(3, 19, dtype=np.int32))
    q = subprocess.run([sys.executable, str(HERE / "mlx_logits.py"), str(tmp_path / "out"),
                        str(tmp_path / "ids.npy"), str(tmp_path / "l.npy")],
                       capture_output=True, text=True)
    assert q.returncode == 0 and np.isfinite(np.load(tmp_path / "l.npy")).all()


def test_gptq_with_microscaling_is_refused(tmp_path):
    (tmp_path / "r.yaml").write_text("""name: mx
source: {path: x}
output: out
stages:
  - calibrate
  - quantize: {default: {format: mxfp4, method: gptq}}
""")
    p = cli(tmp_path, "r.yaml")
    assert p.returncode == 2 and "GPTQ needs the affine format" in p.stderr
