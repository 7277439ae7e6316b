"""The Triton decode-matmul of packed MLX affine weights (runtime/affine_triton.py)
against the unpacked values on fresh random tensors: in Triton's interpreter on CPU
where Triton is installed, on the GPU where there is one; and its routing."""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest
import torch
from interpreter import run_cases

from tqbuild.formats import mlx_affine as ma
from tqbuild.runtime import affine_torch, affine_triton, gpu_info

CUDA = torch.cuda.is_available()
# (bits, group size, out, in, M, x dtype, scale dtype, splits)
CASES = [(4, 64, 96, 256, 1, torch.float32, torch.float16, 1),
         (4, 64, 130, 512, 4, torch.float32, torch.bfloat16, 2),
         (3, 32, 70, 192, 3, torch.bfloat16, torch.bfloat16, 1),
         (8, 128, 64, 384, 8, torch.float16, torch.float32, 3),
         (2, 64, 33, 576, 2, torch.float32, torch.bfloat16, 9),
         (5, 32, 40, 160, 5, torch.float32, torch.float16, 5),
         (6, 64, 17, 64, 1, torch.bfloat16, torch.float16, 1),
         (4, 32, 65, 96, 7, torch.float16, torch.float16, 3),
         (4, 256, 48, 512, 2, torch.float32, torch.float16, 2),  # a group spans tiles
         (8, 96, 24, 192, 1, torch.float32, torch.float32, 3),  # groups across tile edges
         (1, 32, 20, 128, 2, torch.float32, torch.float16, 1),
         (3, 32, 30, 256, 2, torch.float32, torch.float16, 2),  # M ≤ 2, straddling widths
         (4, 36, 10, 288, 1, torch.float32, torch.float16, 1)]  # groups splitting a word
# relative to the largest output: float32 sums; 16-bit outputs (the interpreter
# also rounds float32 -> bfloat16 by truncation, not to nearest)
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


def random_affine(rng, bits, gs, n_out, n_in, sdt):
    q = rng.integers(0, 1 << bits, (n_out, n_in))
    words = torch.from_numpy(ma.pack(q, bits).view(np.int32))
    scales = torch.from_numpy(rng.standard_normal((n_out, n_in // gs)).astype(np.float32) * 0.01)
    biases = torch.from_numpy(rng.standard_normal((n_out, n_in // gs)).astype(np.float32) * 0.01)
    return words, scales.to(sdt), biases.to(sdt)


def _kernel_cases(device: str) -> None:
    rng = np.random.default_rng(5)
    for bits, gs, n_out, n_in, M, dt, sdt, splits in CASES:
        words, scales, biases = (t.to(device) for t in random_affine(rng, bits, gs, n_out, n_in,
                                                                     sdt))
        x = torch.from_numpy(rng.standard_normal((M, n_in)).astype(np.float32)).to(dt).to(device)
        assert affine_triton.serves(x, bits, n_in)
        for s in (1, splits):
            y = affine_triton.matmul(x, words, scales, biases, bits, gs, n_out, splits=s)
            assert y is not None and y.dtype == dt and y.shape == (M, n_out), affine_triton._failed
            w = affine_torch.affine_values(words, scales, biases, bits, gs).to(dt)
            want = x.double() @ w.double().T
            err = ((y.double() - want).abs().max() / want.abs().max()).item()
            assert err < TOL[dt], (bits, gs, n_out, n_in, M, dt, sdt, s, err)


@pytest.mark.skipif(affine_triton.triton is None, reason="Triton is not installed")
def test_affine_kernel_in_the_interpreter():
    """Every bit width 2–8 (3, 5, 6 straddle words), partial row tiles, M = 1..8,
    three x dtypes, three scale dtypes, input splits."""
    run_cases("test_affine_kernel", timeout=600)


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_affine_kernel_on_cuda():
    _kernel_cases("cuda")


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("m", [1, 4, 9])
def test_cuda_affine_linear_takes_the_kernel_up_to_max_m(m, monkeypatch):
    """AffineLinear on CUDA: the kernel up to MAX_M rows, the unpacked values above;
    both equal the module's CPU output within bf16 rounding, with the bias added."""
    rng = np.random.default_rng(m)
    words, scales, biases = random_affine(rng, 4, 64, 192, 512, torch.bfloat16)
    bias = torch.randn(192).bfloat16()
    lin = affine_torch.AffineLinear(words, scales, biases, 4, 64, bias)
    x = torch.randn(2, m, 512).bfloat16()
    values = affine_torch.affine_values(words, scales, biases, 4, 64)
    want = x.double() @ values.double().T + bias.double()
    calls = []
    real = affine_triton.matmul
    monkeypatch.setattr(affine_triton, "matmul", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setenv("TQBUILD_AFFINE_KERNEL", "triton")  # not the CUDA kernel (its own test)
    got = lin.cuda()(x.cuda()).cpu().double()
    assert got.shape == (2, m, 192)
    assert ((got - want).abs().max() / want.abs().max()).item() < 1e-2
    assert bool(calls) == (2 * m <= affine_triton.MAX_M)


def test_affine_kernel_serves_only_what_it_handles(monkeypatch):
    x = torch.zeros(1, 256)
    if affine_triton.triton is None:
        assert not affine_triton.serves(x, 4, 256)
        return
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # a CPU tensor counts as the device
    assert affine_triton.serves(x, 4, 256)
    assert not affine_triton.serves(torch.zeros(9, 256), 4, 256)  # M > MAX_M
    assert not affine_triton.serves(torch.zeros(1, 48), 4, 48)  # not whole 32-input tiles
    assert not affine_triton.serves(x, 9, 256)
    assert not affine_triton.serves(x.to(torch.int32), 4, 256)
    monkeypatch.setenv("TQBUILD_AFFINE_KERNEL", "0")
    assert not affine_triton.serves(x, 4, 256)
    monkeypatch.delenv("TQBUILD_AFFINE_KERNEL")
    monkeypatch.delenv("TRITON_INTERPRET")
    assert not affine_triton.serves(x, 4, 256) or CUDA  # CPU tensors: never without it


def test_affine_kernel_plan_fills_the_gpu(monkeypatch):
    """M ≤ 2: row tiles as wide as still give every SM a program; M > 2: 64 rows;
    inputs split (whole tiles, a divisor) where half the SMs would idle; one
    program a row tile on CPU."""
    monkeypatch.setattr(gpu_info, "sm_count", lambda device: 132)
    plan = functools.partial(affine_triton.plan, device=torch.device("cuda"))
    assert plan(14336, 4096, 4) == (64, 128, 1)  # 224 programs
    assert plan(14336, 4096, 1) == (64, 64, 1)  # M ≤ 2: 4096 weights a tile
    assert plan(4096, 4096, 1) == (16, 128, 1)  # 256
    assert plan(4096, 4096, 4) == (64, 128, 2)  # M > 2: 64 rows; 64 -> 128 programs
    assert plan(1024, 4096, 8) == (64, 128, 8)  # 16 -> 128
    assert plan(128, 576, 2) == (16, 64, 9)  # 8 programs, 9 tiles of 64
    assert affine_triton.plan(4096, 4096, 1, torch.device("cpu")) == (16, 128, 1)


def test_affine_matmul_falls_back_when_the_kernel_fails(monkeypatch):
    """A kernel that fails to build or run warns once and the values are unpacked."""
    rng = np.random.default_rng(1)
    words, scales, biases = random_affine(rng, 4, 64, 40, 128, torch.float16)
    x = torch.from_numpy(rng.standard_normal((2, 128)).astype(np.float32))
    want = x @ affine_torch.affine_values(words, scales, biases, 4, 64).t()

    class Broken:
        def __getitem__(self, grid):
            def launch(*a, **k):
                raise RuntimeError("no compiler")
            return launch

    monkeypatch.setattr(affine_triton, "_failed", [])
    for kernel in ("_affine_vec", "_affine_mm"):  # whichever M = 2 takes (absent sans Triton)
        monkeypatch.setattr(affine_triton, kernel, Broken(), raising=False)
    monkeypatch.setattr(affine_triton, "triton", affine_triton.triton or _FakeTriton())
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.warns(UserWarning, match="unpacking the weight"):
        got = affine_torch.affine_matmul_impl(x, words, scales, biases, 4, 64, 40)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6)
    assert affine_triton._failed and not affine_triton.serves(x, 4, 128)
    got = affine_torch.affine_matmul_impl(x, words, scales, biases, 4, 64, 40)  # no warning
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6)


class _FakeTriton:
    """Enough of `triton` for the launch arithmetic where Triton is not installed."""

    @staticmethod
    def cdiv(a: int, b: int) -> int:
        return -(-a // b)


def test_affine_op_is_one_node_under_torch_compile():
    """The custom op AffineLinear calls on CUDA traces as one opaque node (fullgraph)
    and computes the unpacked values' product (here on CPU: the unpacking path)."""
    rng = np.random.default_rng(2)
    words, scales, biases = random_affine(rng, 4, 64, 48, 128, torch.bfloat16)
    x = torch.from_numpy(rng.standard_normal((3, 128)).astype(np.float32))

    def f(x):
        return torch.ops.tqbuild.affine_matmul(x, words, scales, biases, 4, 64, 48)

    torch._dynamo.reset()
    seen = []

    def backend(gm, inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes)
        return gm.forward

    got = torch.compile(f, backend=backend, fullgraph=True)(x)
    want = x @ affine_torch.affine_values(words, scales, biases, 4, 64).t()
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6)
    assert sum("tqbuild.affine_matmul" in t for t in seen) == 1, seen


@pytest.mark.skipif(affine_triton.triton is None, reason="Triton is not installed")
@pytest.mark.parametrize("m", [1, 2, 4, 8])
def test_affine_kernel_compiles_for_sm90(m, monkeypatch):
    """The kernels `matmul` launches build for the H100/H200 (sm_90) at the planner's
    tiles for Llama-3-8B's shapes (Triton's own ptxas; no GPU needed)."""
    if os.environ.get("TRITON_INTERPRET", "0") in ("1", "true", "True"):
        pytest.skip("the interpreter compiles nothing")
    monkeypatch.setattr(gpu_info, "sm_count", lambda device: 132)
    for n, k, bits, gs, xd, sd in ((4096, 4096, 4, 64, "bf16", "bf16"),
                                   (1024, 4096, 4, 64, "bf16", "bf16"),
                                   (14336, 4096, 8, 128, "fp16", "fp16"),
                                   (4096, 14336, 3, 64, "bf16", "fp32")):
        bn, bk, splits = affine_triton.plan(n, k, m, torch.device("cuda"))
        c = affine_triton.compile_ahead(xd, sd, m, bits, gs, bn, bk, k // splits)
        assert c.asm["cubin"], (n, k, bits, m)
