"""Trellis in the build: mixed-k allocation, recipe geometry errors, tiny-model
builds (dense, stacked experts, the qwen38-q3 recipe on a tiny qwen3_5) whose
packed tensors decode to the reconstruction recorded at build time."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_run import cli as run
from tiny import make_model, save_bf16

from tqbuild.errors import RecipeError
from tqbuild.formats import trellis as fmt
from tqbuild.formats.dequant import dequantize_module, entry_for
from tqbuild.pipeline.allocate import allocate
from tqbuild.runtime.torch_load import load_torch, read_artifact_tensors

ROOT = Path(__file__).parents[1]


# ---- allocation ----------------------------------------------------------------
def test_allocation_meets_budget_ties_gate_up_and_favours_sensitive():
    sizes = {f"l{i}.mlp.{p}": 100 for i in range(4) for p in ("gate_proj", "up_proj",
                                                               "down_proj")}
    table = {m: {2: 1.0, 3: 0.5, 4: 0.3} for m in sizes}
    table["l2.mlp.down_proj"] = {2: 9.0, 3: 2.0, 4: 0.5}  # the sensitive one
    table["l1.mlp.gate_proj"] = {2: 4.0, 3: 1.0, 4: 0.2}
    got = allocate(sizes, 3.0, (2, 3, 4), table)
    avg = sum(sizes[m] * k for m, k in got.items()) / sum(sizes.values())
    assert avg <= 3.0 + 1e-9 and avg > 2.8
    assert got["l2.mlp.down_proj"] == 4
    for i in range(4):
        assert got[f"l{i}.mlp.gate_proj"] == got[f"l{i}.mlp.up_proj"]
    assert got["l1.mlp.gate_proj"] >= 3
    assert got == allocate(dict(reversed(sizes.items())), 3.0, (2, 3, 4), table)


def test_allocation_without_table_is_uniform_and_missing_rows_are_named():
    assert set(allocate({"a": 10, "b": 20}, 3.4, (2, 3, 4), None).values()) == {3}
    with pytest.raises(RecipeError, match="no loss for b at k = 4"):
        allocate({"a": 1, "b": 1}, 3.0, (2, 3, 4), {"a": {2: 1, 3: 1, 4: 1}, "b": {2: 1, 3: 1}})


# ---- builds ----------------------------------------------------------------------
def _write(tmp, src, quantize: str, calib: str = "original", extra: str = "") -> Path:
    r = tmp / "r.yaml"
    r.write_text(f"""name: tr
source: {{path: {src}}}
output: {tmp / 'out'}
calibration: {{source: {{self_generated: true}}, samples: 4, seq_len: 32, hessians: {calib}}}
stages:
  - untie
  - norm_fold
  - rotate: {{r2: {'off' if 'qwen3_5' in str(src) else 'random_hadamard'}}}
  - calibrate
  - quantize:
{quantize}
{extra}""")
    return r


def _cli(*args, cwd=None):
    return run(cwd or Path.cwd(), *args)


def _check_decodes(out: Path) -> dict:
    """Every trellis module decodes to the hash recorded at build; returns meta."""
    cfg = json.loads((out / "config.json").read_text())
    meta = json.loads((out / "optiq_metadata.json").read_text())
    raw = read_artifact_tensors(out)
    n = 0
    for m, rec in meta["modules"].items():
        if rec["format"] != "trellis":
            continue
        entry = entry_for(cfg["quantization"], m)
        assert entry["mode"] == "trellis" and entry["trellis"] == rec["trellis"]
        w = dequantize_module(raw[f"{m}.weight"], raw[f"{m}.scales"], None, entry).numpy()
        w = w.reshape(-1, *w.shape[-2:])
        stored = w if rec["trellis"]["axis"] == 1 else w.transpose(0, 2, 1)
        assert fmt.recon_hash(stored) == rec["recon_sha256"], m
        n += 1
    assert n > 0
    return meta


@pytest.fixture(scope="module")
def llama_src(tmp_path_factory):
    d = tmp_path_factory.mktemp("tl")
    return save_bf16(make_model("llama"), d / "src")


MLP_LDLQ = """      default: {method: gptq, bits: 4, group_size: 32}
      rules:
        - {match: 'mlp\\.(gate|up|down)_proj$', format: trellis, method: ldlq, bits: 3,
           trellis: {T: 64}}"""


@pytest.mark.parametrize("calib", ["original", "propagate"])
def test_tiny_llama_trellis_ldlq_build(llama_src, tmp_path, calib):
    r = _write(tmp_path, llama_src, MLP_LDLQ, calib)
    p = _cli(r, "--workdir", tmp_path / "w")
    assert p.returncode == 0, p.stderr[-3000:]
    meta = _check_decodes(tmp_path / "out")
    mods = meta["modules"]
    assert mods["model.layers.0.mlp.down_proj"]["trellis"]["axis"] == 0  # rotated output dim
    assert mods["model.layers.0.mlp.gate_proj"]["trellis"]["axis"] == 1
    assert mods["model.layers.1.mlp.up_proj"]["method"] == "ldlq"
    report = json.loads((tmp_path / "w" / "tr" / "report.json").read_text())
    assert set(report["per_layer"]) == {"0", "1"} and (tmp_path / "w" / "tr" / "report.png"
                                                     ).stat().st_size > 1000
    assert all(0 < v["mean_rel_error"] < 1 for v in report["per_layer"].values())
    # the artifact runs through the torch loader and stays close to its source
    from transformers import AutoModelForCausalLM

    ids = torch.arange(3, 35).view(1, -1)
    src = AutoModelForCausalLM.from_pretrained(llama_src, dtype=torch.float32).eval()
    q = load_torch(tmp_path / "out")
    with torch.no_grad():
        a = torch.log_softmax(src(ids).logits.float(), -1)
        b = torch.log_softmax(q(ids).logits.float(), -1)
    kl = float((a.exp() * (a - b)).sum(-1).mean())
    assert np.isfinite(kl) and kl < 0.5, kl


def test_trellis_on_stacked_experts(tmp_path):
    src = save_bf16(make_model("qwen3_moe"), tmp_path / "src")
    q = """      default: {method: gptq, bits: 4, group_size: 32}
      rules:
        - {match: 'switch_mlp\\.(gate|up|down)_proj$', format: trellis, method: ldlq, bits: 2,
           trellis: {T: 32}}"""
    p = _cli(_write(tmp_path, src, q), "--workdir", tmp_path / "w")
    assert p.returncode == 0, p.stderr[-3000:]
    meta = _check_decodes(tmp_path / "out")
    tr = [m for m, r in meta["modules"].items() if r["format"] == "trellis"]
    assert tr and all("switch_mlp" in m for m in tr)
    assert all(meta["modules"][m]["method"] == "ldlq" for m in tr)
    _mlx_matches_torch(tmp_path / "out")


def _mlx_matches_torch(out: Path) -> None:
    """The MLX runtime (stacked trellis experts packed) gives the torch loader's
    next-token distribution."""
    mx = pytest.importorskip("mlx.core")
    from tqbuild.runtime.mlx import TrellisSwitchLinear, load

    model, _ = load(out, dtype=mx.float32)
    assert any(isinstance(m, TrellisSwitchLinear) for _, m in model.named_modules())
    ids = np.arange(3, 19)
    got = torch.from_numpy(np.array(model(mx.array(ids)[None])[0])).double()
    with torch.no_grad():
        ref = load_torch(out)(torch.from_numpy(ids)[None]).logits[0].double()
    a, b = torch.log_softmax(ref, -1), torch.log_softmax(got, -1)
    assert float((a.exp() * (a - b)).sum(-1).mean()) < 1e-3


def test_geometry_error_names_tensor_and_fitting_T(llama_src, tmp_path):
    q = """      default: {format: trellis, bits: 3, trellis: {T: 48}}
      rules: [{match: embed_tokens, format: affine}]"""
    p = _cli("plan", _write(tmp_path, llama_src, q))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "T·k = 48·3" in p.stderr and "r.yaml:" in p.stderr and "[32, 64]" in p.stderr
    p = _cli("plan", _write(tmp_path, llama_src, "      default: {format: trellis, bits: 2}"))
    assert p.returncode == 2 and "embedding" in p.stderr and "fix:" in p.stderr


def test_ldlq_on_affine_is_a_recipe_error(llama_src, tmp_path):
    p = _cli("plan", _write(tmp_path, llama_src, "      default: {method: ldlq}"))
    assert p.returncode == 2 and "format: trellis" in p.stderr and "r.yaml:" in p.stderr


def test_qwen38_q3_recipe_on_tiny_qwen3_5(tmp_path):
    """The flagship recipe, unchanged but for source, sizes and its k-map."""
    src = save_bf16(make_model("qwen3_5_text"), tmp_path / "src")
    from safetensors import safe_open

    names = []
    with safe_open(str(src / "model.safetensors"), "pt") as f:
        for k in f.keys():
            if ".mlp." in k:
                names.append("language_model." + k.removesuffix(".weight"))
    kmap = {n: {"2": 1.0, "3": 0.4, "4": 0.1} for n in names}
    kmap[names[0]] = {"2": 20.0, "3": 5.0, "4": 0.5}
    (tmp_path / "kmap.json").write_text(json.dumps(kmap))
    sets = [f"source={{path: {src}}}", f"output={tmp_path / 'out'}",
            "calibration.samples=4", "calibration.seq_len=32",
            f"stages.quantize.rules.1.bits.kmap={tmp_path / 'kmap.json'}",
            f"stages.quantize.rules.2.bits.kmap={tmp_path / 'kmap.json'}",
            "stages.quantize.rules.1.trellis.T=32", "stages.quantize.rules.2.trellis.T=64",
            "stages.quantize.default.group_size=32"]
    args = [ROOT / "recipes" / "qwen38-q3.yaml", "--workdir", tmp_path / "w",
            "--lock", tmp_path / "artifacts.lock"]  # not the repository's lock
    for s in sets:
        args += ["--set", s]
    p = _cli(*args)
    assert p.returncode == 0, p.stderr[-3000:]
    meta = _check_decodes(tmp_path / "out")
    alloc = meta["bit_allocation"]
    assert len(alloc) == 1 and alloc[0]["budget"] == 3.0 and alloc[0]["average_k"] <= 3.0
    ks = alloc[0]["map"]
    assert len(ks) == len(names) and set(ks.values()) > {3}  # mixed
    downs = [m for m in ks if m.endswith("down_proj")]
    for m in downs:
        assert meta["modules"][m]["trellis"] == {"L": 12, "code": "mul1", "axis": 0,
                                                 "interleave": True, "version": 2}
    attn = [m for m, r in meta["modules"].items() if "attn" in m and r["format"] == "affine"]
    assert attn and all(meta["modules"][m]["bits"] == 4 for m in attn)


MLP_FEEDBACK = """      default: {method: gptq, bits: 4, group_size: 32}
      rules:
        - {match: 'mlp\\.(gate|up)_proj$', format: trellis, method: ldlq, bits: 3,
           trellis: {T: 64, axis: 0, ldlq_group: 4, scale_alpha: 1.1, refit: true}}
        - {match: 'mlp\\.down_proj$', format: trellis, method: ldlq, bits: 2,
           trellis: {T: 64, ldlq_group: 4, scale_alpha: 1.1, refit: true}}"""


def test_feedback_settings_build_decode_and_are_recorded(llama_src, tmp_path):
    """Gate/up along axis 0, small LDLQ steps, alpha and refit: the artifact
    decodes to its recorded reconstruction and the settings are in the provenance."""
    r = _write(tmp_path, llama_src, MLP_FEEDBACK, "original")
    p = _cli(r, "--workdir", tmp_path / "w")
    assert p.returncode == 0, p.stderr[-3000:]
    meta = _check_decodes(tmp_path / "out")
    assert meta["modules"]["model.layers.0.mlp.gate_proj"]["trellis"]["axis"] == 0
    assert meta["modules"]["model.layers.1.mlp.up_proj"]["encoder"] == {
        "ldlq_group": 4, "scale_alpha": 1.1, "refit": True}
    # left at their defaults the new fields stay out of dumps (fingerprints and
    # provenance of earlier recipes unchanged)
    from tqbuild.recipe import QuantSpec

    d0 = QuantSpec(format="trellis", method="ldlq", bits=3).model_dump()["trellis"]
    d1 = QuantSpec(format="trellis", method="ldlq", bits=3,
                   trellis={"refit": True}).model_dump()["trellis"]
    assert "refit" not in d0 and "scale_alpha" not in d0 and d1["refit"] is True


MLP_PAIR = """      default: {method: gptq, bits: 4, group_size: 32}
      rules:
        - {match: 'mlp\\.(gate|up)_proj$', format: trellis, method: ldlq, bits: 3,
           trellis: {T: 64, code: pair, refit: true}}
        - {match: 'mlp\\.down_proj$', format: trellis, method: ldlq, bits: 2,
           trellis: {T: 64, code: pair, ldlq_group: 4}}"""


def test_pair_code_builds_verifies_and_decodes(llama_src, tmp_path):
    """The pair code (format version 3) through the whole build: LDLQ on both axes,
    refit, the in-place verify through the runtimes, and the recorded reconstruction."""
    r = _write(tmp_path, llama_src, MLP_PAIR, "original")
    p = _cli(r, "--workdir", tmp_path / "w")
    assert p.returncode == 0, p.stderr[-3000:]
    meta = _check_decodes(tmp_path / "out")
    rec = meta["modules"]["model.layers.0.mlp.down_proj"]
    assert rec["trellis"] == {"L": 12, "code": "pair", "axis": 0, "interleave": False,
                              "version": 3}
    assert rec["bits"] == 2
    assert meta["modules"]["model.layers.1.mlp.gate_proj"]["trellis"]["version"] == 3


MLP_MIXED = """      default: {method: gptq, bits: 4, group_size: 32}
      rules:
        - {match: 'mlp\\.(gate|up)_proj$', format: trellis, method: ldlq, bits: 3,
           trellis: {T: 64, code: pair}}
        - {match: 'mlp\\.down_proj$', format: trellis, method: ldlq, bits: 3,
           trellis: {T: 64, code: mul1}}"""


def test_pair_gate_up_with_mul1_down_in_one_artifact(llama_src, tmp_path):
    """The fastest-decoding MLP (README: gate and up in the pair code, down in mul1):
    two format versions in one artifact build, verify in place and decode; the torch
    runtime stacks gate and up (same code) and leaves down alone."""
    from tqbuild.runtime.fused_mlp import GateUpMLP, fuse_gate_up
    from tqbuild.runtime.torch_load import load_torch

    r = _write(tmp_path, llama_src, MLP_MIXED, "original")
    p = _cli(r, "--workdir", tmp_path / "w")
    assert p.returncode == 0, p.stderr[-3000:]
    meta = _check_decodes(tmp_path / "out")
    mods = meta["modules"]
    assert mods["model.layers.0.mlp.up_proj"]["trellis"] == {
        "L": 12, "code": "pair", "axis": 1, "interleave": False, "version": 3}
    assert mods["model.layers.0.mlp.down_proj"]["trellis"]["code"] == "mul1"
    assert mods["model.layers.0.mlp.down_proj"]["trellis"]["version"] == 2
    model = load_torch(tmp_path / "out", packed=True)
    x = torch.randint(0, model.config.vocab_size, (1, 12))
    with torch.no_grad():
        want = model(x).logits
        assert fuse_gate_up(model) == model.config.num_hidden_layers
        assert isinstance(model.model.layers[0].mlp, GateUpMLP)
        got = model(x).logits
    assert torch.equal(got, want)
