"""The CUDA path of a GPTQ + trellis/LDLQ build (Hessians, GPTQ, LDLQ with the
Triton Viterbi and the layer runner on the GPU); skipped without one."""

from __future__ import annotations

import pytest
import torch
from tiny import VOCAB, make_model, reload_source, save_bf16

from tqbuild.eval.metrics import compare, forward_logits
from tqbuild.io.source import Source
from tqbuild.pipeline.executor import BuildOptions, build
from tqbuild.pipeline.graph import compile_plan
from tqbuild.recipe import load
from tqbuild.runtime.torch_load import load_torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize("model_type", ["llama", "qwen3_moe"])
def test_gptq_build_on_cuda_matches_cpu_quality(model_type, tmp_path):
    src = save_bf16(make_model(model_type), tmp_path / "src")
    (tmp_path / "r.yaml").write_text(f"""name: c
source: {{path: {src}}}
output: out
calibration: {{source: {{self_generated: true}}, samples: 8, seq_len: 32}}
stages:
  - untie
  - norm_fold
  - rotate
  - calibrate
  - quantize:
      default: {{method: gptq, bits: 4, group_size: 32}}
      rules:
        - {{match: 'mlp\\.(gate|up|down)_proj$', format: trellis, method: ldlq, bits: 3,
           trellis: {{T: {32 if model_type == "qwen3_moe" else 64}}}}}
""")
    source = Source(src)
    plan = compile_plan(load(tmp_path / "r.yaml"), source)
    outs = {}
    for dev in ("cpu", "cuda"):
        build(plan, source, tmp_path / dev, BuildOptions(progress=False, device=dev),
              workdir=tmp_path / f"w-{dev}")
        outs[dev] = tmp_path / dev
    ids = torch.randint(0, VOCAB, (128,), generator=torch.Generator().manual_seed(0))
    teacher = forward_logits(reload_source(src), ids)
    kl = {d: compare(teacher, forward_logits(load_torch(p), ids)).mean_kl for d, p in outs.items()}
    assert kl["cuda"] < 1.5 * kl["cpu"] + 1e-3, kl
