"""The tensor-core CUDA decode matmul of MLX affine weights (runtime/affine_cuda.py,
runtime/affine_gemv.cu): its routing, plan and fallback here; the kernel against the
values on the GPU where there is one (on CPU its source runs in the SIMT emulator:
tests/test_affine_gemv_host.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_affine_kernel import random_affine

from tqbuild.runtime import affine_cuda, affine_torch, affine_triton, gpu_info

CUDA = torch.cuda.is_available()
BF16, F16 = torch.bfloat16, torch.float16


def test_kernel_handles_only_its_shapes():
    assert affine_cuda.handles(1, 4096, BF16, BF16, 4, 64)
    assert affine_cuda.handles(8, 256, F16, F16, 2, 64)
    assert affine_cuda.handles(1, 4096, BF16, BF16, 8, 64)  # an 8-bit lm_head
    assert not affine_cuda.handles(1, 4096 + 32, BF16, BF16, 8, 32)  # not whole 64-input chunks
    assert not affine_cuda.handles(9, 4096, BF16, BF16, 4, 64)  # M > MAX_M
    assert not affine_cuda.handles(1, 4096, torch.float32, torch.float32, 4, 64)
    assert not affine_cuda.handles(1, 4096, BF16, F16, 4, 64)  # scales in another dtype
    assert not affine_cuda.handles(1, 4096, BF16, BF16, 3, 64)
    assert not affine_cuda.handles(1, 4160, BF16, BF16, 4, 64)  # not whole 128-input chunks
    assert not affine_cuda.handles(1, 4096, BF16, BF16, 4, 16)  # a group within a lane's run
    assert not affine_cuda.handles(1, 4096, BF16, BF16, 2, 32)
    assert not affine_cuda.handles(1, 4608, BF16, BF16, 4, 96)  # not a power of two


def test_kernel_serves_only_where_chosen_and_on_cuda(monkeypatch):
    words, scales, biases = random_affine(np.random.default_rng(0), 4, 64, 32, 256, BF16)
    x = torch.zeros(1, 256, dtype=BF16)
    monkeypatch.setenv("TQBUILD_AFFINE_KERNEL", "cuda")
    assert not affine_cuda.serves(x, words, scales, biases, 4, 64)  # a CPU tensor
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda t: True))
    assert affine_cuda.serves(x, words, scales, biases, 4, 64)
    assert not affine_cuda.serves(x[:, ::2], words, scales, biases, 4, 64)  # strided x
    monkeypatch.setenv("TQBUILD_AFFINE_KERNEL", "triton")
    assert not affine_cuda.serves(x, words, scales, biases, 4, 64)
    monkeypatch.setenv("TQBUILD_AFFINE_KERNEL", "0")
    assert not affine_cuda.serves(x, words, scales, biases, 4, 64)
    monkeypatch.delenv("TQBUILD_AFFINE_KERNEL")
    assert affine_cuda.serves(x, words, scales, biases, 4, 64)  # the default


def test_splits_give_small_layers_a_block_an_sm():
    assert affine_cuda.splits_for(4096, 4096, 4, 132) == 1  # 256 row tiles
    assert affine_cuda.splits_for(1024, 4096, 4, 132) == 1  # 64 tiles: no sum kernel
    assert affine_cuda.splits_for(512, 4096, 4, 132) == 4  # 32 tiles, 32 chunks: 4 a split
    assert affine_cuda.splits_for(64, 4096, 4, 132) == 4  # at least a chunk a warp
    assert affine_cuda.splits_for(64, 16384, 2, 132) == 8


def test_a_failed_build_warns_once_and_leaves_the_call_to_triton(monkeypatch):
    words, scales, biases = random_affine(np.random.default_rng(1), 4, 64, 40, 256, BF16)
    x = torch.randn(2, 256).to(BF16)

    def broken():
        raise RuntimeError("nvcc not found")

    monkeypatch.setattr(affine_cuda, "_failed", [])
    monkeypatch.setattr(affine_cuda, "_library", broken)
    monkeypatch.setattr(gpu_info, "sm_count", lambda device: 132)
    monkeypatch.setenv("TQBUILD_AFFINE_KERNEL", "cuda")
    with pytest.warns(UserWarning, match="using the Triton kernel"):
        assert affine_cuda.matmul(x, words, scales, biases, 4, 64, 40) is None
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda t: True))
    assert affine_cuda._failed and not affine_cuda.serves(x, words, scales, biases, 4, 64)


def _cuda_cases():
    rng = np.random.default_rng(3)
    for bits, gs, n_out, n_in, M, dt, splits in [
            (4, 64, 4096, 4096, 1, BF16, None), (4, 64, 1000, 4096, 3, BF16, None),
            (4, 32, 72, 1024, 8, F16, 3), (4, 128, 130, 2048, 2, BF16, 5),
            (2, 64, 48, 2048, 4, BF16, None), (2, 128, 40, 512, 8, F16, 2),
            (8, 64, 4096, 4096, 1, BF16, None), (8, 32, 96, 1024, 5, F16, 3),
            (8, 128, 200, 2048, 8, BF16, 2)]:
        words, scales, biases = (t.cuda() for t in random_affine(rng, bits, gs, n_out, n_in, dt))
        x = torch.from_numpy(rng.standard_normal((M, n_in)).astype(np.float32)).to(dt).cuda()
        yield bits, gs, n_out, x, words, scales, biases, splits


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_cuda_kernel_matches_the_values(monkeypatch):
    """Against x @ the values rounded to x's dtype: within a unit of the output's dtype
    (values rounded once here, via float32 there); a one-hot x reads values back exactly."""
    monkeypatch.setenv("TQBUILD_AFFINE_KERNEL", "cuda")
    for bits, gs, n_out, x, words, scales, biases, splits in _cuda_cases():
        assert affine_cuda.serves(x, words, scales, biases, bits, gs)
        y = affine_cuda.matmul(x, words, scales, biases, bits, gs, n_out, splits=splits)
        assert y is not None and y.dtype == x.dtype, affine_cuda._failed
        v = affine_torch.affine_values(words, scales, biases, bits, gs).to(x.dtype).double()
        want = x.double() @ v.T
        err = ((y.double() - want).abs().max() / (x.double().abs() @ v.abs().T).max()).item()
        assert err < 2e-2 if x.dtype == BF16 else 2e-3, (bits, gs, n_out, x.shape, err)
        hot = torch.zeros_like(x)
        ks = torch.randperm(x.shape[1], device="cuda")[: x.shape[0]]
        hot[torch.arange(x.shape[0]), ks] = 1
        got = affine_cuda.matmul(hot, words, scales, biases, bits, gs, n_out, splits=splits)
        exact = (affine_torch.affine_values(words, scales, biases, bits, gs).double()[:, ks].T
                 .to(x.dtype))
        # rounded once vs via float32: equal but for a rare double rounding
        assert (got != exact).float().mean().item() < 1e-3


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_cuda_affine_linear_takes_the_cuda_kernel_by_default(monkeypatch):
    words, scales, biases = random_affine(np.random.default_rng(4), 4, 64, 256, 1024, BF16)
    lin = affine_torch.AffineLinear(words, scales, biases, 4, 64).cuda()
    x = torch.randn(3, 1024).bfloat16().cuda()
    calls = []
    real = affine_cuda.matmul
    monkeypatch.setattr(affine_cuda, "matmul", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(affine_triton, "_failed", [])
    monkeypatch.setenv("TQBUILD_AFFINE_KERNEL", "triton")
    want = lin(x)
    assert not calls
    monkeypatch.delenv("TQBUILD_AFFINE_KERNEL")
    got = lin(x)
    assert calls and ((got.double() - want.double()).abs().max()
                      / want.double().abs().max()).item() < 2e-2
