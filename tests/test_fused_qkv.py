"""q, k and v stacked into one packed module (runtime/fused_qkv.py)."""

from __future__ import annotations

import numpy as np
import pytest
import tiny
import torch
from torch import nn
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)
from transformers.models.llama.modeling_llama import LlamaAttention

from tqbuild.runtime import fused_qkv
from tqbuild.runtime.affine_torch import AffineLinear
from tqbuild.runtime.trellis_torch import TrellisLinear

CUDA = torch.cuda.is_available()
SMALL = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=128, head_dim=64)


def affine(g, out_f, in_f, bits=4, group=64, bias=False, dtype=torch.float32):
    words = torch.randint(-2**31, 2**31 - 1, (out_f, in_f * bits // 32), generator=g,
                          dtype=torch.int32)
    scales = (torch.rand(out_f, in_f // group, generator=g) * 0.01).to(dtype)
    biases = (-(2 ** (bits - 1)) * scales.float()).to(dtype)
    b = torch.randn(out_f, generator=g) * 0.1 if bias else None
    return AffineLinear(words, scales, biases, bits, group, b)


def trellis(rng, rows, cols, k=3):
    words = rng.integers(0, 2**32, (rows, cols * k // 32), dtype=np.uint32)
    scales = (rng.random(rows) * 0.02 + 0.01).astype(np.float16)
    entry = {"bits": k, "group_size": 256, "mode": "trellis",
             "trellis": {"L": 12, "code": "mul1", "axis": 1, "interleave": False, "version": 2}}
    return TrellisLinear(torch.from_numpy(words.view(np.int32)), torch.from_numpy(scales), entry)


def packed_model(cls, config, make):
    model = cls(config).eval()
    for layer in model.model.layers:
        att = layer.self_attn
        for nm in ("q_proj", "k_proj", "v_proj", "o_proj"):
            old = getattr(att, nm)
            setattr(att, nm, make(nm, old.out_features, old.in_features, old.bias is not None))
    return model


@pytest.mark.parametrize("cls,config", [(LlamaForCausalLM, LlamaConfig(**SMALL)),
                                        (Qwen3ForCausalLM, Qwen3Config(**SMALL)),
                                        (Qwen2ForCausalLM, Qwen2Config(**SMALL))])
def test_fused_attention_gives_the_same_logits(cls, config):
    """llama; qwen3 (q_norm / k_norm around the projections); qwen2 (q / k / v biases)."""
    g = torch.Generator().manual_seed(0)
    model = packed_model(cls, config, lambda nm, o, i, b: affine(g, o, i, bias=b))
    ids = torch.randint(0, 128, (2, 9), generator=g)
    with torch.no_grad():
        want = model(ids).logits
        assert fused_qkv.fuse_qkv(model) == 2
        att = model.model.layers[0].self_attn
        assert not hasattr(att, "q_proj") and att.qkv_proj.proj.out_features == 256 + 2 * 128
        assert att.qkv_proj.sizes == (256, 128, 128)
        torch.testing.assert_close(model(ids).logits, want, rtol=1e-5, atol=1e-5)
        assert fused_qkv.fuse_qkv(model) == 0  # already fused


@pytest.mark.parametrize("family", sorted(tiny.FAMILIES))
def test_every_family_fuses_to_the_same_logits(family):
    """Each supported family's attention (gemma3's sliding layers, qwen3_next / qwen3_5's
    gated q_proj beside their linear-attention layers) takes the rewrite."""
    model = tiny.make_model(family)
    g = torch.Generator().manual_seed(5)
    attentions = [m for m in model.modules() if all(hasattr(m, p) for p in fused_qkv.PROJ)]
    for att in attentions:
        for nm in (*fused_qkv.PROJ, "o_proj"):
            old = getattr(att, nm)
            setattr(att, nm, affine(g, old.out_features, old.in_features,
                                    bias=old.bias is not None))
    ids = torch.randint(0, tiny.VOCAB, (1, 12), generator=g)
    with torch.no_grad():
        want = model(ids).logits
        assert fused_qkv.fuse_qkv(model) == len(attentions) > 0
        torch.testing.assert_close(model(ids).logits, want, rtol=1e-5, atol=1e-5)


def test_trellis_projections_are_fused_too():
    rng = np.random.default_rng(1)
    model = packed_model(LlamaForCausalLM, LlamaConfig(**SMALL),
                         lambda nm, o, i, b: trellis(rng, o, i))
    ids = torch.randint(0, 128, (1, 7))
    with torch.no_grad():
        want = model(ids).logits
        assert fused_qkv.fuse_qkv(model) == 2
        assert isinstance(model.model.layers[1].self_attn.qkv_proj.proj, TrellisLinear)
        torch.testing.assert_close(model(ids).logits, want, rtol=1e-5, atol=1e-5)


def test_projections_packed_unlike_are_left_alone(monkeypatch):
    g = torch.Generator().manual_seed(2)
    bits = {"q_proj": 4, "k_proj": 8, "v_proj": 4, "o_proj": 4}
    model = packed_model(LlamaForCausalLM, LlamaConfig(**SMALL),
                         lambda nm, o, i, b: affine(g, o, i, bits=bits[nm]))
    assert fused_qkv.fuse_qkv(model) == 0
    model = packed_model(LlamaForCausalLM, LlamaConfig(**SMALL),
                         lambda nm, o, i, b: affine(g, o, i))
    monkeypatch.setenv("TQBUILD_FUSE_QKV", "0")
    assert fused_qkv.fuse_qkv(model) == 0
    dense = LlamaForCausalLM(LlamaConfig(**SMALL))  # nn.Linear projections: not packed
    monkeypatch.delenv("TQBUILD_FUSE_QKV")
    assert fused_qkv.fuse_qkv(dense) == 0


class TwiceQ(LlamaAttention):
    def forward(self, hidden_states, *args, **kwargs):
        return self.q_proj(hidden_states) + self.q_proj(hidden_states) + \
            self.k_proj(hidden_states) + self.v_proj(hidden_states)


class OtherInput(LlamaAttention):
    def forward(self, hidden_states, other=None, **kwargs):
        return self.q_proj(hidden_states), self.k_proj(other), self.v_proj(hidden_states)


class Reassigned(LlamaAttention):
    def forward(self, hidden_states, **kwargs):
        q = self.q_proj(hidden_states)
        hidden_states = hidden_states * 2
        return q, self.k_proj(hidden_states), self.v_proj(hidden_states)


class Named(LlamaAttention):
    def forward(self, hidden_states, **kwargs):
        dtype = self.q_proj.scales.dtype  # the module itself used: cannot be fused away
        return self.q_proj(hidden_states).to(dtype), self.k_proj(hidden_states), \
            self.v_proj(hidden_states)


class UsedElsewhere(LlamaAttention):
    def peek(self):
        return self.v_proj.out_features


class Plain(LlamaAttention):
    def forward(self, hidden_states, **kwargs):
        """q, k and v once each on the first argument: fused."""
        return self.q_proj(hidden_states), self.k_proj(hidden_states), self.v_proj(hidden_states)


@pytest.mark.parametrize("cls,fusable", [(TwiceQ, False), (OtherInput, False),
                                         (Reassigned, False), (Named, False),
                                         (UsedElsewhere, True), (Plain, True)])
def test_only_forwards_of_the_stated_form_are_rewritten(cls, fusable):
    new = fused_qkv.fused_class(cls)
    if cls is UsedElsewhere:  # its forward is llama's, but another method names v_proj
        assert new is None
        return
    assert (new is not None) == fusable
    if new is None:
        return
    g = torch.Generator().manual_seed(3)
    att = cls(LlamaConfig(**SMALL), layer_idx=0)
    for nm in fused_qkv.PROJ:
        old = getattr(att, nm)
        setattr(att, nm, affine(g, old.out_features, old.in_features))
    x = torch.randn(1, 3, 256, generator=g)
    want = att(x)
    holder = nn.Sequential(att)
    assert fused_qkv.fuse_qkv(holder) == 1 and type(att).__name__ == cls.__name__
    for got, ref in zip(att(x), want, strict=True):
        assert torch.equal(got, ref)


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("M", [1, 4])
def test_cuda_fused_attention_gives_the_same_bits(M):
    """The CUDA affine kernel: each row's sum as in its own module (no input splits)."""
    g = torch.Generator().manual_seed(4)
    cfg = LlamaConfig(**{**SMALL, "hidden_size": 1024, "intermediate_size": 2048,
                         "num_attention_heads": 16, "num_key_value_heads": 4})
    model = packed_model(LlamaForCausalLM, cfg,
                         lambda nm, o, i, b: affine(g, o, i, dtype=torch.bfloat16))
    model = model.to("cuda", torch.bfloat16)
    ids = torch.randint(0, 128, (M, 1), generator=g).cuda()
    with torch.no_grad():
        want = model(ids).logits
        assert fused_qkv.fuse_qkv(model) == 2
        assert torch.equal(model(ids).logits, want)
