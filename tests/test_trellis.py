"""Trellis codes, the tail-biting Viterbi, the packed format and LDLQ, each
against a slow reference or the goldens."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_run import cli

from tqbuild.errors import BadInput
from tqbuild.formats import trellis as fmt
from tqbuild.formats.dequant import dequantize_module, module_entry
from tqbuild.kernels.trellis_codes import INST3_RMS, code_table
from tqbuild.kernels.viterbi import quantize_blocks, reconstruct, viterbi_tailbiting
from tqbuild.recipe import GuardParams, QuantSpec
from tqbuild.stages.guard import proxy_loss
from tqbuild.stages.quantize import quantize_tensor
from tqbuild.stages.trellis import (
    Geometry,
    ldlq_core,
    trellis_guarded,
    trellis_plain,
)

GOLDENS = Path(__file__).parents[2] / "shared" / "goldens" / "qtip" / "qtip_state_tables.npz"
CUDA = torch.cuda.is_available()


@pytest.mark.skipif(not GOLDENS.is_file(), reason="goldens not present")
@pytest.mark.parametrize("L", [12, 16])
def test_codes_reproduce_every_golden_state(L):
    z = np.load(GOLDENS)
    assert np.array_equal(code_table("1mad", L), z[f"1mad_L{L}"])
    # 3INST: QTIP's raw fp16 sum, divided by its RMS in float64, rounded to f32
    want = (z[f"3inst_L{L}"].astype(np.float64) / INST3_RMS).astype(np.float32)
    assert np.array_equal(code_table("3inst", L), want)


def test_mul1_values_and_unit_variance():
    # state 1 hashes to 0x83DCD12D, whose bytes sum to 605; state 0 to 0
    t = code_table("mul1", 16)
    assert t[0] == np.float32(-510 / 147.800537109375) and t[1] == np.float32(95 / 147.800537109375)
    assert np.array_equal(code_table("mul1", 12), t[:4096])
    assert abs(np.sqrt((t.astype(np.float64) ** 2).mean()) - 1) < 2e-3


def test_format_versions_carry_their_codes():
    """mul1 artifacts are version 2, pair 3; 1mad/3inst stay version 1 (older artifacts
    byte-identical); a reader rejects a code its version does not have."""
    def entry(code, version):
        return {"bits": 2, "group_size": 64,
                "trellis": {"L": 12, "code": code, "axis": 1, "interleave": False,
                            "version": version}}
    for code, v in (("1mad", 1), ("3inst", 1), ("mul1", 2), ("pair", 3)):
        e = fmt.TrellisEntry.from_config(entry(code, v))
        assert e.trellis_dict()["version"] == v
        assert fmt.TrellisEntry.from_config(e.config()) == e
    assert fmt.TrellisEntry.from_config(entry("1mad", 2)).code == "1mad"  # v2 reads v1 codes
    with pytest.raises(ValueError, match="not part of format version 1"):
        fmt.TrellisEntry.from_config(entry("mul1", 1))
    with pytest.raises(ValueError, match="not part of format version 2"):
        fmt.TrellisEntry.from_config(entry("pair", 2))
    with pytest.raises(ValueError, match="version 4 is not supported"):
        fmt.TrellisEntry.from_config(entry("1mad", 4))


def test_3inst_is_unit_variance():
    assert abs(np.sqrt((code_table("3inst", 16).astype(np.float64) ** 2).mean()) - 1) < 1e-6


# ---- Viterbi against a literal, slow reference ----------------------------------
def _ref_pass(x, table, L, k, overlap):
    """The reference semantics, one state at a time (goldens README)."""
    S, C, J = 2**L, 2**k, 2 ** (L - k)
    T = len(x)
    f32 = np.float32
    cost = np.array([f32((table[s] - f32(x[0])) ** 2) for s in range(S)], dtype=f32)
    if overlap is not None:
        cost[[s for s in range(S) if s >> k != overlap]] = np.inf
    back = np.zeros((T, S), dtype=np.int64)
    for t in range(1, T):
        new = np.empty(S, dtype=f32)
        for s in range(S):
            j = s >> k
            cands = [cost[j + c * J] for c in range(C)]
            c = int(np.argmin(cands))  # first minimum: smallest c
            back[t, s] = j + c * J
            new[s] = f32(cands[c] + f32((table[s] - f32(x[t])) ** 2))
        cost = new
    if overlap is not None:
        cost = cost.copy()
        cost[[s for s in range(S) if s % J != overlap]] = np.inf
    s = int(np.argmin(cost))
    states = [s]
    for t in range(T - 1, 0, -1):
        s = int(back[t, s])
        states.append(s)
    return np.array(states[::-1])


def _ref_tailbiting(x, table, L, k):
    T = len(x)
    first = _ref_pass(np.roll(x, T // 2), table, L, k, None)
    return _ref_pass(x, table, L, k, first[T // 2] >> k)


@pytest.mark.parametrize("L,k,T", [(6, 1, 12), (6, 2, 10), (6, 3, 8), (8, 2, 12)])
def test_viterbi_matches_slow_reference(L, k, T):
    rng = np.random.default_rng(L * 10 + k)
    table = rng.standard_normal(2**L).astype(np.float32)
    table[5] = table[9]  # exact ties must break the same way
    x = rng.standard_normal((6, T)).astype(np.float32)
    got = viterbi_tailbiting(torch.from_numpy(x), L, k, table=torch.from_numpy(table))
    for b in range(6):
        assert np.array_equal(got[b].numpy(), _ref_tailbiting(x[b], table, L, k)), b


def test_constrained_pass_is_optimal_by_brute_force():
    """Every tail-biting cycle of T·k bits, enumerated: the Viterbi's cost is the
    minimum over the cycles whose overlap it was pinned to."""
    L, k, T = 4, 2, 6
    rng = np.random.default_rng(1)
    table = rng.standard_normal(2**L).astype(np.float32)
    x = rng.standard_normal((1, T)).astype(np.float32)
    states = viterbi_tailbiting(torch.from_numpy(x), L, k, table=torch.from_numpy(table))[0]
    got = float(((table[states.numpy()] - x[0]) ** 2).sum())
    overlap = int(states[0]) >> k
    best = np.inf
    for syms in itertools.product(range(2**k), repeat=T):
        st = [sum(syms[(t - i) % T] << (i * k) for i in range(L // k)) for t in range(T)]
        if st[0] >> k != overlap:
            continue
        best = min(best, float(((table[st] - x[0]) ** 2).sum()))
    assert got == pytest.approx(best, rel=1e-6)
    # and the cycle closes: every state is the shift of the one before (wrapping)
    prev = torch.roll(states, 1)
    assert bool(((((prev << k) & (2**L - 1)) >> k) == (states >> k)).all())


@pytest.mark.parametrize("k,want", [(1, 0.2803), (2, 0.0733), (3, 0.0198), (4, 0.0055)])
def test_mse_near_qtip_table_2(k, want):
    """A 256-sequence sample (the full 4096-sequence check is `tq-build codec-check`)."""
    g = torch.Generator().manual_seed(k)
    x = torch.randn(256, 256, generator=g)
    mse = float((reconstruct(quantize_blocks(x, 12, k), 12) - x).pow(2).mean())
    assert abs(mse / want - 1) < 0.06, mse


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("L,k", [(12, 3), (16, 2)])
def test_cuda_viterbi_equals_cpu(L, k):
    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(3))
    cpu = quantize_blocks(x, L, k)
    gpu = quantize_blocks(x.cuda(), L, k).cpu()
    assert torch.equal(cpu, gpu)


def test_codec_check_cli_json():
    p = cli(Path.cwd(), "codec-check", "--L", "12", "--k", "2", "--code", "3inst",
            "--sequences", "64")
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert {"L", "k", "code", "T", "sequences", "mse", "seconds", "weights_per_s",
            "device"} <= set(r)
    assert r["code"] == "3inst" and 0.06 < r["mse"] < 0.09
    bad = cli(Path.cwd(), "codec-check", "--k", "0")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


# ---- the packed format --------------------------------------------------------------
@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("interleave", [False, True])
def test_decode_of_pack_is_the_viterbi_reconstruction(k, axis, interleave):
    torch.manual_seed(k * 4 + axis * 2 + interleave)
    w = torch.randn(64, 128) * 0.02
    spec = QuantSpec(method="rtn", format="trellis", bits=k,
                     trellis={"L": 12, "T": 32, "axis": axis, "interleave": interleave})
    tensors, record = quantize_tensor("m.weight", w, spec, guard=GuardParams())
    words, scales = tensors["m.weight"], tensors["m.scales"]
    rows, cols = (64, 128) if axis == 1 else (128, 64)
    if interleave:
        assert words.shape == (cols // 64, rows, 2 * 32 * k // 32)
    else:
        assert words.shape == (rows, cols * k // 32)
    assert scales.dtype == torch.float16 and scales.shape == (rows,)
    deq = dequantize_module(words, scales, None, module_entry(spec))
    plain = trellis_plain(w, Geometry(L=12, k=k, T=32, code="1mad", axis=axis, group=32))
    assert torch.equal(deq, plain.recon)  # bit for bit
    stored = deq.numpy() if axis == 1 else deq.numpy().T
    assert record["recon_sha256"] == fmt.recon_hash(stored[None])


def test_o1_decode_reads_each_state_from_two_words():
    rng = np.random.default_rng(0)
    for k, T, L in [(2, 64, 12), (3, 32, 12), (4, 64, 16), (3, 96, 16)]:
        states = viterbi_tailbiting(torch.from_numpy(rng.standard_normal((5, T)).astype(
            np.float32)), L, k).numpy()
        words = fmt.pack(states, k, T)
        bits = np.unpackbits(words.view(np.uint8), bitorder="little").reshape(5, T * k)
        for t in (0, 1, T // 2, T - 1):  # literal bit reading, LSB first, wrapping
            off = (T - 1 - t) * k
            s = sum(int(bits[0, (off + i) % (T * k)]) << i for i in range(L))
            assert s == states[0, t]
        assert np.array_equal(fmt.states_of(words, k, T, L), states)


def test_stacked_experts_round_trip():
    w = torch.randn(3, 32, 64) * 0.1
    spec = QuantSpec(format="trellis", bits=2, trellis={"T": 64, "axis": 1})
    tensors, _ = quantize_tensor("e.weight", w, spec, guard=GuardParams())
    assert tensors["e.weight"].shape == (3, 32, 4) and tensors["e.scales"].shape == (3, 32)
    deq = dequantize_module(tensors["e.weight"], tensors["e.scales"], None, module_entry(spec))
    assert deq.shape == w.shape and float((deq - w).pow(2).mean() / w.pow(2).mean()) < 0.1


# ---- LDLQ -------------------------------------------------------------------------------
def _correlated_h(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4 * n, n, generator=g) @ (torch.eye(n) + 0.4 * torch.randn(n, n, generator=g))
    return (x.T @ x).double()


@pytest.mark.parametrize("axis", [0, 1])
def test_ldlq_beats_plain_on_the_proxy_loss(axis):
    torch.manual_seed(0)
    w, h = torch.randn(64, 128), _correlated_h(128)
    g = Geometry(L=12, k=2, T=32, code="1mad", axis=axis, group=32)
    plain = proxy_loss(w, trellis_plain(w, g).recon, h)
    res = trellis_guarded(w, h, g)
    assert res.method == "ldlq" and res.events == []
    assert res.proxy_loss < 0.8 * plain


def _rounding(W, cols, scales, geo, table):
    """A stand-in for `_code_columns` (axis 0): W's columns rounded to a 0.25 grid."""
    val = torch.round(W[:, cols].float() * 4) / 4
    return torch.zeros(val.shape[1], val.shape[0], dtype=torch.int64), val


@pytest.mark.parametrize("span", [None, 3, 5, 16])
def test_ldlq_feedback_with_one_column_groups_is_gptq(span, monkeypatch):
    """With groups of one column and an elementwise quantizer, the LDLQ update
    is GPTQ's; checked against a textbook column loop — also with the feedback
    past a span of columns deferred to one product (GPTQ's lazy batch, CUDA's
    default)."""
    import tqbuild.stages.trellis as tr

    torch.manual_seed(1)
    w, h = torch.randn(8, 16), _correlated_h(16, 1)
    g = Geometry(L=12, k=2, T=8, code="1mad", axis=0, group=1)

    monkeypatch.setattr(tr, "_code_columns", _rounding)
    got = ldlq_core(w, h, g, 0.01, 1e9, span=span).recon
    from tqbuild.stages.guard import inverse_cholesky_upper

    U = inverse_cholesky_upper(h, 0.01)
    W = w.double().clone()
    Q = torch.zeros_like(W)
    for j in range(16):
        Q[:, j] = torch.round(W[:, j].float() * 4).double() / 4
        err = (W[:, j] - Q[:, j]) / U[j, j]
        W[:, j + 1:] -= err[:, None] * U[j, j + 1:][None, :]
    assert torch.allclose(got.double(), Q, atol=1e-6)


@pytest.mark.parametrize("span", [None, 4])
def test_diverged_target_reports_the_first_group_past_the_bound(span, monkeypatch):
    """The peak check runs after the loop (no host sync per group) and reports
    what the per-group check did: the first group whose fed-back target exceeds
    scale_ratio × the original peak, with that group's peak."""
    import tqbuild.stages.trellis as tr
    from tqbuild.stages.guard import inverse_cholesky_upper

    torch.manual_seed(4)
    w, h = torch.randn(8, 16), _correlated_h(16, 4)
    w[:, :6] *= 0.1  # the first groups stay under the bound
    g = Geometry(L=12, k=2, T=8, code="1mad", axis=0, group=1)

    U = inverse_cholesky_upper(h, 0.01)
    W = w.double().clone()
    col_peaks = []
    for j in range(16):  # the textbook loop: each column's target before coding
        col_peaks.append(float(W[:, j].abs().max()))
        err = (W[:, j] - torch.round(W[:, j].float() * 4).double() / 4) / U[j, j]
        W[:, j + 1:] -= err[:, None] * U[j, j + 1:][None, :]
    peak, ratio = float(w.abs().max()), 0.6
    first = next(j for j, p in enumerate(col_peaks) if p > ratio * peak)
    assert first > 0
    monkeypatch.setattr(tr, "_code_columns", _rounding)
    got = ldlq_core(w, h, g, 0.01, ratio, span=span)
    assert got["event"] == "target_diverged" and got["original_peak"] == peak
    assert got["peak"] == pytest.approx(col_peaks[first], rel=1e-6)


def test_lazy_span_defers_whole_groups_on_cuda_only():
    from tqbuild.stages.trellis import lazy_span

    assert lazy_span(128, cuda=False) == 128  # CPU: the locked artifacts' order
    assert [lazy_span(gr, cuda=True) for gr in (128, 256, 300, 2048)] == [1024, 1024, 900, 2048]
    g = Geometry(L=12, k=2, T=64, code="1mad", axis=1, group=64)
    with pytest.raises(ValueError, match="whole groups"):
        ldlq_core(torch.randn(4, 128), _correlated_h(128), g, 0.01, 1e9, span=96)


def test_lazy_ldlq_codes_a_trellis_tensor_as_the_eager_order():
    """A real trellis LDLQ pass with its feedback deferred over spans of 2 and 3
    groups (the last span partial): the same code up to float64 rounding."""
    torch.manual_seed(5)
    w, h = 0.02 * torch.randn(64, 320), _correlated_h(320, 6)
    for axis in (0, 1):
        g = Geometry(L=12, k=2, T=64, code="1mad", axis=axis, group=64)
        eager = ldlq_core(w, h, g, 0.01, 1e9)
        for span in (128, 192):
            lazy = ldlq_core(w, h, g, 0.01, 1e9, span=span)
            assert (lazy.states == eager.states).float().mean() > 0.97
            assert torch.allclose(lazy.recon, eager.recon, atol=0.02 * float(w.abs().max()))


def test_row_parts_cut_whole_sequences_and_cuda_only_by_default(monkeypatch):
    from tqbuild.stages.trellis import ROW_PARTS_MEMORY, row_parts

    big, small = ROW_PARTS_MEMORY, ROW_PARTS_MEMORY - 1  # a card's total memory
    g0 = Geometry(L=12, k=2, T=64, code="1mad", axis=0, group=32)
    g1 = Geometry(L=16, k=2, T=64, code="mul1", axis=1, group=64)
    assert row_parts(256, g0, big, 3) == [slice(0, 64), slice(64, 128), slice(128, 256)]
    assert row_parts(256, g1, big, 3) == [slice(0, 85), slice(85, 170), slice(170, 256)]
    assert row_parts(64, g0, big, 4) == [slice(0, 64)]  # one sequence: one part
    assert row_parts(100, g0, big, 2) == [slice(0, 64), slice(64, 100)]  # a short last one
    monkeypatch.setenv("TQBUILD_LDLQ_ROW_PARTS", "2")
    assert [len(row_parts(256, g1, m)) for m in (big, small, None)] == [2, 2, 1]
    monkeypatch.delenv("TQBUILD_LDLQ_ROW_PARTS")
    # 4 parts (4 scratch budgets) by default only where measured: mul1 at L = 16 on an
    # 80 GB card, not 24 GB
    assert [len(row_parts(256, g1, m)) for m in (big, 80 << 30, small, 24 << 30, None)] == \
        [4, 4, 1, 1, 1]
    for other in ({"L": 12}, {"code": "pair"}, {"code": "1mad"}):  # not measured: one part
        assert len(row_parts(256, dataclasses.replace(g1, **other), big)) == 1
    for bad in ("two", "0", "-1"):  # the user's error, named with its fix
        monkeypatch.setenv("TQBUILD_LDLQ_ROW_PARTS", bad)
        with pytest.raises(BadInput, match="TQBUILD_LDLQ_ROW_PARTS: .* whole number >= 1"):
            row_parts(256, g1, big)
    monkeypatch.setenv("TQBUILD_LDLQ_ROW_PARTS", " ")
    assert len(row_parts(256, g1, big)) == 4


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_ldlq_in_row_parts_codes_as_one_pass(device):
    """Rows share no feedback: LDLQ run as 2 or 3 row parts, a group at a time in turn
    (each on its own stream on CUDA), gives the one pass's states and values — bit for bit
    on CPU; on CUDA the feedback products' row counts change cuBLAS's float64 rounding."""
    if device == "cuda" and not CUDA:
        pytest.skip("needs CUDA")
    torch.manual_seed(7)
    w, h = (0.02 * torch.randn(256, 192)).to(device), _correlated_h(192, 7).to(device)
    for axis in (0, 1):
        g = Geometry(L=12, k=2, T=64, code="1mad", axis=axis, group=64 if axis else 32)
        one = ldlq_core(w, h, g, 0.01, 1e9, span=g.group * 2)
        for parts in (2, 3):
            got = ldlq_core(w, h, g, 0.01, 1e9, span=g.group * 2, parts=parts)
            if device == "cpu":
                assert torch.equal(got.states, one.states) and torch.equal(got.recon, one.recon)
            else:
                assert (got.states == one.states).float().mean() > 0.99
                assert torch.allclose(got.recon, one.recon, atol=0.02 * float(w.abs().max()))


def test_diverged_target_in_row_parts_reports_the_first_group(monkeypatch):
    """Each part keeps its groups' peaks; the check takes the largest over the parts."""
    import tqbuild.stages.trellis as tr

    torch.manual_seed(4)
    w, h = torch.randn(8, 16), _correlated_h(16, 4)
    w[:, :6] *= 0.1
    w[:4] *= 0.1  # the peaks in the last part (rows 4–7 of the parts 0–2, 2–4, 4–8)
    g = Geometry(L=12, k=2, T=2, code="1mad", axis=0, group=1)

    monkeypatch.setattr(tr, "_code_columns", _rounding)
    one = ldlq_core(w, h, g, 0.01, 0.6)
    parted = ldlq_core(w, h, g, 0.01, 0.6, parts=3)
    assert one["event"] == parted["event"] == "target_diverged"
    assert parted["peak"] == one["peak"] and parted["original_peak"] == one["original_peak"]


def test_guard_escalates_then_falls_back_to_plain():
    torch.manual_seed(2)
    w = torch.randn(16, 64)
    g = Geometry(L=12, k=2, T=32, code="1mad", axis=1, group=32)
    indefinite = torch.diag(torch.cat([torch.ones(32), -torch.ones(32) * 1e3])).double()
    res = trellis_guarded(w, indefinite, g, damp=0.01, max_damp=1.0)
    kinds = [e["event"] for e in res.events]
    assert kinds == ["cholesky_failed"] * 3 + ["fallback_plain"] and res.method == "plain"


def test_compare_plain_keeps_the_better():
    torch.manual_seed(3)
    w, h = torch.randn(16, 64), _correlated_h(64, 3)
    g = Geometry(L=12, k=2, T=32, code="1mad", axis=1, group=32)
    res = trellis_guarded(w, h, g, compare_plain=True)
    assert res.plain_proxy_loss is not None
    assert res.proxy_loss <= res.plain_proxy_loss


@pytest.mark.parametrize("k,T", [(1, 64), (2, 96), (3, 192), (3, 256), (4, 64)])
def test_pack_tensor_equals_the_numpy_reference(k, T):
    from tqbuild.formats import trellis as fmt

    rng = np.random.default_rng(k * 1000 + T)
    states = rng.integers(0, 1 << 16, (7, T * 6))
    want = fmt.pack(states, k, T)
    assert np.array_equal(fmt.pack_tensor(torch.from_numpy(states), k, T), want)
    if CUDA:
        assert np.array_equal(fmt.pack_tensor(torch.from_numpy(states).cuda(), k, T), want)


@pytest.mark.parametrize("axis", [1, 0])
def test_scale_refit_never_increases_the_proxy(axis):
    from tqbuild.kernels.viterbi import code_tensor
    from tqbuild.stages.trellis_refit import refit_scales

    g = torch.Generator().manual_seed(21 + axis)
    w = 0.02 * torch.randn(64, 128, generator=g)
    xs = torch.randn(512, 128, generator=g) @ (torch.eye(128) + 0.05 * torch.randn(
        128, 128, generator=g))
    h = (xs.T @ xs).double()
    geo = Geometry(L=12, k=2, T=64, code="1mad", axis=axis, group=64)
    r = trellis_guarded(w, h, geo, damp=0.01)
    codes = code_tensor("1mad", 12, w.device)[r.states]
    codes = codes if axis == 1 else codes.T
    before = proxy_loss(w, r.recon, h)
    new = refit_scales(w, codes, r.scales, h, axis)
    assert new.dtype == torch.float16 and new.shape == r.scales.shape
    recon = codes * (new.float()[:, None] if axis == 1 else new.float()[None, :])
    after = proxy_loss(w, recon, h)
    assert after <= before and after < 0.999 * before, (before, after)
    # already optimal scales are kept
    again = refit_scales(w, codes, new, h, axis)
    recon2 = codes * (again.float()[:, None] if axis == 1 else again.float()[None, :])
    assert proxy_loss(w, recon2, h) <= after


@pytest.mark.parametrize("axis", [1, 0])
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_ldlq_refit_and_alpha_in_the_encoder(axis, device):
    """`refit` keeps the states, never raises the proxy, and the reconstruction is
    exactly f32(code)·f32(stored scale); `alpha` multiplies the stored scales."""
    if device == "cuda" and not CUDA:
        pytest.skip("needs CUDA")
    from tqbuild.kernels.viterbi import code_tensor
    from tqbuild.stages.trellis import sequence_scales

    g = torch.Generator().manual_seed(5 + axis)
    w = (0.02 * torch.randn(64, 128, generator=g)).to(device)
    xs = torch.randn(512, 128, generator=g) @ (torch.eye(128) + 0.05 * torch.randn(
        128, 128, generator=g))
    h = (xs.T @ xs).double().to(device)
    base = Geometry(L=12, k=2, T=64, code="1mad", axis=axis, group=8, alpha=1.1)
    plain = trellis_guarded(w, h, base)
    fit = trellis_guarded(w, h, Geometry(**{**base.__dict__, "refit": True}))
    assert torch.equal(plain.states, fit.states)
    assert torch.equal(plain.scales, sequence_scales(w, axis, 1.1))
    rms = w.float().pow(2).mean(dim=1 if axis == 1 else 0).sqrt()
    assert torch.equal(plain.scales, (rms * 1.1).half())
    assert fit.proxy_loss <= plain.proxy_loss
    assert not torch.equal(fit.scales, plain.scales)  # the refit moved some scale
    codes = code_tensor("1mad", 12, w.device)[fit.states]
    s = fit.scales.float()
    want = codes * s[:, None] if axis == 1 else (codes * s[:, None]).t()
    assert torch.equal(fit.recon, want.contiguous())


def test_ldlq_small_groups_lower_the_proxy_on_correlated_columns():
    """Coding along axis 0 lets LDLQ feed the error back every `group` input
    columns; on a Hessian with correlated columns smaller steps code better
    (issue 21: the gap to exllamav3 was mostly 256-column steps along axis 1)."""
    g = torch.Generator().manual_seed(3)
    w = 0.02 * torch.randn(256, 128, generator=g)
    xs = torch.randn(512, 128, generator=g) @ (torch.eye(128) + 0.3 * torch.randn(
        128, 128, generator=g))
    h = (xs.T @ xs).double()
    loss = {}
    for axis, group in ((1, 128), (0, 128), (0, 8)):
        geo = Geometry(L=12, k=2, T=128, code="1mad", axis=axis, group=group)
        loss[axis, group] = trellis_guarded(w, h, geo).proxy_loss
    assert loss[0, 8] < 0.95 * loss[1, 128] and loss[0, 8] < 0.95 * loss[0, 128], loss


def test_reversed_cholesky_gives_the_same_inverse_factor():
    """The CUDA builds' U (Cholesky of the reversed H, triangular inverse by halves)
    equals the reference chol(H⁻¹) up to rounding, is upper triangular, and a
    non-positive-definite H still answers None."""
    from tqbuild.stages import guard

    torch.manual_seed(7)
    n = 200
    h = _correlated_h(n, 4).double()
    ref = guard.inverse_cholesky_upper(h, 0.01)
    damped = h + 0.01 * torch.mean(torch.diag(h)) * torch.eye(n, dtype=h.dtype)
    got = guard._inverse_cholesky_upper_reversed(damped)
    assert torch.equal(torch.triu(got), got)
    assert float((got - ref).abs().max() / ref.abs().max()) < 1e-12
    L = torch.linalg.cholesky(damped)
    inv = guard.lower_triangular_inverse(L, leaf=16)  # four levels of halves
    assert torch.allclose(inv @ L, torch.eye(n, dtype=h.dtype), atol=1e-9)
    bad = damped.clone()
    bad[3, 3] = -1.0
    assert guard._inverse_cholesky_upper_reversed(bad) is None
