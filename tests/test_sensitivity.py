"""`tq-build sensitivity` writes a measured {tensor: {k: KL}} table; trellis and
affine `{kmap, budget}` rules allocate from it within their budgets."""

from __future__ import annotations

import json

import pytest
from cli_run import cli
from conftest import write_recipe
from tiny import make_model, save_bf16

from tqbuild.eval.sensitivity import sensitivity


def test_sensitivity_table_then_mixed_allocation(tmp_path):
    src = save_bf16(make_model("llama"), tmp_path / "src")
    (tmp_path / "r.yaml").write_text(f"""name: sens
source: {{path: {src}}}
output: out
stages:
  - untie
  - norm_fold
  - rotate
  - quantize:
      default: {{bits: 4, group_size: 32}}
      rules:
        - {{match: 'mlp\\.(gate|up|down)_proj$', format: trellis,
           bits: {{kmap: sens.json, budget: 3.0}}, trellis: {{T: 64}}}}
        - {{match: 'self_attn\\.[qkvo]_proj$',
           bits: {{kmap: sens.json, budget: 4.5, choices: [3, 4, 8]}}}}
""")
    def run(*a):
        return cli(tmp_path, *a)
    p = run("plan", "r.yaml")
    assert p.returncode == 2 and "sens.json" in p.stderr and "tq-build sensitivity" in p.stderr
    p = run("sensitivity", "r.yaml", "--method", "trellis", "--tokens", "64")
    assert p.returncode == 0, p.stderr[-3000:]
    table = json.loads((tmp_path / "sens.json").read_text())
    assert table.pop("_measured")["method"] == "trellis"
    mlp = [m for m in table if ".mlp." in m]
    attn = [m for m in table if "self_attn" in m]
    assert len(mlp) == 6 and len(attn) == 8
    assert all(set(table[m]) == {"2", "3", "4"} for m in mlp)
    assert all(set(table[m]) == {"3", "4", "8"} for m in attn)
    # more bits, less damage (per tensor, summed over the model)
    assert sum(table[m]["2"] for m in mlp) > sum(table[m]["4"] for m in mlp) > 0
    assert sum(table[m]["3"] for m in attn) > sum(table[m]["8"] for m in attn)
    p = run("r.yaml", "--no-lock")
    assert p.returncode == 0, p.stderr[-3000:]
    meta = json.loads((tmp_path / "out" / "optiq_metadata.json").read_text())
    alloc = {a["format"]: a for a in meta["bit_allocation"]}
    assert alloc["trellis"]["average_k"] <= 3.0 and alloc["affine"]["average_k"] <= 3.5
    assert set(alloc["trellis"]["map"]) == set(mlp) and set(alloc["affine"]["map"]) == set(attn)
    for m, k in {**alloc["trellis"]["map"], **alloc["affine"]["map"]}.items():
        assert meta["modules"][m]["bits"] == k


@pytest.mark.parametrize("family,method", [("llama", "noise"), ("qwen3_5_text", "trellis")])
def test_streamed_sensitivity_equals_the_whole_model(tmp_path, family, method):
    """One pass over the layers (candidates branching at their layer) gives the
    numbers of quantizing one tensor in the whole loaded model."""
    src = save_bf16(make_model(family), tmp_path / "src")
    write_recipe(tmp_path / "r.yaml", source=src, name="sens", output="out", stages=[
        "untie", "norm_fold", {"rotate": {"r1": "random_hadamard", "r2": "off"}},
        {"quantize": {"default": {"bits": 4, "group_size": 32}, "rules": [
            {"match": r"mlp\.(gate|up|down)_proj$", "format": "trellis",
             "bits": {"kmap": "sens.json", "budget": 3.0}, "trellis": {"T": 64}},
            {"match": "lm_head", "bits": {"kmap": "sens.json", "budget": 6,
                                          "choices": [4, 8]}}]}}])
    kw = dict(method=method, tokens=96, window=32, workdir=tmp_path / "w", log=lambda m: None)
    timings: dict = {}
    streamed = sensitivity(tmp_path / "r.yaml", stream=True, timings=timings, **kw)
    whole = sensitivity(tmp_path / "r.yaml", stream=False, **kw)
    assert len(timings["seconds_per_layer"]) == 2
    assert set(streamed) == set(whole) and len(streamed) == 7
    assert any(m.endswith("lm_head") for m in streamed)
    for m in whole:
        for k, v in whole[m].items():
            assert streamed[m][k] == pytest.approx(v, rel=2e-3, abs=1e-7), (m, k)
    assert all(v["2"] > v["4"] > 0 for m, v in streamed.items() if ".mlp." in m)
