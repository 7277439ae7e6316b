"""A GPTQ build on a tiny model of every family: Hessians for every linear
input (attention, linear attention, dense MLP, routed experts, routers),
GPTQ records in the metadata, and the artifact loads in stock mlx-lm."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tiny import FAMILIES, NO_R1, NO_R2, make_model, save_bf16

from tqbuild.io.source import Source
from tqbuild.pipeline.executor import BuildOptions, build
from tqbuild.pipeline.graph import compile_plan
from tqbuild.recipe import load

HERE = Path(__file__).parent


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_gptq_build_every_family(model_type, tmp_path):
    src = save_bf16(make_model(model_type), tmp_path / "src")
    r1 = "off" if model_type in NO_R1 else "random_hadamard"
    r2 = "off" if model_type in NO_R2 else "random_hadamard"
    (tmp_path / "r.yaml").write_text(f"""name: g
source: {{path: {src}}}
output: {tmp_path / 'out'}
calibration: {{source: {{self_generated: true}}, samples: 4, seq_len: 32}}
stages:
  - untie
  - norm_fold
  - rotate: {{r1: {r1}, r2: {r2}}}
  - calibrate
  - quantize: {{default: {{method: gptq, bits: 4, group_size: 32}}}}
""")
    source = Source(src)
    build(compile_plan(load(tmp_path / "r.yaml"), source), source, tmp_path / "out",
          BuildOptions(progress=False), workdir=tmp_path / "work")
    meta = json.loads((tmp_path / "out" / "optiq_metadata.json").read_text())
    mods = meta["modules"]
    gptq = [m for m, r in mods.items() if r["method"] in ("gptq", "rtn+gptq", "gptq+rtn")
            or "hessian_proxy_loss" in r]
    # every linear but the embedding got a Hessian
    no_h = [m for m, r in mods.items() if "hessian_proxy_loss" not in r]
    assert [m.rsplit(".", 1)[-1] for m in no_h] == ["embed_tokens"], no_h
    assert gptq and len(meta["calibration"]["token_sha256"]) == 64
    if model_type in ("qwen3_moe", "qwen3_next"):
        assert any("switch_mlp" in m for m in gptq) and any(m.endswith("mlp.gate") for m in gptq)
    if model_type in ("qwen3_next", "qwen3_5_text"):
        assert any("linear_attn.in_proj" in m for m in gptq)
    ids = np.arange(3, 19, dtype=np.int32)
    np.save(tmp_path / "ids.npy", ids)
    p = subprocess.run([sys.executable, str(HERE / "mlx_logits.py"), str(tmp_path / "out"),
                        str(tmp_path / "ids.npy"), str(tmp_path / "logits.npy")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert np.isfinite(np.load(tmp_path / "logits.npy")).all()


def test_guard_events_recorded_and_failing_hessian_saved(tmp_path):
    """Rank-deficient Hessians (one 8-token sample over 64 dims) with negligible
    damping: the guard escalates, records every event in the metadata and saves
    the failing Hessian to the work dir."""
    src = save_bf16(make_model("llama"), tmp_path / "src")
    (tmp_path / "r.yaml").write_text(f"""name: guard
source: {{path: {src}}}
output: {tmp_path / 'out'}
calibration: {{source: {{self_generated: true}}, samples: 1, seq_len: 8}}
stages:
  - calibrate
  - quantize: {{default: {{method: gptq, bits: 4, group_size: 32, damp: 1.0e-30}}}}
""")
    source = Source(src)
    build(compile_plan(load(tmp_path / "r.yaml"), source), source, tmp_path / "out",
          BuildOptions(progress=False), workdir=tmp_path / "work")
    meta = json.loads((tmp_path / "out" / "optiq_metadata.json").read_text())
    kinds = {e["event"] for e in meta["guard_events"]}
    assert "cholesky_failed" in kinds, kinds
    assert {e["module"] for e in meta["guard_events"]} <= set(meta["modules"])
    debug = list((tmp_path / "work" / "guard" / "debug").glob("*.safetensors"))
    assert debug, "the failing Hessian was not saved"
    for r in meta["modules"].values():
        if "hessian_proxy_loss" in r:  # never worse than RTN
            assert r["hessian_proxy_loss"]["gptq_or_kept"] <= r["hessian_proxy_loss"]["rtn"] * (
                1 + 1e-9)
