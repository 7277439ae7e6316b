"""int8-activation trellis decode-matvec: the numpy reference (act_int8), the CPU
torch emulation, and the CUDA kernels (runtime/trellis_gemv.cu) against the
reference on fresh random packed tensors — the CUDA cases run on a GPU only."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
import torch

from tqbuild.formats import trellis as fmt
from tqbuild.runtime import act_int8, gpu_info, trellis_cuda
from tqbuild.runtime import trellis_torch as tt

CUDA = torch.cuda.is_available()


def random_packed(rng, code, k, L, T, rows, cols):
    """Random words (every state equally likely) for [rows, cols] stored weights."""
    words = rng.integers(0, 2**32, (rows, cols * k // 32), dtype=np.uint32)
    scales = (rng.random(rows) + 0.5).astype(np.float16)
    return words, scales


def test_quantize_groups():
    v = np.zeros((2, 64), np.float32)
    v[0, :32] = np.linspace(-3, 1.5, 32)
    v[1, 32:] = 1e-30  # tiny but non-zero: still exact ±127 at the max
    q, gs = act_int8.quantize_np(v)
    assert q[0, 0] == -127 and q[0, 31] == round(1.5 / 3 * 127)
    assert (q[0, 32:] == 0).all() and gs[0, 1] == 0  # an all-zero group
    assert (q[1, 32:] == 127).all() and gs[1, 1] == np.float32(1e-30) / np.float32(127)
    # dequantized error at most half a step of each group's scale
    x = np.random.default_rng(0).standard_normal((3, 256)).astype(np.float32) * 5
    q, gs = act_int8.quantize_np(x)
    err = np.abs(q.reshape(3, 8, 32) * gs[..., None] - x.reshape(3, 8, 32))
    assert (err <= gs[..., None] * 0.5 * (1 + 1e-5)).all()


@pytest.mark.parametrize("code", ["1mad", "mul1"])
@pytest.mark.parametrize("axis", [0, 1])
def test_reference_is_the_float_matvec_up_to_activation_rounding(code, axis):
    rng = np.random.default_rng(1 + axis)
    k, L, T = 3, 12, 64
    rows, cols = 96, 256
    words, scales = random_packed(rng, code, k, L, T, rows, cols)
    w = fmt.decode(words, scales, k=k, T=T, L=L, code=code, axis=axis).astype(np.float64)
    x = rng.standard_normal((3, w.shape[1])).astype(np.float32)
    got = act_int8.matvec_reference(x, words, scales, code=code, k=k, T=T, L=L, axis=axis)
    want = x.astype(np.float64) @ w.T
    rel = np.sqrt(((got - want) ** 2).mean() / (want ** 2).mean())
    assert 1e-5 < rel < 0.01, rel  # int8 rounding: visible, well below the weights' error
    # with activations already on the int8 grid the two agree to float rounding
    q, gs = act_int8.quantize_np(x if axis == 1 else x * scales.astype(np.float32))
    xq = (q.reshape(3, -1, 32) * gs[..., None]).reshape(3, -1)
    if axis == 0:
        xq = xq / scales.astype(np.float32)
    assert np.allclose(got, xq.astype(np.float64) @ w.T, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("axis", [0, 1])
def test_cpu_emulation_is_the_reference(axis, monkeypatch):
    """TQBUILD_TRELLIS_ACT=int8 on CPU computes what the kernels compute."""
    rng = np.random.default_rng(5)
    k, L, T, code = 2, 12, 64, "mul1"
    words, scales = random_packed(rng, code, k, L, T, 64, 128)
    entry = {"bits": k, "group_size": T, "mode": "trellis",
             "trellis": {"L": L, "code": code, "axis": axis, "interleave": False, "version": 2}}
    lin = tt.TrellisLinear(torch.from_numpy(words.view(np.int32)), torch.from_numpy(scales),
                           entry)
    x = torch.from_numpy(rng.standard_normal((5, lin.in_features)).astype(np.float32))
    monkeypatch.setenv("TQBUILD_TRELLIS_ACT", "int8")
    got = lin(x).double().numpy()
    want = act_int8.matvec_reference(x.numpy(), words, scales, code=code, k=k, T=T, L=L,
                                     axis=axis)
    assert np.allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    monkeypatch.setenv("TQBUILD_TRELLIS_ACT", "float")
    assert not np.allclose(lin(x).double().numpy(), want, rtol=1e-6, atol=0)


def test_a_failed_build_warns_once_and_falls_back(monkeypatch):
    calls = []

    def broken(*a):
        calls.append(a)
        raise RuntimeError("nvcc not found")

    monkeypatch.setattr(trellis_cuda, "_load", broken)
    monkeypatch.setattr(trellis_cuda, "_libs", {})
    monkeypatch.setattr(trellis_cuda, "_failed", {})
    with pytest.warns(UserWarning, match="int8 trellis kernels unavailable"):
        assert trellis_cuda.library(3, 12, "mul1") is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert trellis_cuda.library(3, 12, "mul1") is None  # no second warning, no rebuild
    assert len(calls) == 1


def test_mode_is_validated(monkeypatch):
    monkeypatch.setenv("TQBUILD_TRELLIS_ACT", "int4")
    with pytest.raises(ValueError, match="auto, float or int8"):
        trellis_cuda.mode()


def _cuda_cases():
    # (code, L, T, k, axis, rows, cols(stored), M, cfg)
    cases = []
    i = 0
    for code in ("mul1", "1mad"):
        for k in (2, 3, 4):
            for axis in (0, 1):
                for (L, T) in ((12, 64), (16, 256), (12, 512)):
                    M = 1 + i % 8
                    rows, cols = (96 + 32 * (i % 3), 1024 if T == 512 else 768)
                    if axis == 1:
                        rows += 5  # ragged output rows
                    # x quantized by every block (prequant False) or once before, with
                    # and without programmatic dependent launch
                    cfg = ([None, {"RB": 2, "warps": 3, "prequant": False}, {"RB": 8, "pdl": 0},
                            {"RB": 1, "warps": 1, "rgb": 3, "bps": 1}][i % 4] if axis == 1 else
                           [None, {"splits": 1}, {"splits": 7}, {"per": 32}][i % 4])
                    cases.append((code, L, T, k, axis, rows, cols, M, cfg))
                    i += 1
    # the tensor-core rows kernel (opt-in): every k, both codes, M = 1..8, ragged rows
    for j, (code, k, (L, T), M) in enumerate(
            [("mul1", 2, (12, 64), 1), ("mul1", 3, (16, 256), 3), ("1mad", 4, (12, 256), 8),
             ("mul1", 1, (12, 512), 5), ("1mad", 3, (12, 64), 2), ("mul1", 4, (16, 256), 7)]):
        cases.append((code, L, T, k, 1, 37 + 16 * j, 1024 if T == 512 else 768, M,
                      {"mma": True, "warps": [8, 3, 1][j % 3]}))
    # rows_tc (tensor cores, rounds of 4 periods; T = 128 wraps at every round's end)
    for j, (code, k, (L, T), M) in enumerate(
            [("mul1", 3, (12, 128), 1), ("1mad", 2, (16, 256), 2), ("mul1", 4, (16, 512), 3),
             ("mul1", 1, (12, 256), 4), ("1mad", 3, (12, 128), 5), ("mul1", 2, (12, 256), 8),
             ("1mad", 4, (12, 128), 1), ("mul1", 3, (16, 256), 6)]):
        cases.append((code, L, T, k, 1, 29 + 24 * j, {128: 640, 256: 768, 512: 1024}[T], M,
                      {"tc": True, "warps": [8, 3, 1, 5][j % 4], "pdl": j % 2}))
    # cols_tc (axis 0 on the tensor cores): every k, both codes, L 12/16, T 64..512, M = 1..8,
    # splits of the inputs (one, several, a ragged last one), warps with no group
    for j, (code, k, (L, T), M) in enumerate(
            [("mul1", 3, (12, 256), 4), ("1mad", 2, (16, 64), 1), ("mul1", 4, (16, 512), 8),
             ("mul1", 1, (12, 128), 3), ("1mad", 3, (12, 512), 6), ("mul1", 2, (12, 256), 2),
             ("1mad", 4, (12, 64), 5), ("mul1", 3, (16, 256), 7)]):
        cases.append((code, L, T, k, 0, 32 * (3 + 5 * j), [512, 1024][j % 2], M,
                      {"tc": True, "splits": [1, 2, 3, 7][j % 4], "warps": [8, 3, 1, 5][j % 4],
                       "pdl": j % 2}))
    cases.append(("mul1", 12, 256, 3, 0, 17 * 32, 5 * 1024 + 256, 8, None))  # partial col block
    cases.append(("mul1", 12, 256, 1, 1, 64, 512, 1, None))
    # the default split at one and at two blocks an SM (cols_split): many splits a column
    # block, ragged last splits
    for j, (k, M, bps) in enumerate([(3, 1, 1), (3, 1, 2), (2, 2, 2), (4, 1, 0)]):
        cases.append(("mul1", 12, 256, k, 0, 7168 - 96 * j, 2048, M, {"bps": bps}))
    return cases


def case_data(rng, i, case):
    """One `_cuda_cases` case's packed words, scales, x (float32, bfloat16 or float16 by
    i) and the numpy reference's output."""
    code, L, T, k, axis, rows, cols, M, cfg = case
    words, scales = random_packed(rng, code, k, L, T, rows, cols)
    x = torch.from_numpy(rng.standard_normal((M, cols if axis == 1 else rows))
                         .astype(np.float32))
    x = [x, x.bfloat16(), x.half()][i % 3]
    want = act_int8.matvec_reference(x.float().numpy(), words, scales, code=code, k=k, T=T,
                                     L=L, axis=axis)
    return words, scales, x, want


def cuda_matvec(xc, words, scales, case, **kw):
    """trellis_cuda.matvec of a case on the GPU (xc: x there already)."""
    code, L, T, k, axis, rows, cols, M, cfg = case
    n_in, n_out = (cols, rows) if axis == 1 else (rows, cols)
    return trellis_cuda.matvec(xc, torch.from_numpy(words.view(np.int32)).to(xc.device),
                               torch.from_numpy(scales).to(xc.device), code=code, k=k, T=T, L=L,
                               axis=axis, out_features=n_out, in_features=n_in, cfg=cfg, **kw)


def rel_err(y, want) -> float:
    return float(np.abs(y.cpu().double().numpy() - want).max() / np.abs(want).max())


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_cuda_int8_kernels_match_the_reference():
    """Fresh random packed tensors: k = 1..4, both axes, both codes, L 12/16,
    T 64/256/512, M = 1..8, block shapes and row splits varied, fp32/bf16/fp16 x;
    bf16/fp16 outputs equal the float32 output rounded by torch."""
    rng = np.random.default_rng(11)
    trellis_cuda.prebuild(sorted({(c[3], c[1], c[0]) for c in _cuda_cases()}))
    for i, case in enumerate(_cuda_cases()):
        code, L, T, k, axis, rows, cols, M, cfg = case
        words, scales, x, want = case_data(rng, i, case)
        xc = x.cuda()
        assert trellis_cuda.available(xc, code, k, L, T, cols, x.shape[1], axis), \
            trellis_cuda._failed
        try:
            y = cuda_matvec(xc, words, scales, case)
        except RuntimeError as e:  # name the case (bench/device/int8_cases.py runs them all)
            pytest.fail(f"case {i} {case}: {e}")
        err = rel_err(y, want)
        assert err < 1e-5, (*case, err)
        # the kernel's own rounding to a 16-bit output is torch's .to() of its float32
        dt = (torch.bfloat16, torch.float16)[i % 2]
        y16 = cuda_matvec(xc, words, scales, case, out_dtype=dt)
        assert y16.dtype == dt and torch.equal(y16, y.to(dt)), (code, L, T, k, axis, M, cfg)


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_cuda_linear_takes_the_int8_kernels_where_measured_faster(monkeypatch):
    rng = np.random.default_rng(3)
    code, k, L, T = "mul1", 3, 12, 256
    for axis in (0, 1):
        words, scales = random_packed(rng, code, k, L, T, 512, 1024)
        entry = {"bits": k, "group_size": T, "mode": "trellis",
                 "trellis": {"L": L, "code": code, "axis": axis, "interleave": False,
                             "version": 2}}
        lin = tt.TrellisLinear(torch.from_numpy(words.view(np.int32)),
                               torch.from_numpy(scales), entry).cuda()
        for m in (1, 8, 9):
            x = torch.from_numpy(rng.standard_normal((m, lin.in_features)).astype(np.float32))
            ref = act_int8.matvec_reference(x.numpy(), words, scales, code=code, k=k, T=T, L=L,
                                            axis=axis)
            got = lin(x.cuda()).cpu().double().numpy()
            err = np.abs(got - ref).max() / np.abs(ref).max()
            if m <= 2 or axis == 1 and m <= 8 or m in trellis_cuda.COLS_TC_MS:  # int8 kernels
                assert err < 1e-5, (axis, m, err)
            else:  # axis 0 outside COLS_TC_MS from M = 3: the float kernels; M = 9: expanded
                assert 1e-5 < err < 3e-2, (axis, m, err)
            xb = x.cuda().bfloat16()
            assert lin(xb).dtype == torch.bfloat16


def test_eval_loads_the_int8_semantics_when_asked(tmp_path, tiny_source, monkeypatch):
    """`tq-build eval` measures what the runtime computes: with
    TQBUILD_TRELLIS_ACT=int8 the artifact's trellis modules stay packed and their
    inputs are quantized; otherwise the model is dequantized to dense."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from cli_run import cli
    from conftest import write_recipe

    from tqbuild.eval.run import load_artifact

    write_recipe(tmp_path / "r.yaml", name="ev", source=tiny_source(),
                 output=tmp_path / "out", stages=[
                     "untie", "norm_fold", "rotate",
                     {"quantize": {"default": {"bits": 4, "group_size": 32}, "rules": [
                         {"match": r"mlp\.(gate|up|down)_proj$", "format": "trellis",
                          "bits": 3, "trellis": {"T": 64, "code": "mul1"}}]}}])
    assert cli(tmp_path, "r.yaml", "--no-lock").returncode == 0
    ids = torch.arange(1, 33)[None]
    monkeypatch.setenv("TQBUILD_TRELLIS_ACT", "float")
    dense = load_artifact(tmp_path / "out", "cpu")
    monkeypatch.setenv("TQBUILD_TRELLIS_ACT", "int8")
    packed = load_artifact(tmp_path / "out", "cpu")
    assert not any(isinstance(m, tt.TrellisLinear) for m in dense.modules())
    assert sum(isinstance(m, tt.TrellisLinear) for m in packed.modules()) == 3 * \
        dense.config.num_hidden_layers
    with torch.no_grad():
        a, b = dense(ids).logits, packed(ids).logits
    rel = ((a - b).norm() / a.norm()).item()
    assert 0 < rel < 0.05, rel  # int8 rounding: visible, small


def test_torch_compile_sees_one_op_per_module():
    """Under torch.compile a TrellisLinear is one opaque custom op (fullgraph: no
    graph break at the kernel calls) and computes what eager does."""
    rng = np.random.default_rng(9)
    k, L, T = 3, 12, 64
    words, scales = random_packed(rng, "mul1", k, L, T, 64, 128)
    lins = []
    for axis in (0, 1):
        entry = {"bits": k, "group_size": T, "mode": "trellis",
                 "trellis": {"L": L, "code": "mul1", "axis": axis, "interleave": False,
                             "version": 2}}
        lins.append(tt.TrellisLinear(torch.from_numpy(words.view(np.int32)),
                                     torch.from_numpy(scales), entry))
    model = torch.nn.Sequential(lins[1], torch.nn.ReLU(), lins[0])  # 128 -> 64 -> 128
    x = torch.from_numpy(rng.standard_normal((3, 128)).astype(np.float32))
    torch._dynamo.reset()
    seen = []

    def backend(gm, inputs):  # records the traced graph's calls, runs it as is
        seen.extend(str(n.target) for n in gm.graph.nodes)
        return gm.forward

    compiled = torch.compile(model, backend=backend, fullgraph=True)
    assert torch.allclose(compiled(x), model(x))
    assert sum("tqbuild.trellis_matmul" in t for t in seen) == 2, seen


def test_prebuild_for_compiles_each_library_once(monkeypatch):
    from types import SimpleNamespace as NS

    built = []
    monkeypatch.setattr(trellis_cuda, "prebuild", lambda cases: built.extend(cases))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    mods = [NS(k=3, L=12, code="mul1"), NS(k=3, L=12, code="mul1"), NS(k=2, L=12, code="mul1"),
            NS(k=3, L=12, code="3inst")]
    assert trellis_cuda.prebuild_for(mods) == [(2, 12, "mul1"), (3, 12, "mul1")]
    assert built == [(2, 12, "mul1"), (3, 12, "mul1")]
    monkeypatch.setenv("TQBUILD_TRELLIS_ACT", "float")
    assert trellis_cuda.prebuild_for(mods) == []


def test_tuning_defines_join_the_build_flags(monkeypatch):
    """TQBUILD_GEMV_FLAGS reaches nvcc and so the library's cache key."""
    from tqbuild.kernels import nvcc

    base = trellis_cuda._flags(3, 12, "mul1")
    monkeypatch.setenv("TQBUILD_GEMV_FLAGS", "-DTQ_COLS_DEPTH=2")
    tuned = trellis_cuda._flags(3, 12, "mul1")
    assert tuned == base + ["-DTQ_COLS_DEPTH=2"]
    monkeypatch.setattr(nvcc, "arch", lambda: "sm_90")
    assert nvcc.library_path(trellis_cuda.SOURCE, base) != \
        nvcc.library_path(trellis_cuda.SOURCE, tuned)


def test_a_local_header_joins_the_cache_key(tmp_path, monkeypatch):
    """The decode sources share headers shipped beside them (pdl_launch.cuh,
    mma16816.cuh, quant8.cuh, row_words.cuh, smem_abs.cuh): their bytes are part of each
    library's key, so editing one rebuilds them."""
    from tqbuild.kernels import nvcc
    from tqbuild.runtime import affine_cuda, pair_cuda

    for src, names in ((trellis_cuda.SOURCE, ["pdl_launch.cuh", "quant8.cuh", "row_words.cuh"]),
                       (affine_cuda.SOURCE, ["pdl_launch.cuh", "mma16816.cuh"]),
                       (pair_cuda.SOURCE, ["pdl_launch.cuh", "mma16816.cuh", "quant8.cuh",
                                           "row_words.cuh", "smem_abs.cuh"])):
        assert [h.name for h in nvcc.local_includes(src)] == names
        assert all(h.is_file() for h in nvcc.local_includes(src))
    monkeypatch.setattr(nvcc, "arch", lambda: "sm_90")
    (tmp_path / "k.cu").write_text('#include <cstdint>\n  #include "h.cuh"\n')
    (tmp_path / "h.cuh").write_text("// one\n")
    before = nvcc.library_path(tmp_path / "k.cu", [])
    (tmp_path / "h.cuh").write_text("// two\n")
    assert nvcc.library_path(tmp_path / "k.cu", []) != before


def test_streamed_eval_refuses_the_int8_mode(tmp_path, monkeypatch):
    from tqbuild.errors import BadInput
    from tqbuild.eval.run import path_window_logits

    (tmp_path / "optiq_metadata.json").write_text("{}")
    monkeypatch.setenv("TQBUILD_TRELLIS_ACT", "int8")
    with pytest.raises(BadInput, match="--stream"):
        path_window_logits(tmp_path, torch.zeros(1, 4, dtype=torch.long), 4, "cpu", True,
                           lambda *a: None)


def test_rows_kernel_choice_by_m_and_cfg():
    class Lib:  # the kernels' shared-memory needs, in bytes
        def __init__(self, need):
            self.need = need

        def tq_gemv_mma_smem(self, M, n, warps):
            return self.need

        def tq_gemv_fused_smem(self, M, n, rb, warps):
            return self.need

    small, big = Lib(1024), Lib(trellis_cuda.SMEM_LIMIT + 1)
    pick = trellis_cuda.rows_kernel
    m, t = trellis_cuda.MMA_FROM_M, max(trellis_cuda.TC_MS)
    assert pick(small, 1, 4096, 256, None) == "dp4a"
    assert pick(small, 2, 4096, 256, None) == "tc"
    assert pick(small, t, 4096, 256, None) == "tc"
    assert pick(small, t, 4096, 64, None) == "dp4a"  # T = 64: no rounds of 4 periods
    assert pick(small, t, 4064, 256, None) == "dp4a"  # 127 groups of inputs
    assert pick(small, m - 1, 4096, 256, None) == ("tc" if m - 1 <= t else "dp4a")
    assert pick(small, m, 4096, 256, None) == "mma"
    rt = trellis_cuda.TC_ROWS_UP_TO  # from MMA_FROM_M: rows_tc for the smaller row counts
    assert pick(small, m, 4096, 256, None, rt) == "tc"
    assert pick(small, 8, 4096, 256, None, rt + 1) == "mma"
    assert pick(small, 8, 4064, 256, None, rt) == "mma"  # rows_tc's geometry refuses
    assert pick(small, 8, 4096, 256, {"RB": 1}) == "dp4a"  # a rows cfg: dp4a kernel
    assert pick(small, 8, 4096, 256, {"prequant": False}) == "dp4a"
    assert pick(small, 2, 4096, 256, {"pdl": 0}) == "tc"  # the launch mode alone: default
    assert pick(small, m, 4096, 256, {"pdl": 1}) == "mma"
    assert pick(small, 1, 4096, 256, {"mma": True}) == "mma"
    assert pick(small, 8, 4096, 256, {"tc": True}) == "tc"
    assert pick(big, 8, 4096, 256, None) == "tc"  # x fits neither smem kernel
    assert pick(big, 8, 4064, 256, None) == "dp4a"  # (available() refuses this case)
    with pytest.raises(ValueError, match="does not fit"):
        pick(big, 8, 4096, 256, {"mma": True})
    with pytest.raises(ValueError, match="multiples of 128"):
        pick(small, 2, 4096, 64, {"tc": True})


def test_cols_kernel_choice_by_m_and_cfg(monkeypatch):
    serves = functools.partial(trellis_cuda.cols_tc_serves, k=3, L=12)
    per = trellis_cuda.cols_tc_per
    lo, hi = min(trellis_cuda.COLS_TC_MS), max(trellis_cuda.COLS_TC_MS)
    assert not serves(lo - 1) and serves(lo) and serves(hi)
    assert serves(1, {"tc": True}) and not serves(hi, {"tc": False})
    assert not serves(hi, {"splits": 3})  # a cols split cfg asks for the dp4a kernel
    assert serves(hi, {"splits": 3, "tc": True})
    # a thread's 4 weights must lie in one 32-bit window: 3k + L <= 32
    fits = trellis_cuda.cols_tc_serves
    assert fits(hi, k=4, L=20) and not fits(hi, k=4, L=21) and not fits(hi, k=3, L=24)
    with pytest.raises(ValueError, match="3k \\+ L <= 32"):
        fits(hi, {"tc": True}, k=3, L=24)
    assert per(17408, 5120, {"per": 96}) == 96
    assert per(17408, 5120, {"splits": 3}) == 5824  # ⌈17408 / 96⌉ · 32
    assert per(416, 512, {"splits": 3}) == 160  # 160, 160, 96: a ragged last split
    monkeypatch.setattr(gpu_info, "sm_count", lambda device=0: 132)
    assert per(17408, 5120) == per(17408, 5120, {"splits": 3})  # ⌈3 · 132 / 160⌉


def test_cols_split_fills_one_wave_at_the_occupancy_of_its_own_split():
    split = trellis_cuda.cols_split
    # the 8B down_proj (14336 inputs, 4096 outputs: 4 blocks of 32 periods), 132 SMs
    occ2 = lambda per: 2  # noqa: E731 - registers cap the kernel at 2 blocks an SM
    fits = lambda per: True  # noqa: E731
    assert split(14336, 4096, 132, occ2, fits) == 224  # 64 splits: 256 blocks ≤ 2·132
    assert split(14336, 4096, 132, occ2, fits, bps=1) == 448  # 32 splits, 128 blocks
    # a query that counts no blocks (a kernel never allowed the split's shared memory:
    # the old rule's trap) still gives one wave, at one block an SM
    assert split(14336, 4096, 132, lambda per: 0, fits) == 448
    # occupancy falls with the split's shared memory: the most b whose own split fits b
    by_smem = lambda per: 3 if per <= 128 else 2 if per <= 300 else 1  # noqa: E731
    assert split(14336, 4096, 132, by_smem, fits) == 224  # b = 3 -> 160 rows: only 2 fit
    assert split(17408, 5120, 132, occ2, fits) == 352  # 5 column blocks: 50 splits, 250
    # shared memory caps a split: never more rows than fit, however few the blocks
    assert split(14336, 64, 1, lambda per: 1, lambda per: per <= 4096) == 3584  # halved twice
    assert split(40, 64, 132, occ2, fits) == 32  # never under 32 rows


def test_cols_per_defaults_to_one_block_an_sm_as_measured(monkeypatch):
    class Lib:  # a library whose kernel holds 2 blocks an SM at any split
        def tq_gemv_cols_occupancy(self, M, per):
            return 2

        def tq_gemv_cols_smem(self, M, per):
            return 1024

    monkeypatch.setattr(gpu_info, "sm_count", lambda device=0: 132)
    per = trellis_cuda.cols_per
    assert trellis_cuda.COLS_BPS == 1  # H100: one block an SM beat two at M = 1
    assert per(14336, 4096, 1, Lib()) == 448  # 32 splits: 128 blocks
    assert per(14336, 4096, 1, Lib(), {"bps": 2}) == 224
    assert per(14336, 4096, 1, Lib(), {"bps": 0}) == 224  # the kernel's occupancy: 2
    monkeypatch.setattr(trellis_cuda, "COLS_BPS", 0)
    assert per(14336, 4096, 1, Lib()) == 224
    assert per(14336, 4096, 1, Lib(), {"splits": 7}) == 2048  # ⌈14336 / 224⌉ · 32
    assert per(14336, 4096, 1, Lib(), {"per": 96}) == 96


@pytest.mark.skipif(not CUDA or torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_cuda_kernels_run_on_the_tensors_device():
    """A model on the second GPU: the kernels launch there (the current device stays
    cuda:0), its cols kernel raised past 48 KB there too (a function's attributes are per
    device), and both GPUs give the reference's values."""
    rng = np.random.default_rng(6)
    cases = [("mul1", 12, 256, 3, 0, 4096, 256, 1, {"per": 4096}),  # cols, > 48 KB
             ("mul1", 12, 256, 3, 1, 256, 4096, 2, None)]  # rows
    for case in cases:
        words, scales, x, want = case_data(rng, 0, case)
        for dev in ("cuda:1", "cuda:0"):  # the second GPU first: no raise made before it
            y = cuda_matvec(x.to(dev), words, scales, case)
            assert y.device == torch.device(dev)
            assert rel_err(y, want) < 1e-5, (case, dev)


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_cuda_cols_raises_shared_memory_in_every_library():
    """Two (k, L, code) libraries each launch the cols kernel at M = 1 past 48 KB of shared
    memory (a split of 4096 inputs): each raises its own kernel's limit (session 22's
    process-wide `cols_allowed<M>` let the first library's raise stop the second's)."""
    rng = np.random.default_rng(5)
    for k in (2, 3):
        case = ("mul1", 12, 256, k, 0, 4096, 256, 1, {"per": 4096})  # 4096 inputs, fp32 x
        assert trellis_cuda.library(k, 12, "mul1").tq_gemv_cols_smem(1, 4096) > 48 * 1024
        words, scales, x, want = case_data(rng, 0, case)
        err = rel_err(cuda_matvec(x.cuda(), words, scales, case), want)
        assert err < 1e-5, (k, err)
