"""The pair trellis code (two weights a state, format version 3): its table, the
V = 2 tail-biting Viterbi against brute force, the per-weight states it packs to,
and its decode through the format reference and both runtimes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from tqbuild.formats import trellis as fmt
from tqbuild.kernels import trellis_codes as tcodes
from tqbuild.kernels import viterbi


def test_table_is_512_int16_pairs_of_unit_rms():
    e = tcodes.pair_entries()
    assert e.shape == (512, 2) and e.dtype == np.float32
    q = e * 8192
    assert np.array_equal(q, np.round(q)) and np.abs(q).max() <= 32767
    assert abs(float(np.sqrt((e.astype(np.float64) ** 2).mean())) - 1) < 0.01
    assert len({tuple(r) for r in e.tolist()}) == 512  # distinct points


@pytest.mark.parametrize("L", [12, 16])
def test_state_table_follows_the_hash(L):
    s = np.arange(2**L, dtype=np.uint64)
    e = (((s * 0x83DCD12D) & 0xFFFFFFFF) >> (L - 9)) & 511
    assert np.array_equal(tcodes.pair_table(L), tcodes.pair_entries()[e.astype(np.int64)])
    assert np.array_equal(np.bincount(e.astype(np.int64), minlength=512),
                          np.full(512, 2**L // 512))  # every entry equally often


def _path_cost(x: np.ndarray, steps: list[int], L: int) -> np.float32:
    """float32 cost of a step path, accumulated as the Viterbi does."""
    tab = tcodes.pair_table(L)
    c = np.float32(0)
    for u, s in enumerate(steps):
        d0 = np.float32(tab[s, 0] - x[u, 0]) ** 2
        d1 = np.float32(tab[s, 1] - x[u, 1]) ** 2
        d = np.float32(np.float32(d0) + np.float32(d1))
        c = d if u == 0 else np.float32(c + d)
    return c


@pytest.mark.parametrize("seed", range(3))
def test_pinned_pass_is_the_best_path_with_that_overlap(seed):
    """Brute force over every path of 3 steps at L = 12, K = 4 whose first state's
    top bits and last state's low bits equal the overlap."""
    L, K, P = 12, 4, 3
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, P, 2, generator=g)
    overlap = int(torch.randint(0, 2 ** (L - K), (1,), generator=g))
    tab = torch.from_numpy(tcodes.pair_entries().copy())
    idx = torch.from_numpy(tcodes.pair_index(np.arange(2**L, dtype=np.uint32), L))
    got = viterbi._pair_pass(x, tab, idx, L, K, torch.tensor([overlap]))[0].tolist()
    best, arg = None, None
    for lo, b1, b2 in itertools.product(range(2**K), repeat=3):
        s0 = (overlap << K) | lo
        s1 = ((s0 << K) | b1) & (2**L - 1)
        s2 = ((s1 << K) | b2) & (2**L - 1)
        if s2 & (2 ** (L - K) - 1) != overlap:
            continue
        c = _path_cost(x[0].numpy(), [s0, s1, s2], L)
        if best is None or c < best:
            best, arg = c, [s0, s1, s2]
    assert got == arg


@pytest.mark.parametrize("L,k", [(12, 2), (12, 3), (16, 2)])
def test_tailbiting_states_form_one_cycle_and_pack(L, k):
    T = 64
    g = torch.Generator().manual_seed(L + k)
    x = torch.randn(6, T, generator=g)
    st = viterbi.viterbi_tailbiting(x, L, k, "pair")
    assert st.shape == (6, T) and st.dtype == torch.int64
    # the per-weight states are the V = 1 reading of the bits they pack to
    words = fmt.pack(st.numpy(), k, T)
    assert np.array_equal(fmt.states_of(words, k, T, L), st.numpy())
    assert np.array_equal(fmt.pack_tensor(st, k, T), words)
    # consecutive step states (odd times) overlap in L − 2k bits, cyclically
    steps = st[:, 1::2]
    nxt = torch.roll(steps, -1, dims=1)
    assert bool(((steps & (2 ** (L - 2 * k) - 1)) == (nxt >> (2 * k))).all())


def test_mse_on_gaussian_data_is_that_of_the_study():
    """L = 12, k = 2 on 128 × 256 N(0, 1): near bench/pair_code_study.py's 0.0757
    (512 sequences) and far below plain 2-bit scalar quantization (0.118)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(128, 256, generator=g)
    st = viterbi.quantize_blocks(x, 12, 2, "pair")
    mse = float(((viterbi.reconstruct(st, 12, "pair") - x) ** 2).mean())
    assert 0.07 < mse < 0.081


def test_values_agree_in_numpy_and_torch():
    st = torch.randint(0, 2**16, (3, 32))
    a = tcodes.values_of(st.numpy(), "pair", 16)
    b = viterbi.values(st, "pair", 16).numpy()
    assert np.array_equal(a, b)
    assert np.array_equal(a[:, 0::2], tcodes.pair_table(16)[st.numpy()[:, 1::2], 0])
    assert np.array_equal(a[:, 1::2], tcodes.pair_table(16)[st.numpy()[:, 1::2], 1])


def test_byte_sum_tables_refuse_the_pair_code():
    with pytest.raises(ValueError, match="two values a state"):
        tcodes.code_table("pair", 12)


@pytest.mark.parametrize("axis,interleave", [(1, False), (0, True)])
def test_format_and_torch_runtime_decode_the_same(axis, interleave):
    from tqbuild.runtime.trellis_torch import TrellisLinear

    k, T, L = 3, 64, 12
    g = torch.Generator().manual_seed(7)
    rows, cols = 8, 128
    st = viterbi.quantize_blocks(torch.randn(rows * cols // T, T, generator=g), L, k,
                                 "pair").reshape(rows, cols)
    scales = (torch.rand(rows, generator=g) + 0.5).half()
    words = fmt.pack(st.numpy(), k, T)
    ref = tcodes.values_of(st.numpy(), "pair", L) * scales.float().numpy()[:, None]
    stored = fmt.interleave(words, k, T) if interleave else words
    entry = {"bits": k, "group_size": T, "trellis": {"L": L, "code": "pair", "axis": axis,
                                                      "interleave": interleave, "version": 3}}
    te = fmt.TrellisEntry.from_config(entry)
    dense = te.decode(stored, scales.numpy())
    assert np.array_equal(dense, ref if axis == 1 else ref.T)
    mod = TrellisLinear(torch.from_numpy(stored.view(np.int32)), scales, entry)
    assert torch.equal(mod.weight_f32(), torch.from_numpy(dense))
    x = torch.randn(2, dense.shape[1], generator=g)
    assert torch.allclose(mod(x), x @ torch.from_numpy(dense).t(), rtol=1e-5, atol=1e-5)


def test_mlx_runtime_decodes_the_pair_code():
    mx = pytest.importorskip("mlx.core")
    from tqbuild.runtime import mlx_trellis

    k, T, L = 2, 64, 16
    g = torch.Generator().manual_seed(8)
    st = viterbi.quantize_blocks(torch.randn(4, T, generator=g), L, k, "pair").reshape(2, 2 * T)
    scales = (torch.rand(2, generator=g) + 0.5).half()
    words = fmt.pack(st.numpy(), k, T)
    te = fmt.TrellisEntry(k=k, T=T, L=L, code="pair", axis=1, interleave=False)
    got = np.array(mlx_trellis.decode(te, mx.array(words), mx.array(scales.numpy())))
    assert np.array_equal(got, te.decode(words, scales.numpy()))


def test_version_3_carries_the_pair_code():
    assert fmt.version_for("pair") == 3 and fmt.version_for("mul1") == 2
    with pytest.raises(ValueError, match="not part of format version 2"):
        fmt.TrellisEntry.from_config({"bits": 2, "group_size": 64, "trellis": {
            "L": 16, "code": "pair", "axis": 1, "interleave": False, "version": 2}})


def test_recipe_refuses_pair_where_a_step_does_not_fit():
    from pydantic import ValidationError

    from tqbuild.recipe import QuantSpec

    QuantSpec(method="ldlq", format="trellis", bits=3, trellis={"L": 12, "code": "pair"})
    with pytest.raises(ValidationError, match="k <= L/4"):
        QuantSpec(method="ldlq", format="trellis", bits=4, trellis={"L": 12, "code": "pair"})
    with pytest.raises(ValidationError, match="k <= L/4"):
        QuantSpec(method="ldlq", format="trellis", bits={"budget": 3, "choices": [2, 4]},
                  trellis={"L": 12, "code": "pair"})
