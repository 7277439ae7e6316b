"""Hessian capture: per-sample float64 partials summed in sample order, shared
inputs deduplicated, split runs identical to one run, layer forward exact."""

from __future__ import annotations

import torch
from tiny import VOCAB, make_model, reload_source, save_bf16

from tqbuild.io.source import Source
from tqbuild.models import family_for
from tqbuild.stages.hessian import HessianCapture
from tqbuild.stages.layer_forward import LayerRunner


def setup(tmp_path, model_type="llama"):
    src = save_bf16(make_model(model_type), tmp_path / "src")
    s = Source(src)
    run = LayerRunner(s.config, family_for(s.config["model_type"]))
    ids = torch.randint(0, VOCAB, (6, 16), generator=torch.Generator().manual_seed(0))
    x = run.embed(s.get("model.embed_tokens.weight"), ids)
    pre = "model.layers.0."
    layer = run.layer(0, {k[len(pre):]: s.get(k) for k in s.keys() if k.startswith(pre)})
    return src, run, ids, x, layer


def test_layer_forward_equals_transformers(tmp_path):
    src, run, ids, x, layer = setup(tmp_path, "gemma3_text")  # scaled embeddings, sliding mask
    with torch.no_grad():
        ref = reload_source(src)(ids, output_hidden_states=True).hidden_states[1]
    assert torch.equal(run.run(0, layer, x), ref)


def test_hessian_is_sum_of_per_sample_partials(tmp_path):
    src, run, ids, x, layer = setup(tmp_path)
    inputs = {}
    hook = layer.mlp.down_proj.register_forward_pre_hook(
        lambda m, a: inputs.setdefault("down", []).append(a[0].detach().clone()))
    cap = HessianCapture(layer, seq_len=16)
    run.run(0, layer, x, on_sample=cap.start_batch)
    cap.close()
    hook.remove()
    ref = torch.zeros(128, 128, dtype=torch.float64)
    for xs in inputs["down"]:
        xs = xs.reshape(-1, 128).double()
        ref += xs.T @ xs
    assert torch.equal(cap.for_module("mlp.down_proj"), ref)
    # q/k/v share one input, gate/up another
    assert cap.alias["self_attn.k_proj"] == cap.alias["self_attn.v_proj"] == "self_attn.q_proj"
    assert cap.alias["mlp.up_proj"] == "mlp.gate_proj"
    assert cap.count["mlp.down_proj"] == 6 * 16


def test_split_runs_accumulate_identically(tmp_path):
    """Samples fed in two runs (as two ranks or a resumed capture would) give the
    same bits as one run."""
    src, run, ids, x, layer = setup(tmp_path)
    one = HessianCapture(layer, 16)
    run.run(0, layer, x, on_sample=one.start_batch)
    one.close()
    two = HessianCapture(layer, 16)
    run.run(0, layer, x[:2], on_sample=two.start_batch)
    run.run(0, layer, x[2:], on_sample=two.start_batch)
    two.close()
    for k in one.h:
        assert torch.equal(one.h[k], two.h[k]), k


def test_moe_experts_get_routed_hessians(tmp_path):
    src = save_bf16(make_model("qwen3_moe"), tmp_path / "src")
    s = Source(src)
    run = LayerRunner(s.config, family_for("qwen3_moe"))
    ids = torch.randint(0, VOCAB, (3, 16), generator=torch.Generator().manual_seed(0))
    x = run.embed(s.get("model.embed_tokens.weight"), ids)
    pre = "model.layers.1."  # decoder_sparse_step=2: layer 1 is sparse
    layer = run.layer(1, {k[len(pre):]: s.get(k) for k in s.keys() if k.startswith(pre)})
    cap = HessianCapture(layer, 16)
    run.run(1, layer, x, on_sample=cap.start_batch)
    cap.close()
    routed = sum(cap.count[f"mlp.experts.{e}.gate_proj"] for e in range(4)
                 if f"mlp.experts.{e}.gate_proj" in cap.count)
    assert routed == 3 * 16 * 2  # top-2 routing: every token reaches two experts
    assert cap.for_module("mlp.gate") is not None  # the router
    assert cap.for_module("mlp.experts.0.down_proj").shape == (32, 32)
