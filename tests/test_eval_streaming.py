"""Layer-streamed evaluation (eval/streaming.py): the same logits as the whole
model for sources and artifacts of several families, the same eval numbers,
and a peak memory that does not grow with the number of layers (evaluation,
layer-streamed calibration sampling, the sensitivity sweep)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cli_run import cli
from conftest import write_recipe
from tiny import make_model, save_bf16, save_char_tokenizer

from tqbuild.eval.streaming import ArtifactReader, SourceReader, stream_logits
from tqbuild.runtime.torch_load import load_torch

IDS = torch.arange(1, 41) % 60 + 2


def _streamed(reader, window=16) -> torch.Tensor:
    out = {}
    stream_logits(reader, IDS, window, lambda s, lg: out.__setitem__(s, lg))
    return torch.cat([out[s] for s in sorted(out)])


def _whole(model, window=16) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([model(IDS[s:s + window][None]).logits[0].float()
                          for s in range(0, IDS.numel(), window)])


@pytest.mark.parametrize("family", ["llama", "gemma3_text", "qwen3_5_text", "qwen3_moe"])
def test_streamed_source_logits_equal_the_whole_model(tmp_path, family):
    from transformers import AutoModelForCausalLM

    src = save_bf16(make_model(family), tmp_path / "src")
    whole = _whole(AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval())
    assert torch.allclose(_streamed(SourceReader(src)), whole, atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("family,rule", [
    ("llama", {"match": r"mlp\.(gate|up|down)_proj$", "format": "trellis", "bits": 3,
               "trellis": {"T": 64}}),
    pytest.param("qwen3_moe", {"match": r"switch_mlp\.(gate|up|down)_proj$",
                               "format": "trellis", "bits": 2, "trellis": {"T": 32}},
                 marks=pytest.mark.slow)])
def test_streamed_artifact_logits_equal_the_torch_loader(tmp_path, tiny_source, family, rule):
    src = tiny_source() if family == "llama" else save_bf16(make_model(family), tmp_path / "s")
    write_recipe(tmp_path / "r.yaml", source=src, output=tmp_path / "out", stages=[
        "untie", "norm_fold", "rotate",
        {"quantize": {"default": {"bits": 4, "group_size": 32}, "rules": [rule]}}])
    p = cli(tmp_path, tmp_path / "r.yaml", "--no-lock", "--workdir", tmp_path / "w")
    assert p.returncode == 0, p.stderr[-2000:]
    whole = _whole(load_torch(tmp_path / "out"))
    got = _streamed(ArtifactReader(tmp_path / "out"))
    assert torch.allclose(got, whole, atol=2e-4, rtol=1e-4), float((got - whole).abs().max())


def test_streamed_eval_numbers_equal_the_whole_model_path(tmp_path, tiny_source):
    from tqbuild.eval.run import evaluate

    src = save_char_tokenizer(shutil.copytree(tiny_source(), tmp_path / "src"))
    write_recipe(tmp_path / "r.yaml", source=src, output=tmp_path / "out", stages=[
        "untie", {"quantize": {"default": {"bits": 3, "group_size": 32}}}])
    assert cli(tmp_path, tmp_path / "r.yaml", "--no-lock", "--workdir",
               tmp_path / "w").returncode == 0
    text = tmp_path / "t.txt"
    text.write_text("the quick brown fox jumps over the lazy dog; " * 20)
    kw = dict(text=text, tokens=300, window=64, probe=False)
    a = evaluate(tmp_path / "out", src, workdir=tmp_path / "wa", **kw)
    b = evaluate(tmp_path / "out", src, workdir=tmp_path / "wb", stream=True, **kw)
    assert b["streamed"] and not a["streamed"]
    for k in ("perplexity", "source_perplexity", "top1_agreement"):
        assert b[k] == pytest.approx(a[k], rel=1e-5), k
    assert b["mean_kl"] == pytest.approx(a["mean_kl"], rel=1e-3, abs=1e-7)


PEAK = """
import sys, torch
from pathlib import Path
sys.path.insert(0, {tests!r})
from tqbuild.eval.streaming import SourceReader, stream_logits
src, mode = Path(sys.argv[1]), sys.argv[2]
ids = torch.arange(64) % 60 + 2
if mode == "stream":
    stream_logits(SourceReader(src), ids, 32, lambda s, lg: None)
elif mode == "sample":  # layer-streamed calibration sampling, no layer kept resident
    from tqbuild.recipe import CalibrateParams
    from tqbuild.stages.calib_stream import self_generated_streamed
    self_generated_streamed(src, CalibrateParams(samples=2, seq_len=8), resident_bytes=0)
elif mode == "sens":  # the sensitivity sweep, a candidate in the first and the last layer
    from types import SimpleNamespace
    from tqbuild.eval.sensitivity import sweep
    n = SourceReader(src).config["num_hidden_layers"]
    spec = SimpleNamespace(format="affine", group_size=64)
    hf = {{f"l{{i}}": f"model.layers.{{i}}.mlp.down_proj.weight" for i in (0, n - 1)}}
    sweep(SourceReader(src), ids, 32, {{m: (spec, (4,)) for m in hf}}, hf, "noise", "cpu",
          lambda m: None)
else:
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    with torch.no_grad():
        m(ids[None])
print([l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1])
"""


def _peak_mib(src: Path, mode: str) -> float:
    code = PEAK.format(tests=str(Path(__file__).parent))
    p = subprocess.run([sys.executable, "-c", code, str(src), mode], capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    return int(p.stdout.split()[-1]) / 1024


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["stream", "sample", "sens"])
def test_streamed_peak_memory_is_flat_in_the_number_of_layers(tmp_path, mode):
    """Layers of 64 MiB (float32): 4 vs 8 of them; evaluation logits, calibration
    sampling and the sensitivity sweep."""
    from transformers import AutoConfig, AutoModelForCausalLM

    srcs = {}
    for n in (4, 8):
        cfg = AutoConfig.for_model("llama", hidden_size=1024, intermediate_size=4096,
                                   num_hidden_layers=n, num_attention_heads=8,
                                   num_key_value_heads=8, vocab_size=64,
                                   tie_word_embeddings=True)
        torch.manual_seed(0)
        m = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)
        m.save_pretrained(tmp_path / f"l{n}")
        srcs[n] = tmp_path / f"l{n}"
        del m
    s4, s8 = _peak_mib(srcs[4], mode), _peak_mib(srcs[8], mode)
    whole8 = _peak_mib(srcs[8], "whole")
    print(json.dumps({"peak_mib": {"mode": mode, "stream4": s4, "stream8": s8,
                                   "whole8": whole8}}))
    assert s8 <= 1.1 * s4, (s4, s8)
    assert whole8 - s8 > 250, (whole8, s8)  # the whole model holds 512 MiB of layers
