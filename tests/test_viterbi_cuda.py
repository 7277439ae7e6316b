"""The fused CUDA Viterbi (kernels/viterbi_cuda.cu) chooses exactly the torch
path's states: the codec set for L 12/16 × k 1–4 × both codes, QTIP golden
values as inputs, tie-heavy inputs, a whole LDLQ tensor; and a machine where it
cannot build falls back with one warning. CUDA cases skip without a GPU."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from tqbuild.kernels import viterbi, viterbi_cuda
from tqbuild.kernels.trellis_codes import code_table

CUDA = torch.cuda.is_available()
GOLDENS = Path(__file__).parents[2] / "shared" / "goldens" / "qtip" / "qtip_state_tables.npz"
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs CUDA")


def torch_states(x: torch.Tensor, L: int, k: int, code: str) -> torch.Tensor:
    """The torch pass on x's device (the reference the CUDA kernel must equal), 512 rows
    at a time (at L = 16, k = 1 all 4096 rows' backpointers outgrow an 80 GB card)."""
    table = viterbi.code_tensor(code, L, x.device)
    T = x.shape[1]
    out = []
    for xc in x.split(512):
        first = viterbi._pass(torch.roll(xc, T // 2, dims=1).contiguous(), table, L, k, None)
        out.append(viterbi._pass(xc, table, L, k, first[:, T // 2] >> k))
    return torch.cat(out)


def cuda_states(x: torch.Tensor, L: int, k: int, code: str) -> torch.Tensor:
    assert viterbi_cuda.available(x, L, k), viterbi_cuda._failed
    return viterbi_cuda.viterbi_tailbiting(x, viterbi.code_tensor(code, L, x.device), L, k, code)


@needs_cuda
@pytest.mark.parametrize("code", ["1mad", "3inst", "mul1"])
@pytest.mark.parametrize("L,k", [(12, 1), (12, 2), (12, 3), (12, 4), (16, 1), (16, 2),
                                 (16, 3), (16, 4)])
def test_codec_set_states_equal_torch_and_cpu(L, k, code):
    x = torch.randn(4096, 256, generator=torch.Generator().manual_seed(0))  # codec-check set
    got = cuda_states(x.cuda(), L, k, code)
    assert torch.equal(got, torch_states(x.cuda(), L, k, code))
    sub = x[:: 64 if L == 16 else 16]  # the CPU path on a slice (it is slow at L = 16)
    assert torch.equal(got[:: 64 if L == 16 else 16].cpu(), torch_states(sub, L, k, code))


@needs_cuda
@pytest.mark.parametrize("L,k", [(12, 2), (16, 2), (12, 4)])
def test_tie_heavy_inputs(L, k):
    table = torch.from_numpy(code_table("1mad", L).copy())
    g = torch.Generator().manual_seed(5)
    rows = [torch.zeros(256),  # every path's first cost ties
            table[torch.randint(0, 2**L, (256,), generator=g)],  # x on code values
            torch.full((256,), float(table[7])),
            torch.randn(256, generator=g).round()]  # few distinct values
    x = torch.stack(rows * 8)
    if GOLDENS.is_file():  # QTIP's own state values as inputs
        gold = np.load(GOLDENS)[f"1mad_L{L}"].astype(np.float32)
        x = torch.cat([x, torch.from_numpy(gold[: 256 * 32].reshape(32, 256))])
    for code in ("1mad", "3inst", "mul1"):
        got = cuda_states(x.cuda(), L, k, code).cpu()
        assert torch.equal(got, torch_states(x, L, k, code)), code


@needs_cuda
def test_non_finite_rows_take_the_torch_path():
    x = torch.randn(8, 64)
    x[3, 5] = float("nan")
    got = viterbi.viterbi_tailbiting(x.cuda(), 12, 2).cpu()
    assert torch.equal(got, viterbi.viterbi_tailbiting(x, 12, 2))


@needs_cuda
@pytest.mark.parametrize("axis,L", [(1, 12), (0, 12), (1, 16)])
def test_whole_ldlq_tensor_cuda_equals_cpu(axis, L):
    from tqbuild.stages.trellis import Geometry, trellis_guarded

    g = torch.Generator().manual_seed(11)
    w = 0.02 * torch.randn(256, 512, generator=g)
    xs = torch.randn(2048, 512, generator=g) @ (torch.eye(512) + 0.05 * torch.randn(
        512, 512, generator=g))
    h = (xs.T @ xs).double()
    geo = Geometry(k=2, T=128, L=L, code="1mad", axis=axis, group=128)
    cpu = trellis_guarded(w, h, geo, damp=0.01)
    gpu = trellis_guarded(w.cuda(), h.cuda(), geo, damp=0.01)
    same = (cpu.states == gpu.states.cpu()).float().mean().item()
    # LDLQ's float64 feedback sums in another order under cuBLAS: identical states
    # are not promised across devices, near-identical ones are
    assert same > 0.97, same
    rel = ((cpu.recon - gpu.recon.cpu()).norm() / cpu.recon.norm()).item()
    assert rel < 0.1


def test_unbuildable_extension_falls_back_with_one_warning(monkeypatch):
    class FakeCuda:
        is_cuda = True

    def broken():
        raise RuntimeError("nvcc failed: no compiler here")

    monkeypatch.setattr(viterbi_cuda, "_lib", None)
    monkeypatch.setattr(viterbi_cuda, "_failed", None)
    monkeypatch.setattr(viterbi_cuda, "_build", broken)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert not viterbi_cuda.available(FakeCuda(), 12, 3)
        assert not viterbi_cuda.available(FakeCuda(), 16, 2)  # no second build, no warning
    assert len(w) == 1 and "CUDA Viterbi unavailable" in str(w[0].message)
    monkeypatch.setenv("TQBUILD_VITERBI", "torch")
    monkeypatch.setattr(viterbi_cuda, "_failed", None)
    assert not viterbi_cuda.available(FakeCuda(), 12, 3)  # forced off: no build at all


def test_kernel_source_ships_with_the_package():
    assert viterbi_cuda.SOURCE.is_file()
    assert "tq_viterbi_tailbiting" in viterbi_cuda.SOURCE.read_text()


def test_kernel_division_constants_give_the_code_table_exactly():
    """mad_code's fma(a, Rhi, a·Rlo) (constants read from the .cu) is the correctly
    rounded (t − 510) / D for every byte sum t: checked in exact arithmetic."""
    import re
    from fractions import Fraction

    src = viterbi_cuda.SOURCE.read_text()
    hi, lo = (np.array([int(h, 16)], dtype=np.uint32).view(np.float32)[0] for h in
              re.search(r"Rhi = __int_as_float\((0x[0-9a-f]+)u\), Rlo = __int_as_float\("
                        r"(0x[0-9a-f]+)u\)", src).groups())
    want = ((np.arange(1021, dtype=np.float32) - np.float32(510)) /
            np.float32(147.800537109375)).astype(np.float32)

    def nearest(fr: Fraction) -> np.float32:  # round-to-nearest-even float32 of fr
        x = np.float32(float(fr))
        cands = [np.nextafter(x, np.float32(-np.inf)), x, np.nextafter(x, np.float32(np.inf))]
        return min(cands, key=lambda c: (abs(Fraction(float(c)) - fr),
                                         int(np.array([c]).view(np.uint32)[0]) & 1))

    for t in range(1021):
        a = np.float32(t - 510)
        got = nearest(Fraction(float(a)) * Fraction(float(hi)) + Fraction(float(a * lo)))
        assert got == want[t], t


def test_long_l16_blocks_are_not_sent_to_the_kernel(monkeypatch):
    class FakeCuda:
        is_cuda = True

        def __init__(self, T):
            self.shape = (4, T)

    monkeypatch.setattr(viterbi_cuda, "_lib", object())
    monkeypatch.setattr(viterbi_cuda, "_failed", None)
    assert viterbi_cuda.available(FakeCuda(1024), 16, 2)
    assert not viterbi_cuda.available(FakeCuda(2048), 16, 2)  # beyond the smem plan
    assert viterbi_cuda.available(FakeCuda(2048), 12, 3)


@needs_cuda
@pytest.mark.parametrize("k", [2, 3])
def test_l16_longest_block_states_equal_torch(k):
    g = torch.Generator(device="cuda").manual_seed(5)
    x = torch.randn(3, viterbi_cuda.MAX_T_L16, device="cuda", generator=g)
    assert torch.equal(cuda_states(x, 16, k, "mul1"), torch_states(x, 16, k, "mul1"))


def test_viterbi_flags_add_benchmark_defines(monkeypatch):
    """TQBUILD_VITERBI_FLAGS reaches nvcc (and the cache key) beside -fmad=false."""
    monkeypatch.delenv("TQBUILD_VITERBI_FLAGS", raising=False)
    assert viterbi_cuda.flags() == ["-fmad=false"]
    monkeypatch.setenv("TQBUILD_VITERBI_FLAGS", "-DTQ_VIT_REG=1")
    assert viterbi_cuda.flags() == ["-fmad=false", "-DTQ_VIT_REG=1"]


@pytest.mark.parametrize("B,cap,streams", [(2560, 2558, 1), (2560, 2558, 2), (2560, 1279, 2),
                                           (17408, 639, 2), (65536, 1024, 3), (1, 1024, 2),
                                           (3, 1, 2), (5, 1, 1), (7, 100, 4), (0, 1024, 2)])
def test_launch_sizes_are_even_within_the_budget_and_a_multiple_of_the_streams(B, cap, streams):
    sizes = viterbi_cuda.launch_sizes(B, cap, streams)
    assert sum(sizes) == B and all(0 < n <= max(1, cap // streams) for n in sizes)
    assert max(sizes, default=0) - min(sizes, default=0) <= 1  # as even as can be
    fewest = -(-B // max(1, cap // streams))
    assert len(sizes) == min(B, -(-fewest // streams) * streams)  # (no launch for B = 0)


def test_side_streams_are_each_current_streams_own(monkeypatch):
    """LDLQ's row parts call the Viterbi on their own streams: each current stream gets its
    own side streams (made once), so one part's launches never queue behind another's."""

    class Stream:
        made = 0

        def __init__(self, device=None):
            Stream.made += 1
            self.stream_id = 100 + Stream.made

    current = {"s": Stream()}
    monkeypatch.setattr(viterbi_cuda, "_side", {})
    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: current["s"])
    dev = torch.device("cuda", 0)
    a = viterbi_cuda._streams(dev, 2)
    assert a[0] is current["s"] and len(a) == 2 and viterbi_cuda._streams(dev, 2) == a
    current["s"] = Stream()  # another part's stream
    b = viterbi_cuda._streams(dev, 2)
    assert b[0] is current["s"] and b[1] is not a[1]
    assert viterbi_cuda._streams(dev, 1) == [current["s"]]


def test_two_streams_only_where_measured_faster(monkeypatch):
    monkeypatch.delenv("TQBUILD_VITERBI_STREAMS", raising=False)
    assert [viterbi_cuda.streams(16, k) for k in (1, 2, 3, 4)] == [1, 2, 1, 1]
    assert viterbi_cuda.streams(12, 2) == 1
    monkeypatch.setenv("TQBUILD_VITERBI_STREAMS", "3")
    assert viterbi_cuda.streams(16, 4) == 3


def test_launch_sizes_do_not_leave_a_sliver():
    """2560 sequences under a cap of 2558 (L = 16, k = 4 on an 80 GB card) were 2558 + 2."""
    assert viterbi_cuda.launch_sizes(2560, 2558) == [1280, 1280]
    assert viterbi_cuda.launch_sizes(2560, 2558, 2) == [640] * 4


@pytest.mark.parametrize("total_gb,budget_gb", [(80, 10), (141, 16), (24, 3), (4, 1)])
def test_scratch_budget_is_an_eighth_of_the_device_within_1_to_16_gb(monkeypatch, total_gb,
                                                                     budget_gb):
    class Props:
        total_memory = total_gb << 30

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: Props())
    assert viterbi_cuda.scratch_budget(torch.device("cuda")) == budget_gb << 30
    monkeypatch.setattr(viterbi_cuda, "BP_BUDGET", 12345)
    assert viterbi_cuda.scratch_budget(torch.device("cuda")) == 12345


@needs_cuda
@pytest.mark.parametrize("L,k,streams", [(12, 3, 2), (16, 3, 2), (16, 4, 3), (16, 2, 1)])
def test_launches_on_several_streams_give_the_same_states(monkeypatch, L, k, streams):
    """A scratch budget small enough for several launches, alternating between streams."""
    assert viterbi_cuda.available(torch.zeros(1, 256, device="cuda"), L, k)
    lib = viterbi_cuda._lib
    g = torch.Generator(device="cuda").manual_seed(9)
    x = torch.randn(1000, 256, device="cuda", generator=g)
    monkeypatch.setattr(viterbi_cuda, "BP_BUDGET", 300 * lib.tq_viterbi_scratch_bytes(L, k, 256))
    monkeypatch.setenv("TQBUILD_VITERBI_STREAMS", str(streams))
    assert len(viterbi_cuda.launch_sizes(1000, 300, streams)) >= 4
    assert torch.equal(cuda_states(x, L, k, "mul1"), torch_states(x, L, k, "mul1"))
    table = viterbi.code_tensor("mul1", L, x.device)  # no sequences, side streams made
    assert viterbi_cuda.viterbi_tailbiting(x[:0], table, L, k, "mul1").shape == (0, 256)
