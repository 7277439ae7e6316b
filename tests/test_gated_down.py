"""A SiLU MLP's down_proj reading [gate | up] itself (TrellisLinear.gated, the dp4a
cols kernel's GATED inputs): silu(gate)·up in float32 rounded once, the same
outputs as down_proj(silu_mul(h)); GateUpMLP takes it where it applies."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from tqbuild.runtime import fused_mlp, trellis_cuda
from tqbuild.runtime import trellis_torch as tt

CUDA = torch.cuda.is_available()


def _linear(rng, k: int, L: int, T: int, n_in: int, n_out: int, axis: int = 0,
            code: str = "mul1") -> tt.TrellisLinear:
    rows, cols = (n_in, n_out) if axis == 0 else (n_out, n_in)
    words = rng.integers(0, 2**32, (rows, cols * k // 32), dtype=np.uint32)
    scales = (rng.random(rows) * 0.02 + 0.005).astype(np.float16)
    entry = {"bits": k, "group_size": T, "mode": "trellis",
             "trellis": {"L": L, "code": code, "axis": axis, "interleave": False,
                         "version": 3 if code == "pair" else 2}}
    return tt.TrellisLinear(torch.from_numpy(words.view(np.int32)), torch.from_numpy(scales),
                            entry)


def test_silu_mul_rounds_once():
    h = torch.randn(3, 64, generator=torch.Generator().manual_seed(0)).bfloat16()
    g, u = h.float().chunk(2, -1)
    assert torch.equal(tt.silu_mul(h), (nn.functional.silu(g) * u).bfloat16())
    assert tt.silu_mul(h).dtype == torch.bfloat16
    twice = (nn.functional.silu(h[:, :32]) * h[:, 32:])  # eager bf16: rounded twice
    assert not torch.equal(tt.silu_mul(h), twice)


@pytest.mark.parametrize("code,L", [("mul1", 12), ("pair", 16)])
def test_gated_is_down_of_silu_mul_on_cpu(code, L):
    rng = np.random.default_rng(1)
    lin = _linear(rng, 3, L, 256, 512, 256, code=code)
    for dt in (torch.float32, torch.bfloat16):
        h = torch.from_numpy(rng.standard_normal((2, 1, 1024)).astype(np.float32)).to(dt)
        got = lin.gated(h)
        assert got.shape == (2, 1, 256) and got.dtype == dt
        assert torch.equal(got, lin(tt.silu_mul(h)))


def test_gate_up_mlp_reads_gated_where_it_applies(monkeypatch):
    rng = np.random.default_rng(2)
    gate_up = fused_mlp.stack_rows([_linear(rng, 3, 12, 256, 256, 512, axis=1)
                                    for _ in range(2)])
    assert gate_up is not None
    down = _linear(rng, 3, 12, 256, 512, 256)
    mlp = fused_mlp.GateUpMLP(gate_up, down, nn.SiLU())
    assert mlp.gated_down
    x = torch.from_numpy(rng.standard_normal((2, 256)).astype(np.float32))
    g, u = gate_up(x).chunk(2, -1)
    assert torch.equal(mlp(x), down(nn.functional.silu(g) * u))  # float32: bit for bit
    calls = []
    monkeypatch.setattr(tt.TrellisLinear, "gated",
                        lambda self, h: calls.append(h) or self(h[..., :512]))
    mlp(x)
    assert len(calls) == 1 and calls[0].shape == (2, 1024)
    assert not fused_mlp.GateUpMLP(gate_up, down, nn.GELU()).gated_down
    assert not fused_mlp.GateUpMLP(gate_up, nn.Linear(512, 256), nn.SiLU()).gated_down
    monkeypatch.setenv("TQBUILD_FUSE_ACT", "0")
    assert not fused_mlp.GateUpMLP(gate_up, down, nn.SiLU()).gated_down


def test_torch_compile_sees_one_gated_op():
    rng = np.random.default_rng(3)
    down = _linear(rng, 3, 12, 64, 128, 64)
    h = torch.from_numpy(rng.standard_normal((1, 256)).astype(np.float32))
    torch._dynamo.reset()
    seen = []

    def backend(gm, inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes)
        return gm.forward

    compiled = torch.compile(down.gated, backend=backend, fullgraph=True)
    assert torch.equal(compiled(h), down.gated(h))
    assert sum("tqbuild.trellis_gated_matmul" in t for t in seen) == 1, seen


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_cuda_gated_cols_kernel_reads_silu_mul():
    """The dp4a cols kernel with GATED inputs = the same kernel on silu_mul(h) (torch's
    silu formula: equal but for rare last-bit differences of expf): k = 3 / L = 12 and
    k = 4 / L = 16, M = 1, 2, fp32/bf16/fp16, one and several splits."""
    rng = np.random.default_rng(4)
    i = 0
    for k, L, Ms in ((3, 12, (1, 2, 1, 2, 1, 2)), (4, 16, (1, 2))):  # two library builds
        trellis_cuda.prebuild([(k, L, "mul1")])
        for M in Ms:
            lin = _linear(rng, k, L, 256, 1024 + 32 * i, 512).cuda()
            dt = (torch.float32, torch.bfloat16, torch.float16)[i % 3]
            cfg = (None, {"splits": 3})[(i // 2) % 2]
            h = torch.from_numpy(rng.standard_normal((M, 2 * lin.in_features))
                                 .astype(np.float32)).to(dt).cuda()
            dims = dict(code="mul1", k=k, T=256, L=L, axis=0, out_features=512,
                        in_features=lin.in_features, cfg=cfg, out_dtype=torch.float32)
            got = trellis_cuda.matvec(h, lin.words, lin.scales, gated=True, **dims)
            want = trellis_cuda.matvec(tt.silu_mul(h), lin.words, lin.scales, **dims)
            same = (got == want).float().mean().item()
            assert same > 0.99, (k, L, M, dt, cfg, same)
            torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2 * want.abs().max().item())
            i += 1
    with pytest.raises(ValueError, match="cols kernel only"):
        trellis_cuda.matvec(h, lin.words, lin.scales, gated=True,
                            **{**dims, "axis": 1, "cfg": None})


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_cuda_linear_gated_takes_the_kernel(monkeypatch):
    rng = np.random.default_rng(5)
    lin = _linear(rng, 3, 12, 256, 1024, 512).cuda()
    seen = []
    real = trellis_cuda.matvec
    monkeypatch.setattr(trellis_cuda, "matvec",
                        lambda *a, **kw: seen.append(kw.get("gated", False)) or real(*a, **kw))
    for M in (1, 2, 4):
        h = torch.randn(M, 2048, device="cuda", dtype=torch.bfloat16)
        y = lin.gated(h)
        assert y.dtype == torch.bfloat16 and y.shape == (M, 512)
        torch.testing.assert_close(y.float(), lin(tt.silu_mul(h)).float(), rtol=2e-2, atol=2e-2)
    # each M: lin.gated's call, then the reference's; M = 4: silu_mul, then cols_tc
    assert seen == [True, False, True, False, False, False], seen
