"""`--set` overrides (validated like the YAML, recorded in the metadata) and
`--log-json` build events."""

from __future__ import annotations

import json

import pytest
from cli_run import cli as run
from tiny import make_model, save_bf16

RECIPE = """name: ov
source: {{path: {src}}}
output: out
stages:
  - untie
  - norm_fold
  - rotate: {{seed: 1}}
  - quantize
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("ov")
    src = save_bf16(make_model("llama"), d / "src")
    (d / "r.yaml").write_text(RECIPE.format(src=src))
    return d


def cli(d, *args):
    return run(d, "r.yaml", *args)


def test_set_overrides_a_stage_param_and_is_recorded(setup):
    p = cli(setup, "--set", "stages.rotate.seed=7", "--set", "stages.quantize.default.bits=8",
            "--force", "--log-json", "events.jsonl")
    assert p.returncode == 0, p.stderr
    meta = json.loads((setup / "out" / "optiq_metadata.json").read_text())
    assert meta["weight_transforms"][0]["seed"] == 7
    assert meta["recipe"]["overrides"] == ["stages.rotate.seed=7",
                                           "stages.quantize.default.bits=8"]
    assert meta["modules"]["model.layers.0.mlp.down_proj"]["bits"] == 8
    lock = json.loads((setup / "artifacts.lock").read_text())["recipes"]["ov"]
    assert lock["recipe"]["overrides"] == meta["recipe"]["overrides"]  # recorded in the lock
    assert lock["recipe"]["sha256"] == meta["recipe"]["sha256"]
    assert lock["stages"]["rotate"]["seed"] == 7 and lock["stages"]["quantize"]["default"][
        "bits"] == 8
    events = [json.loads(line) for line in (setup / "events.jsonl").read_text().splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "build_start" and kinds[-1] == "build_end"
    ends = [e for e in events if e["event"] == "unit_end"]
    assert [e["unit"] for e in ends] == ["embed", "layer 0", "layer 1", "head"]
    assert all(e["peak_rss_mib"] > 0 and "mean_proxy_rel_error" in e for e in ends)
    plain = cli(setup, "--force")
    assert plain.returncode == 0
    meta2 = json.loads((setup / "out" / "optiq_metadata.json").read_text())
    assert meta2["recipe"]["sha256"] != meta["recipe"]["sha256"]


@pytest.mark.parametrize("spec,needle", [
    ("stages.rotate.seed=abc", "seed"),
    ("stages.calibrate.samples=4", "no stage 'calibrate'"),
    ("stages.rotate.seeed=3", "did you mean 'seed'"),
    ("nokey", "KEY.PATH=VALUE"),
])
def test_bad_override_is_exit_2_with_the_fix(setup, spec, needle):
    p = cli(setup, "--set", spec)
    assert p.returncode == 2 and needle in p.stderr and "fix:" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
