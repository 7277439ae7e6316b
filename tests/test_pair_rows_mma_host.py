"""runtime/pair_gemv.cu's `pair_rows_mma` (the rows kernel on the tensor cores, M ≤ 8) run
on the host in the SIMT emulator (its mma.m16n8k16 as the PTX ISA lays out the fragments),
against a float64 reference of the same arithmetic: the table's entries and x rounded to the
kernel's halves (bf16, or fp16 for fp16 x), float32 sums. The same kernel runs on the GPU in
tests/test_pair_cuda.py."""

from __future__ import annotations

import numpy as np
import pytest
from test_pair_gemv_host import CASES, _case, _exe, _round_to, rows_ref, run

X_BF16, X_F16, X_F32 = 1, 2, 3  # the harness's x dtypes for pair_rows_mma (float32: to bf16)


@pytest.fixture(scope="module")
def harnesses(tmp_path_factory) -> dict:
    return {}


def mma_ref(x, w16, scales, xdt: int) -> np.ndarray:
    """[M, rows] in the table's int16 units: x and the entries (· 2^-13) in the kernel's
    halves (fp16 where x is fp16, else bf16), exact products, float64 sums."""
    half = 2 if xdt == X_F16 else 1
    wh = _round_to(w16 / 8192, half) * 8192
    return (_round_to(x, half) @ wh.T) * scales.astype(np.float64)[None, :]


@pytest.mark.parametrize("kl,pp", [*((kl, pp) for kl in CASES for pp in (1, 4)), (CASES[1], 2)])
@pytest.mark.parametrize("M,rows,n,T,blocks,xdt", [
    (3, 37, 512, 256, 3, X_BF16),   # a last tile partly filled; warps sharing each tile
    (8, 37, 512, 256, 3, X_F16),
    (1, 640, 128, 64, 1, X_F32),    # 40 tiles of one item on 16 warps: tiles taken whole
    (5, 300, 192, 64, 2, X_BF16)])  # 6 periods a row: a tile's second item half empty
def test_rows_mma_equals_the_reference(harnesses, tmp_path_factory, tmp_path, kl, M, rows, n, T,
                                       blocks, xdt, pp):
    """Every item shape: a lane's one period of a row, or a run of 2 or 4 adjacent ones (their
    words in 8- or 16-byte loads where the run's length allows; the run's next word across a
    block's end; a run of 4 at T = 64 would span two blocks: the launcher refuses it)."""
    if T < 32 * pp:
        pytest.skip("tq_pair_rows_mma refuses a run of periods over two blocks")
    k, L = kl
    exe = _exe(harnesses, tmp_path_factory, k, L)
    words, scales, x, w16 = _case(k, L, rows, n, T, M, seed=k * 13 + M + rows + xdt)
    ref = mma_ref(x, w16, scales, xdt)
    got = run(exe, tmp_path, k, 1, words, scales, x, T, wpr=pp, blocks=blocks, half=xdt)
    assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max()


@pytest.mark.parametrize("pp", [1, 2, 4])
def test_rows_mma_x_rows_below_and_above_the_table(harnesses, tmp_path_factory, tmp_path, pp):
    """8 rows of 8192 inputs: 3 in the shared memory below the table, 5 after it, staged in
    16 trips of 512 threads; each tile's 64 / pp items on 16 warps."""
    k, L, rows, n, T, M = 3, 12, 20, 8192, 256, 8
    exe = _exe(harnesses, tmp_path_factory, k, L)
    words, scales, x, w16 = _case(k, L, rows, n, T, M, seed=81)
    ref = mma_ref(x, w16, scales, X_BF16)
    got = run(exe, tmp_path, k, 1, words, scales, x, T, wpr=pp, blocks=1, half=X_BF16)
    assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max()


@pytest.mark.parametrize("xdt", [X_F32, X_F16])
def test_rows_mma_is_closer_to_the_exact_product_than_int8(harnesses, tmp_path_factory, tmp_path,
                                                           xdt):
    """Against the exact product of the decoded weights and float32 x (one input far out of
    its group): within 2^-8 of the largest output, closer than the int8 rows kernel."""
    k, L, rows, n, T, M = 3, 12, 37, 512, 256, 4
    exe = _exe(harnesses, tmp_path_factory, k, L)
    words, scales, x, w16 = _case(k, L, rows, n, T, M, seed=5 + xdt)
    x[1, 5] = 40.0
    if xdt == X_F16:
        x = x.astype(np.float16).astype(np.float32)
    exact = (x.astype(np.float64) @ w16.T) * scales.astype(np.float64)[None, :]
    mma = run(exe, tmp_path, k, 1, words, scales, x, T, blocks=3, half=xdt)
    int8 = run(exe, tmp_path, k, 1, words, scales, x, T, rb=1, blocks=3)
    assert np.abs(int8 - rows_ref(x, w16, scales)).max() <= 1e-5 * np.abs(exact).max()
    top = np.abs(exact).max(axis=1)
    err_mma = np.abs(mma - exact).max(axis=1) / top
    err_int8 = np.abs(int8 - exact).max(axis=1) / top
    assert (err_mma <= 2**-8).all(), err_mma
    assert (err_mma < err_int8).all(), (err_mma, err_int8)


@pytest.mark.parametrize("odt", [1, 2])
def test_rows_mma_keeps_rows_apart_and_rounds_outputs_once(harnesses, tmp_path_factory,
                                                           tmp_path, odt):
    """A NaN input makes its own row's outputs NaN, an all-zero row gives zeros, the other
    row its products; bf16 / f16 outputs are the float32 outputs rounded once."""
    k, L, rows, n, T = 3, 12, 37, 512, 256
    exe = _exe(harnesses, tmp_path_factory, k, L)
    words, scales, x, w16 = _case(k, L, rows, n, T, 3, seed=17)
    x[0, 7] = np.nan
    x[1] = 0.0
    got = run(exe, tmp_path, k, 1, words, scales, x, T, wpr=2, blocks=3, half=X_BF16)
    assert np.isnan(got[0]).all()
    assert np.array_equal(got[1], np.zeros(rows))
    ref = mma_ref(x[2:], w16, scales, X_BF16)[0]
    assert np.abs(got[2] - ref).max() <= 1e-5 * np.abs(ref).max()
    x = x / 16  # (exact) outputs within fp16's range
    f32 = run(exe, tmp_path, k, 1, words, scales, x, T, wpr=2, blocks=3, half=X_BF16)
    half = run(exe, tmp_path, k, 1, words, scales, x, T, wpr=2, blocks=3, half=X_BF16,
               odt=odt)
    assert np.isfinite(half[1:]).all() and np.array_equal(half[1:], _round_to(f32[1:], odt))
