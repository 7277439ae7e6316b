"""The seed's measured losers: refused (exit 2, the seed's reason, the `allow`
override named) or warned, and `allow` accepts them, recorded in metadata."""

from __future__ import annotations

import json

import pytest
from cli_run import cli
from conftest import write_recipe

ROT = ["untie", "norm_fold", {"rotate": {"r1": "random_hadamard", "r2": "random_hadamard"}}]
TRELLIS = {"match": r"mlp\.(gate|up|down)_proj$", "format": "trellis", "bits": 2,
           "trellis": {"T": 32}}
CASES = {
    "down-proj-input-axis": (ROT, {"default": {"bits": 4, "group_size": 32, "method": "gptq"},
                                   "rules": [dict(TRELLIS, method="ldlq",
                                                  trellis={"T": 32, "axis": 1})]},
                             "EOS cliff"),
    "group-size-128": (["untie"], {"default": {"bits": 4, "group_size": 64},
                                   "rules": [{"match": "down_proj", "group_size": 128}]},
                       "GSM8K collapsed"),
}


def _recipe(tmp_path, src, pre, quantize, allow=None, calib=True):
    top = {"allow": allow} if allow else {}
    if calib:
        top["calibration"] = {"source": {"self_generated": True}, "samples": 2, "seq_len": 16}
    stages = [*pre, *(["calibrate"] if calib else []), {"quantize": quantize}]
    return write_recipe(tmp_path / "r.yaml", source=src, output=tmp_path / "out",
                        stages=stages, **top)


@pytest.mark.parametrize("name", sorted(CASES))
def test_refused_with_the_seed_reason_unless_allowed(tmp_path, tiny_source, name):
    pre, quantize, reason = CASES[name]
    r = _recipe(tmp_path, tiny_source(), pre, quantize)
    p = cli(tmp_path, "plan", r)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "refused" in p.stderr and reason in p.stderr and "r.yaml:" in p.stderr
    assert f"allow: [{name}]" in p.stderr
    p = cli(tmp_path, "plan", _recipe(tmp_path, tiny_source(), pre, quantize, allow=[name]))
    assert p.returncode == 0, p.stderr[-1500:]


def test_the_measured_winners_pass_silently(tmp_path, tiny_source):
    gptq = {"default": {"bits": 4, "group_size": 32, "method": "gptq"},
            "rules": [dict(TRELLIS, method="ldlq")]}  # axis auto: down_proj's rotated dim
    p = cli(tmp_path, "plan", _recipe(tmp_path, tiny_source(), ROT, gptq))
    assert p.returncode == 0 and "warning" not in p.stdout + p.stderr
    rtn = {"default": {"bits": 4, "group_size": 32}}  # unrotated plain RTN-4: the baseline
    p = cli(tmp_path, "plan", _recipe(tmp_path, tiny_source(), ["untie"], rtn, calib=False))
    assert p.returncode == 0 and "warning" not in p.stdout + p.stderr


def test_rotated_rtn4_warns(tmp_path, tiny_source):
    """A measured loss (to plain RTN-4), not a failure: warned, built."""
    p = cli(tmp_path, "plan", _recipe(tmp_path, tiny_source(), ROT,
                                      {"default": {"bits": 4, "group_size": 32}}, calib=False))
    assert p.returncode == 0 and "warning: rotated-rtn4" in p.stdout + p.stderr
    assert "do not ship" in p.stdout + p.stderr


def test_trellis_without_r1_warns_and_allow_is_recorded(tmp_path, tiny_source):
    q = {"default": {"bits": 4, "group_size": 32}, "rules": [TRELLIS]}
    p = cli(tmp_path, "plan", _recipe(tmp_path, tiny_source(), ["untie", "norm_fold"], q,
                                      calib=False))
    assert p.returncode == 0
    assert "warning: trellis-without-r1" in p.stdout + p.stderr and "0.565" in p.stdout + p.stderr
    r = _recipe(tmp_path, tiny_source(), ["untie", "norm_fold"], q,
                allow=["trellis-without-r1"], calib=False)
    p = cli(tmp_path, r, "--no-lock", "--workdir", tmp_path / "w")
    assert p.returncode == 0 and "warning" not in p.stdout + p.stderr, p.stderr[-1500:]
    meta = json.loads((tmp_path / "out" / "optiq_metadata.json").read_text())
    [rec] = meta["seed_findings"]
    assert rec["name"] == "trellis-without-r1" and rec["action"] == "allowed"


def test_unknown_allow_name_is_a_recipe_error(tmp_path, tiny_source):
    r = _recipe(tmp_path, tiny_source(), ["untie"], {"default": {"bits": 4, "group_size": 32}},
                allow=["group-size-12"], calib=False)
    p = cli(tmp_path, "plan", r)
    assert p.returncode == 2 and "group-size-12" in p.stderr and "group-size-128" in p.stderr
