"""runtime/affine_gemv.cu's tensor-core decode matmul, run on the host in the SIMT
emulator of tests/simt (g++ -std=c++20; skipped without it). The same kernel runs on
the GPU in tests/test_affine_kernel.py's CUDA cases."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import simt_harness
import torch

from tqbuild.formats.mlx_affine import unpack

DTYPES = {0: torch.bfloat16, 1: torch.float16}


@pytest.fixture(scope="module", params=[(), ("TQ_AFF_WIDE_TILES=1",)], ids=["deep", "wide"])
def harness(tmp_path_factory, request) -> Path:
    """The default build (these shapes' few row tiles take the deep launch: 4 chunks in
    flight a warp) and one where every launch is the wide one (2 chunks a warp, 4
    blocks an SM: the launch of 128 tiles and more)."""
    return simt_harness.build("affine_host", "tqbuild/runtime", tmp_path_factory.mktemp("simt"),
                              request.param)


def _bits16(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy().view(np.uint16)


def run_kernel(exe: Path, tmp: Path, x: torch.Tensor, words: torch.Tensor, scales, biases,
               bits: int, gs: int, splits: int = 1) -> torch.Tensor:
    """The kernel's output as float64 [M, N] (split partial sums added in order)."""
    dt = next(k for k, v in DTYPES.items() if v == x.dtype)
    M, K = x.shape
    N = words.shape[0]
    inp, out = tmp / "in.bin", tmp / "out.bin"
    with open(inp, "wb") as f:
        np.array([bits, dt, M, N, K, gs, splits], np.int32).tofile(f)
        _bits16(x).tofile(f)
        words.numpy().view(np.uint32).tofile(f)
        _bits16(scales).tofile(f)
        _bits16(biases).tofile(f)
    simt_harness.run(exe, inp, out)
    if splits > 1:
        y = np.fromfile(out, np.float32).reshape(splits, M, N).astype(np.float64).sum(0)
        return torch.from_numpy(y)
    raw = np.fromfile(out, np.uint16).astype(np.int16)
    return torch.from_numpy(raw).view(x.dtype).reshape(M, N).double()


def values(words, scales, biases, bits: int, gs: int, dtype) -> torch.Tensor:
    """q·scale + bias exact (float64), rounded once to dtype — what the kernel feeds the MMA."""
    q = unpack(words.numpy().view(np.uint32), bits).astype(np.float64)
    s = np.repeat(scales.double().numpy(), gs, axis=1)
    b = np.repeat(biases.double().numpy(), gs, axis=1)
    return torch.from_numpy(q * s + b).to(dtype)


def case(N: int, K: int, M: int, bits: int, gs: int, dtype, seed: int):
    g = torch.Generator().manual_seed(seed)
    words = torch.randint(-2**31, 2**31 - 1, (N, K * bits // 32), dtype=torch.int32, generator=g)
    scales = (torch.rand(N, K // gs, generator=g) * 0.05 + 0.01).to(dtype)
    biases = (-(2 ** (bits - 1)) * scales.double() + torch.randn(N, K // gs, generator=g,
                                                                 dtype=torch.float64) * 0.01)
    x = torch.randn(M, K, generator=g).to(dtype)
    return x, words, scales, biases.to(dtype)


@pytest.mark.parametrize("bits,gs,dt,M,N,K,splits", [
    (4, 64, 0, 1, 40, 5120, 1),  # partial row tile; more chunks than a block's warps load at once
    (4, 32, 1, 3, 16, 384, 1),
    (4, 128, 0, 8, 24, 1024, 3),  # split inputs (float32 partial sums), uneven last split
    (2, 64, 0, 2, 16, 1024, 1),
    (2, 128, 1, 8, 20, 512, 2),
    (8, 64, 0, 1, 40, 2048, 1),  # bf16: bit 7 of each field through the addend
    (8, 32, 1, 4, 16, 512, 2),
    (8, 128, 0, 8, 24, 1024, 3),
])
def test_kernel_matches_the_unpacked_values(harness, tmp_path, bits, gs, dt, M, N, K, splits):
    dtype = DTYPES[dt]
    x, words, scales, biases = case(N, K, M, bits, gs, dtype, seed=bits * 100 + M)
    y = run_kernel(harness, tmp_path, x, words, scales, biases, bits, gs, splits)
    ref = x.double() @ values(words, scales, biases, bits, gs, dtype).double().T
    scale = x.double().abs() @ values(words, scales, biases, bits, gs, dtype).double().abs().T
    ulp = 2.0 ** (-8 if dtype == torch.bfloat16 else -11)
    err = ((y - ref).abs() / (scale + 1e-30)).max().item()
    # float32 sums, then (one split) rounding to x's dtype: within one unit of the result
    assert err <= (ulp if splits == 1 else 1e-5), err


@pytest.mark.parametrize("bits,dt", [(4, 0), (4, 1), (2, 0), (8, 0), (8, 1)])
def test_one_hot_rows_read_back_each_value_exactly(harness, tmp_path, bits, dt):
    """x rows e_k pick column k of the values: every (row, k) lands where the MLX layout
    puts it — fields of a word, words of a chunk, chunks of a split, groups."""
    dtype, N, K, gs = DTYPES[dt], 24, 1024, 64
    _, words, scales, biases = case(N, K, 1, bits, gs, dtype, seed=7 + bits + dt)
    v = values(words, scales, biases, bits, gs, dtype)
    rng = np.random.default_rng(bits + dt)
    for ks in (np.arange(8), rng.choice(K, 8, replace=False), K - 1 - np.arange(8) * 37):
        x = torch.zeros(8, K, dtype=dtype)
        x[torch.arange(8), torch.from_numpy(ks)] = 1
        y = run_kernel(harness, tmp_path, x, words, scales, biases, bits, gs)
        assert torch.equal(y, v[:, ks].T.double()), ks
