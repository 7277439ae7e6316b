"""runtime/pair_gemv.cu (the pair code's decode-matvec kernels) run on the host in the
SIMT emulator of tests/simt, against a float64 reference of the same int8 arithmetic on
fresh random words and inputs; the same kernels run on the GPU in tests/test_pair_cuda.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import simt_harness

from tqbuild.formats import trellis as fmt
from tqbuild.kernels.pair_table import ENTRIES
from tqbuild.kernels.trellis_codes import values_of

CASES = [(2, 16), (3, 12), (4, 16)]  # (k, L) of the emulator builds


@pytest.fixture(scope="module")
def harnesses(tmp_path_factory) -> dict:
    return {}


def _exe(harnesses, tmp_path_factory, k: int, L: int) -> Path:
    if (k, L) not in harnesses:
        harnesses[k, L] = simt_harness.build("pair_host", "tqbuild/runtime",
                                             tmp_path_factory.mktemp(f"pair{k}{L}"),
                                             (f"TQ_K={k}", f"TQ_L={L}"))
    return harnesses[k, L]


def quantize(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The kernels' int8 groups of 32 (act_int8): q, and a float32 scale a group."""
    g = v.reshape(*v.shape[:-1], -1, 32).astype(np.float32)
    a = np.abs(g).max(axis=-1, keepdims=True)
    inv = np.where(a > 0, np.float32(127) / np.where(a > 0, a, 1), 0).astype(np.float32)
    q = np.clip(np.rint((g * inv).astype(np.float32)), -127, 127)
    return q.astype(np.float64), (a[..., 0] / np.float32(127)).astype(np.float64)


def run(exe: Path, tmp: Path, k: int, axis: int, words, scales, x, T: int, rb=1, wpr=1,
        blocks=3, nth=512, gsw=12, odt=0, half=0):
    M = x.shape[0]
    rows, nw = words.shape
    n = nw * 32 // k
    inp, out = tmp / "in.bin", tmp / "out.bin"
    with open(inp, "wb") as f:
        np.array([axis, M, rows, n, T, rb, wpr, blocks, nth, gsw, odt, half], np.int32).tofile(f)
        words.astype(np.uint32).tofile(f)
        scales.astype(np.float16).view(np.uint16).tofile(f)
        np.asarray(ENTRIES, dtype=np.uint32).tofile(f)
        x.astype(np.float32).tofile(f)
    simt_harness.run(exe, inp, out)
    raw = np.fromfile(out, [np.float32, np.uint16, np.float16][odt])
    if odt == 1:  # bf16 bits
        raw = (raw.astype(np.uint32) << 16).view(np.float32)
    return raw.reshape(M, -1).astype(np.float64)


def rows_ref(x, w16, scales) -> np.ndarray:
    """The rows kernel's exact result on int8 x: [M, rows] (the table's int16 units)."""
    q, gs = quantize(x)  # [M, n/32, 32], [M, n/32]
    ref = np.einsum("mgj,rgj->mrg", q, w16.reshape(w16.shape[0], -1, 32))
    return (ref * gs[:, None, :]).sum(-1) * scales.astype(np.float64)[None, :]


def _case(k, L, rows, n, T, M, seed, inputs=None):
    """Fresh stored rows of n coded values: words, fp16 row scales, x [M, inputs (default n)]
    float32, and the decoded weights [rows, n] in int16 units."""
    g = np.random.default_rng(seed)
    words = g.integers(0, 2**32, (rows, n * k // 32), dtype=np.uint64).astype(np.uint32)
    scales = (g.random(rows) + 0.5).astype(np.float16)
    x = g.standard_normal((M, inputs or n)).astype(np.float32)
    w16 = values_of(fmt.states_of(words, k, T, L), "pair", L).astype(np.float64) * 8192
    assert np.array_equal(w16, np.round(w16))
    return words, scales, x, w16


def cols_case(k, L, n_in, n_out, T, M, seed):
    """Stored rows (one an input) of n_out outputs: x [M, n_in], the weights [n_in, n_out]."""
    return _case(k, L, n_in, n_out, T, M, seed, inputs=n_in)


@pytest.mark.parametrize("kl", CASES)
@pytest.mark.parametrize("M,rb,wpr,nth,gsw", [(1, 2, 1, 512, 12), (1, 2, 2, 512, 8),
                                              (3, 1, 1, 512, 12), (2, 2, 1, 512, 8),
                                              (1, 2, 1, 1024, 12), (4, 1, 2, 512, 12)])
def test_rows_kernel_equals_the_reference(harnesses, tmp_path_factory, tmp_path, kl, M, rb, wpr,
                                          nth, gsw):
    """37 rows (a last row group partly filled), 3 blocks of 16 or 32 warps: warps without
    rows, row groups taken in a second round, both group layouts in shared memory."""
    k, L = kl
    exe = _exe(harnesses, tmp_path_factory, k, L)
    rows, n, T = 37, 512, 256
    words, scales, x, w16 = _case(k, L, rows, n, T, M, seed=k * 100 + M * 10 + rb + wpr + gsw)
    ref = rows_ref(x, w16, scales)
    got = run(exe, tmp_path, k, 1, words, scales, x, T, rb, wpr, nth=nth, gsw=gsw)
    assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max()


@pytest.mark.parametrize("M,n,rb", [(3, 4096, 1), (4, 8192, 2), (8, 2048, 1)])
def test_rows_quantize_x_over_several_trips(harnesses, tmp_path_factory, tmp_path, M, n, rb):
    """x of M × n inputs over 512 threads in 3, 8 and 4 trips of 8 inputs a thread (their
    loads four trips at a time: a batch cut short, two whole batches, one)."""
    k, L = 3, 12
    exe = _exe(harnesses, tmp_path_factory, k, L)
    rows, T = 9, 256
    words, scales, x, w16 = _case(k, L, rows, n, T, M, seed=M * 31 + n)
    ref = rows_ref(x, w16, scales)
    got = run(exe, tmp_path, k, 1, words, scales, x, T, rb, 1, blocks=2, nth=512, gsw=8)
    assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max()


def _round_to(ref: np.ndarray, odt: int) -> np.ndarray:
    """The reference as the kernel stores it: float32, then bf16 / f16 (nearest even)."""
    r = ref.astype(np.float32)
    if odt == 2:
        return r.astype(np.float16).astype(np.float64)
    if odt == 1:
        u = r.view(np.uint32).astype(np.uint64)
        u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
        return u.astype(np.uint32).view(np.float32).astype(np.float64)
    return r.astype(np.float64)


@pytest.mark.parametrize("odt", [1, 2])
@pytest.mark.parametrize("axis", [0, 1])
def test_half_outputs_are_the_float_outputs_rounded(harnesses, tmp_path_factory, tmp_path, odt,
                                                    axis):
    """bf16 / f16 outputs written by the kernels themselves: the float32 result rounded
    once (no cast launch after them)."""
    k, L = 3, 12
    exe = _exe(harnesses, tmp_path_factory, k, L)
    rows, n, T = (96, 1536, 256) if axis == 0 else (37, 512, 256)
    words, scales, x, _ = _case(k, L, rows, n, T, 2 if axis == 0 else 1, seed=odt + 5 * axis)
    if axis == 0:
        x = x[:, :rows]
    scales = (scales.astype(np.float32) * 2**-12).astype(np.float16)  # f16's range (× 1 unit)
    f32 = run(exe, tmp_path, k, axis, words, scales, x, T, 2 if axis else 1, 1, blocks=3)
    half = run(exe, tmp_path, k, axis, words, scales, x, T, 2 if axis else 1, 1, blocks=3,
               odt=odt)
    assert np.isfinite(half).all() and np.array_equal(half, _round_to(f32, odt))


@pytest.mark.parametrize("kl", CASES)
@pytest.mark.parametrize("M,rb,nth", [(1, 4, 512), (2, 2, 512), (4, 2, 512), (1, 2, 1024)])
def test_rows_warps_walk_chunks_then_single_rows(harnesses, tmp_path_factory, tmp_path, kl, M,
                                                 rb, nth):
    """Warps owning 9–10 rows (chunks of RB rows, then the rest one at a time), 48
    periods a row (a lane's second period idle on half the lanes): the word slots (three
    at 512 threads, two at 1024) run across the ends of rows."""
    k, L = kl
    exe = _exe(harnesses, tmp_path_factory, k, L)
    rows, n, T = 301 if nth == 512 else 617, 1536, 256
    words, scales, x, w16 = _case(k, L, rows, n, T, M, seed=k * 7 + M + rb)
    ref = rows_ref(x, w16, scales)
    got = run(exe, tmp_path, k, 1, words, scales, x, T, rb, 1, blocks=2, nth=nth)
    assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max()


@pytest.mark.parametrize("kl", CASES)
@pytest.mark.parametrize("n_in,n_out,T,blocks,gsw,sub", [
    (96, 1536, 256, 5, 12, 1), (64, 512, 64, 3, 8, 1), (160, 1024, 256, 2, 12, 1),
    (96, 1536, 256, 5, 12, 2), (160, 1024, 256, 2, 8, 2), (32, 2048, 256, 72, 12, 1)])
def test_cols_kernel_equals_the_reference(harnesses, tmp_path_factory, tmp_path, kl, n_in,
                                          n_out, T, blocks, gsw, sub):
    """Stored row i = input i; tiles of 32 periods (the last partly filled at 1536 outputs:
    48 periods), blocks whose unit ranges cross the tile boundary and start inside a group
    of inputs; warps walking more inputs than their words ring holds (160 inputs, 2 blocks);
    walkers of one warp or of two (each half of the period's steps); more blocks than
    (tile, input) units (empty blocks between the ones the sum reads)."""
    k, L = kl
    exe = _exe(harnesses, tmp_path_factory, k, L)
    words, scales, x, w16 = cols_case(k, L, n_in, n_out, T, 2, seed=n_in + k)
    xs = (x * scales.astype(np.float32)[None, :]).astype(np.float32)
    q, gs = quantize(xs)  # [2, n_in/32, 32]
    ref = np.einsum("mgj,gjo->mgo", q, w16.reshape(-1, 32, n_out))
    ref = (ref * gs[:, :, None]).sum(1)
    got = run(exe, tmp_path, k, 0, words, scales, x, T, rb=sub, blocks=blocks, gsw=gsw)
    assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max()


@pytest.mark.parametrize("kl", CASES)
@pytest.mark.parametrize("n_in,n_out,T,blocks,sub", [
    (96, 1536, 256, 5, 1), (64, 512, 64, 3, 1), (160, 1024, 256, 2, 2), (32, 2048, 256, 72, 1)])
def test_cols_kernel_in_fp16_is_within_the_int8_kernels_error(harnesses, tmp_path_factory,
                                                              tmp_path, kl, n_in, n_out, T,
                                                              blocks, sub):
    """pair_cols in packed fp16 (its `half` instances): each step's pair of fp16 entries times
    the input's fp16 value (x / its group's largest |x|) in one fma, summed in fp16 over a
    group of 32 inputs, then in float32. Against the exact product of the decoded weights and
    the inputs: within 2^-9 of the largest output, and closer than the int8 kernel's
    result on the same case."""
    k, L = kl
    words, scales, x, w16 = cols_case(k, L, n_in, n_out, T, 2, seed=n_in + k + 7)
    x[1, 5] = 40.0  # one input far out of its group (the int8 kernel's hard case)
    xs = (x * scales.astype(np.float32)[None, :]).astype(np.float64)
    exact = xs @ w16
    exe = _exe(harnesses, tmp_path_factory, k, L)
    half = run(exe, tmp_path, k, 0, words, scales, x, T, rb=sub, blocks=blocks, gsw=16, half=1)
    int8 = run(exe, tmp_path, k, 0, words, scales, x, T, rb=sub, blocks=blocks, gsw=12)
    top = np.abs(exact).max()
    err_half, err_int8 = np.abs(half - exact).max() / top, np.abs(int8 - exact).max() / top
    assert err_half <= 2**-9, err_half
    assert err_half < err_int8, (err_half, err_int8)


@pytest.mark.parametrize("kl,M,n_in,n_out,T,blocks,sub", [
    *((kl, 4, 96, 1536, 256, 5, 1) for kl in CASES),  # every k once, the other shapes at k = 3
    *((CASES[1], *c) for c in [(2, 64, 512, 64, 3, 1), (3, 160, 1024, 256, 2, 2),
                               (6, 32, 2048, 256, 72, 1), (4, 160, 1024, 256, 2, 1)])])
def test_cols_rows_share_one_decode_within_the_fp16_error(harnesses, tmp_path_factory, tmp_path,
                                                          kl, M, n_in, n_out, T, blocks, sub):
    """pair_cols at M > 1 in packed fp16: one decode for up to 4 rows (6 rows: 4, then 2),
    each row's inputs at one scale over the block, summed in fp16 over a walker's whole
    range. Each row against the exact product: within 2^-9 of its largest output, closer
    than the int8 walk (a row at a time), one row with an input far out of its group."""
    k, L = kl
    words, scales, x, w16 = cols_case(k, L, n_in, n_out, T, M, seed=n_in + k + M)
    x[1, 5] = 40.0
    exact = (x * scales.astype(np.float32)[None, :]).astype(np.float64) @ w16
    exe = _exe(harnesses, tmp_path_factory, k, L)
    half = run(exe, tmp_path, k, 0, words, scales, x, T, rb=sub, blocks=blocks, gsw=16, half=1)
    int8 = run(exe, tmp_path, k, 0, words, scales, x, T, rb=sub, blocks=blocks, gsw=12)
    top = np.abs(exact).max(axis=1)
    err_half = np.abs(half - exact).max(axis=1) / top
    err_int8 = np.abs(int8 - exact).max(axis=1) / top
    assert (err_half <= 2**-9).all(), err_half
    assert (err_half < err_int8).all(), (err_half, err_int8)


def test_cols_rows_sharing_a_decode_keep_their_own_nan_and_zero(harnesses, tmp_path_factory,
                                                                tmp_path):
    """Rows walked together stay apart: a NaN input makes NaN outputs of its own row only
    (its block's scale), an all-zero row gives zeros, the others their products."""
    k, L, n_in, n_out, T = 3, 12, 96, 1536, 256
    words, scales, x, w16 = cols_case(k, L, n_in, n_out, T, 3, seed=3)
    x[0, 7] = np.nan
    x[1] = 0.0
    exact = (x[2] * scales.astype(np.float32)).astype(np.float64) @ w16
    exe = _exe(harnesses, tmp_path_factory, k, L)
    got = run(exe, tmp_path, k, 0, words, scales, x, T, rb=1, blocks=5, gsw=16, half=1)
    assert np.isnan(got[0]).any()
    assert np.array_equal(got[1], np.zeros(n_out))
    assert np.abs(got[2] - exact).max() <= 2**-9 * np.abs(exact).max()
