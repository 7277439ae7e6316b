"""Every class of bad input: exit code 2, the place and the fix named, no
traceback, and no output directory left behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from cli_run import cli
from safetensors.torch import load_file, save_file
from tiny import make_model, save_bf16


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("bad")
    return save_bf16(make_model("llama"), d / "src")


def run_cli(*args: str, cwd: Path, subprocess: bool = False):
    return cli(cwd, *args, subprocess=subprocess)


GOOD = """name: t
source: {{path: {src}}}
output: {out}
stages:
  - untie
  - norm_fold
  - rotate: {{seed: 1}}
  - quantize:
      default: {{bits: 4, group_size: 64}}
  - write
"""


def check_rejected(tmp_path: Path, text: str, *needles: str, out: Path | None = None):
    out = out or tmp_path / "out"
    recipe = tmp_path / "r.yaml"
    recipe.write_text(text)
    p = run_cli(str(recipe), cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout
    assert "fix:" in p.stderr, p.stderr
    for n in needles:
        assert n in p.stderr, (n, p.stderr)
    assert not out.exists()
    assert not list(out.parent.glob(f".{out.name}*")) if out.parent.is_dir() else True
    return p.stderr


def test_good_recipe_builds(tmp_path, src):
    (tmp_path / "r.yaml").write_text(GOOD.format(src=src, out=tmp_path / "out"))
    p = run_cli(str(tmp_path / "r.yaml"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "out" / "optiq_metadata.json").is_file()


def test_unknown_key(tmp_path, src):
    text = GOOD.format(src=src, out=tmp_path / "out").replace("{seed: 1}", "{sead: 1}")
    err = check_rejected(tmp_path, text, "r.yaml:7", "unknown key 'sead'", "did you mean 'seed'")
    assert "allowed keys" in err


def test_unknown_top_level_key(tmp_path, src):
    text = GOOD.format(src=src, out=tmp_path / "out") + "outptu: x\n"
    check_rejected(tmp_path, text, "r.yaml:11", "unknown key 'outptu'", "did you mean 'output'")


def test_wrong_type(tmp_path, src):
    text = GOOD.format(src=src, out=tmp_path / "out").replace("bits: 4", "bits: four")
    check_rejected(tmp_path, text, "r.yaml:9", "bits", "four")


def test_bad_stage_order(tmp_path, src):
    text = GOOD.format(src=src, out=tmp_path / "out")
    text = text.replace("  - norm_fold\n  - rotate: {seed: 1}\n",
                        "  - rotate: {seed: 1}\n  - norm_fold\n")
    check_rejected(tmp_path, text, "r.yaml:7", "'norm_fold' cannot run after 'rotate'",
                   "untie → norm_fold → rotate")


def test_quantize_before_rotate(tmp_path, src):
    text = f"""name: t
source: {{path: {src}}}
output: {tmp_path / 'out'}
stages:
  - quantize
  - rotate
"""
    check_rejected(tmp_path, text, "r.yaml:6", "'rotate' cannot run after 'quantize'")


@pytest.mark.parametrize("model_type,rotate,needles", [
    ("qwen3_5_text", "{r1: random_hadamard, r2: random_hadamard}",
     ("r.yaml:7", "R2 is architecturally off", "r2: off")),
    ("gemma3_text", "{r1: random_hadamard, r2: off}",
     ("r.yaml:7", "R1 is invalid for gemma3_text", "r1: off")),
])
def test_rotation_invalid_for_family(tmp_path, model_type, rotate, needles):
    src = save_bf16(make_model(model_type), tmp_path / model_type)
    text = f"""name: t
source: {{path: {src}}}
output: {tmp_path / 'out'}
stages:
  - untie
  - norm_fold
  - rotate: {rotate}
"""
    check_rejected(tmp_path, text, *needles)


def test_missing_source(tmp_path):
    text = GOOD.format(src=tmp_path / "nope", out=tmp_path / "out")
    check_rejected(tmp_path, text, "r.yaml:2", "does not exist")


def test_missing_recipe(tmp_path):
    p = run_cli(str(tmp_path / "none.yaml"), cwd=tmp_path)
    assert p.returncode == 2 and "does not exist" in p.stderr and "Traceback" not in p.stderr


def test_unsupported_hadamard_size(tmp_path):
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model("llama", hidden_size=100, intermediate_size=64,
                               num_hidden_layers=1, num_attention_heads=5,
                               num_key_value_heads=5, head_dim=20, vocab_size=64)
    src = tmp_path / "h100"
    AutoModelForCausalLM.from_config(cfg).save_pretrained(src)
    text = GOOD.format(src=src, out=tmp_path / "out")
    check_rejected(tmp_path, text, "r.yaml:7", "n = 100", "96", "104")


def test_already_quantized_source(tmp_path, src):
    q = tmp_path / "quantized"
    q.mkdir()
    for f in src.iterdir():
        (q / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((q / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "gptq", "bits": 4}
    (q / "config.json").write_text(json.dumps(cfg))
    text = GOOD.format(src=q, out=tmp_path / "out")
    check_rejected(tmp_path, text, "already quantized", "config.json")


def test_scales_tensor_marks_quantized(tmp_path, src):
    q = tmp_path / "q2"
    q.mkdir()
    (q / "config.json").write_bytes((src / "config.json").read_bytes())
    w = load_file(src / "model.safetensors")
    w["model.layers.0.mlp.down_proj.scales"] = torch.ones(4)
    save_file(w, q / "model.safetensors")
    check_rejected(tmp_path, GOOD.format(src=q, out=tmp_path / "out"),
                   "model.layers.0.mlp.down_proj.scales")


def test_nan_weight_named(tmp_path, src):
    q = tmp_path / "nan"
    q.mkdir()
    (q / "config.json").write_bytes((src / "config.json").read_bytes())
    w = load_file(src / "model.safetensors")
    w["model.layers.1.self_attn.k_proj.weight"][3, 5] = float("nan")
    save_file(w, q / "model.safetensors")
    check_rejected(tmp_path, GOOD.format(src=q, out=tmp_path / "out"),
                   "model.layers.1.self_attn.k_proj.weight", "NaN")


def test_output_not_writable(tmp_path, src):
    blocker = tmp_path / "afile"
    blocker.write_text("not a directory")
    out = blocker / "out"
    check_rejected(tmp_path, GOOD.format(src=src, out=out), "afile", "--output", out=out)


def test_group_size_must_divide(tmp_path, src):
    text = GOOD.format(src=src, out=tmp_path / "out").replace("group_size: 64", "group_size: 128")
    check_rejected(tmp_path, text, "r.yaml:8", "group_size 128 does not divide", "64")


def test_invalid_yaml(tmp_path, src):
    text = GOOD.format(src=src, out=tmp_path / "out").replace("  - untie", "  - untie: [")
    check_rejected(tmp_path, text, "r.yaml:", "not valid YAML")


def test_existing_foreign_output_refused(tmp_path, src):
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    (tmp_path / "r.yaml").write_text(GOOD.format(src=src, out=out))
    p = run_cli(str(tmp_path / "r.yaml"), cwd=tmp_path)
    assert p.returncode == 2 and "--force" in p.stderr
    assert (out / "precious.txt").read_text() == "keep me"


def test_rules_first_match_wins_and_none_keeps_float():
    from tqbuild.recipe import QuantizeParams

    q = QuantizeParams.model_validate({
        "default": {"bits": 4, "group_size": 64},
        "rules": [{"match": r"mlp\.down_proj", "bits": 8},
                  {"match": r"mlp\.", "format": "none"},
                  {"match": r"down", "bits": 2}]})
    assert q.spec_for("model.layers.3.mlp.down_proj").bits == 8
    assert q.spec_for("model.layers.3.mlp.up_proj").format == "none"
    assert q.spec_for("model.layers.3.self_attn.q_proj").bits == 4
    assert q.spec_for("model.layers.3.self_attn.q_proj").group_size == 64


def test_gptq_without_calibrate_is_refused(tmp_path, src):
    text = GOOD.format(src=src, out=tmp_path / "out").replace("bits: 4,", "method: gptq, bits: 4,")
    check_rejected(tmp_path, text, "r.yaml:8", "method gptq needs Hessians", "- calibrate")


def test_ldlq_without_calibrate_names_ldlq(tmp_path, src):
    text = GOOD.format(src=src, out=tmp_path / "out").replace(
        "group_size: 64}", "group_size: 64}\n      rules: [{match: mlp, format: trellis, "
        "method: ldlq, bits: 3, trellis: {T: 64}}]")
    check_rejected(tmp_path, text, "r.yaml:8", "method ldlq needs Hessians", "- calibrate")


def test_custom_code_source_refused_unless_trusted(tmp_path, src):
    q = tmp_path / "remote"
    q.mkdir()
    for f in src.iterdir():
        (q / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((q / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForCausalLM": "modeling_x.XForCausalLM"}
    (q / "config.json").write_text(json.dumps(cfg))
    check_rejected(tmp_path, GOOD.format(src=q, out=tmp_path / "out"), "auto_map",
                   "trust_remote_code: true")
    trusted = GOOD.format(src=q, out=tmp_path / "out").replace(
        f"{{path: {q}}}", f"{{path: {q}, trust_remote_code: true}}")
    (tmp_path / "r.yaml").write_text(trusted)
    assert run_cli(str(tmp_path / "r.yaml"), "--threads", "1", cwd=tmp_path).returncode == 0


def test_hub_cache_reference_offline(tmp_path, src, monkeypatch):
    """`source: {hub: org/name@rev}` resolves in the local HF cache, never online."""
    snap = tmp_path / "hub" / "models--acme--tiny" / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    for f in src.iterdir():
        (snap / f.name).write_bytes(f.read_bytes())
    (tmp_path / "hub" / "models--acme--tiny" / "refs").mkdir()
    (tmp_path / "hub" / "models--acme--tiny" / "refs" / "main").write_text("a" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    text = GOOD.format(src="x", out=tmp_path / "out").replace("{path: x}", "{hub: acme/tiny@main}")
    (tmp_path / "r.yaml").write_text(text)
    # HF_HUB_CACHE is read when huggingface_hub is imported: a fresh process
    p = run_cli(str(tmp_path / "r.yaml"), cwd=tmp_path, subprocess=True)
    assert p.returncode == 0, p.stderr
    missing = text.replace("acme/tiny@main", "acme/absent").replace(
        str(tmp_path / "out"), str(tmp_path / "out2"))
    check_rejected(tmp_path, missing, "r.yaml:2", "not in the local Hugging Face cache",
                   "HF_HUB_CACHE", out=tmp_path / "out2")
