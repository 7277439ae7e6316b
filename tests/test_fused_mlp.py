"""Gate and up stacked into one packed module (runtime/fused_mlp.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaMLP

from tqbuild.runtime import fused_mlp, trellis_cuda
from tqbuild.runtime.trellis_torch import TrellisLinear

CUDA = torch.cuda.is_available()


def packed(rng, rows, cols, k=3, L=12, T=256, axis=1, code="mul1"):
    words = rng.integers(0, 2**32, (rows if axis == 1 else cols, (cols if axis == 1 else rows)
                                    * k // 32), dtype=np.uint32)
    scales = (rng.random(words.shape[0]) * 0.02 + 0.01).astype(np.float16)
    entry = {"bits": k, "group_size": T, "mode": "trellis",
             "trellis": {"L": L, "code": code, "axis": axis, "interleave": False, "version": 2}}
    return TrellisLinear(torch.from_numpy(words.view(np.int32)), torch.from_numpy(scales), entry)


def tiny_mlp(rng, hidden=256, inter=512, up_k=3):
    mlp = LlamaMLP(LlamaConfig(hidden_size=hidden, intermediate_size=inter))
    mlp.gate_proj = packed(rng, inter, hidden)
    mlp.up_proj = packed(rng, inter, hidden, k=up_k)
    mlp.down_proj = packed(rng, hidden, inter, axis=0)
    return mlp


def test_fused_mlp_computes_the_gated_mlp():
    rng = np.random.default_rng(0)
    model = nn.Sequential(tiny_mlp(rng), tiny_mlp(rng, up_k=2))
    x = torch.randn(3, 256)
    want = model(x)
    assert fused_mlp.fuse_gate_up(model) == 1  # the second one's up has another k
    assert isinstance(model[0], fused_mlp.GateUpMLP) and isinstance(model[1], LlamaMLP)
    assert not hasattr(model[0], "gate_proj") and model[0].gate_up_proj.out_features == 1024
    torch.testing.assert_close(model(x), want, rtol=1e-5, atol=1e-6)


def test_only_the_gated_mlp_forward_is_fused(monkeypatch):
    rng = np.random.default_rng(1)

    class Other(LlamaMLP):
        def forward(self, x):  # not the gated MLP: left alone
            return self.down_proj(self.gate_proj(x) * self.up_proj(x))

    class Documented(LlamaMLP):
        def forward(self, x):
            """The gated MLP, written the short way."""
            return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))

    other, documented = Other(LlamaConfig(hidden_size=256, intermediate_size=512)), \
        Documented(LlamaConfig(hidden_size=256, intermediate_size=512))
    for m in (other, documented):
        m.gate_proj, m.up_proj = packed(rng, 512, 256), packed(rng, 512, 256)
    assert fused_mlp.fuse_gate_up(nn.Sequential(other)) == 0
    assert fused_mlp.fuse_gate_up(nn.Sequential(documented)) == 1
    monkeypatch.setenv("TQBUILD_FUSE_MLP", "0")
    assert fused_mlp.fuse_gate_up(nn.Sequential(tiny_mlp(rng))) == 0
    # gate coded along its outputs, or a bias: no stacking
    assert fused_mlp.stack_rows([packed(rng, 512, 256, axis=0), packed(rng, 512, 256)]) is None


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_fused_mlp_gives_the_same_bits_on_the_cuda_kernels():
    rng = np.random.default_rng(2)
    mlp = tiny_mlp(rng, hidden=1024, inter=2048).cuda()
    trellis_cuda.prebuild([(3, 12, "mul1")])
    model = nn.Sequential(mlp)
    xs = [torch.randn(m, 1024, device="cuda", dtype=torch.bfloat16) for m in (1, 2, 4, 8)]
    gate_up = [torch.cat([mlp.gate_proj(x), mlp.up_proj(x)], -1) for x in xs]
    want = [model(x) for x in xs]
    assert fused_mlp.fuse_gate_up(model) == 1
    for x, gu, w in zip(xs, gate_up, want, strict=True):
        assert torch.equal(model[0].gate_up_proj(x), gu), x.shape
        assert torch.equal(model(x), w), x.shape
