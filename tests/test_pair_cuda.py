"""The pair code's CUDA decode-matvec kernels (runtime/pair_gemv.cu through
runtime/pair_cuda.py) against the float64 reference of the same int8 arithmetic, on
fresh random words and inputs: every rows instance, the cols path, and a TrellisLinear
on CUDA. Skipped without a GPU (the same kernels run on the host in
tests/test_pair_gemv_host.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_pair_gemv_host import cols_case, quantize, rows_ref

from tqbuild.formats import trellis as fmt
from tqbuild.kernels.trellis_codes import values_of

needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9,
    reason="needs an sm_90 GPU")


def _w16(words: np.ndarray, k: int, T: int, L: int) -> np.ndarray:
    return values_of(fmt.states_of(words, k, T, L), "pair", L).astype(np.float64) * 8192


def test_available_only_for_the_pair_code_on_cuda():
    from tqbuild.runtime import pair_cuda

    x = torch.zeros(1, 256)
    assert not pair_cuda.available(x, "pair", 3, 16, 256, 1, 64, 256)  # CPU tensor
    if torch.cuda.is_available():
        assert not pair_cuda.available(x.cuda(), "mul1", 3, 16, 256, 1, 64, 256)


@needs_cuda
def test_cols_not_served_past_two_tiles_a_block():
    """Down_proj-like (axis 0) weights of more 1024-output tiles than the GPU has SMs (blocks)
    would give a block units of three tiles: the module runs expanded instead."""
    from tqbuild.runtime import pair_cuda

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    x = torch.zeros(1, 256, device="cuda", dtype=torch.bfloat16)
    assert pair_cuda.available(x, "pair", 3, 16, 256, 0, sms * 1024, 256)
    assert not pair_cuda.available(x, "pair", 3, 16, 256, 0, (sms + 1) * 1024, 256)


def test_rows_instances_match_the_library_source():
    """The Python list of rows instances is the one the CUDA source compiles."""
    import re

    from tqbuild.runtime import pair_cuda

    src = pair_cuda.SOURCE.read_text()
    body = src[src.index("#define TQ_PAIR_ROWS_INSTANCES"):].split("\n\n", 1)[0]
    found = [tuple(int(v) for v in m) for m in
             re.findall(r"TQ_PAIR_ROWS\((\d+), (\d+), (\d+), (\d+)\)", body)]
    assert found == pair_cuda.ROWS_INSTANCES
    assert all((M, *c) in found for M, c in pair_cuda.ROWS_CFG.items())
    assert all(pair_cuda.rows_mma(k, 256) in pair_cuda.ROWS_MMA_CFGS for k in (2, 3, 4))  # rb = 0
    assert not set(pair_cuda.ROWS_MMA_CFGS) & set(pair_cuda.ROWS_CFG.values())


def test_rows_mma_takes_the_longest_run_a_block_holds():
    """Each k's measured run of periods (ROWS_MMA_PP) where T holds it, else the longest
    shorter one: tq_pair_rows_mma refuses a run over two blocks (T < 32·pp)."""
    from tqbuild.runtime import pair_cuda

    assert [pair_cuda.rows_mma(k, 256)[1] for k in (2, 3, 4)] == [4, 4, 2]
    assert [pair_cuda.rows_mma(3, T)[1] for T in (32, 64, 96, 128)] == [1, 2, 2, 4]
    assert pair_cuda.rows_mma(4, 32)[1] == 1


def test_cols_rows_a_launch_match_the_library_source():
    """pair_cuda sizes the cols scratch for COLS_M rows a launch: the C side's COLS_M, the
    rows it shares a decode over, must be the same (a larger one would write past it)."""
    import re

    from tqbuild.runtime import pair_cuda

    found = re.findall(r"constexpr int COLS_M = (\d+);", pair_cuda.SOURCE.read_text())
    assert found == [str(pair_cuda.COLS_M)]


def test_ctypes_signatures_match_the_c_declarations():
    """Every entry point's ctypes argument list is its C parameter list (a mismatch was
    once found only on a GPU)."""
    import ctypes
    import re

    from tqbuild.runtime import pair_cuda

    src = pair_cuda.SOURCE.read_text()
    kinds = {"void*": ctypes.c_void_p, "int": ctypes.c_int, "float": ctypes.c_float,
             "size_t": ctypes.c_size_t}
    for name, (res, args) in pair_cuda.SIGNATURES.items():
        m = re.search(rf"^(\w+) {name}\(([^)]*)\)", src, re.M)
        assert m, name
        params = [re.sub(r"\s+", " ", a.replace("const ", "")).strip().rsplit(" ", 1)[0]
                  .replace(" *", "*") for a in m.group(2).split(",") if a.strip()]
        assert kinds[m.group(1)] is res, name
        assert [kinds[t] for t in params] == args, name


def _stored_rows(g, rows: int, n: int, k: int):
    """Fresh random words [rows, n·k/32] and fp16 row scales in [0.5, 1.5)."""
    words = g.integers(0, 2**32, (rows, n * k // 32), dtype=np.uint64).astype(np.uint32)
    return words, (g.random(rows) + 0.5).astype(np.float16)


def _rows_matvec(x, words, scales, k: int, T: int, L: int, cfg) -> np.ndarray:
    """pair_cuda.matvec along axis 1 on the GPU with rows cfg `cfg`, as float64 on the host."""
    from tqbuild.runtime import pair_cuda

    rows, n = words.shape[0], x.shape[1]
    got = pair_cuda.matvec(x.cuda(), torch.from_numpy(words.view(np.int32)).cuda(),
                           torch.from_numpy(scales).cuda(), k=k, T=T, L=L, axis=1,
                           out_features=rows, in_features=n, cfg=cfg)
    return got.double().cpu().numpy()


def _instances():
    from tqbuild.runtime import pair_cuda

    return [(M, (rb, wpr, nth)) for M, rb, wpr, nth in pair_cuda.ROWS_INSTANCES]


@needs_cuda
@pytest.mark.parametrize("k,L", [(2, 16), (3, 16), (4, 16), (3, 12)])
@pytest.mark.parametrize("M,cfg", _instances())
def test_rows_kernel_equals_the_reference(k, L, M, cfg):
    g = np.random.default_rng(k * 1000 + L * 10 + M)
    rows, n, T = 300, 8192 if M == 8 else 1024, 256  # M = 8 × 8192: the tight layout
    words, scales = _stored_rows(g, rows, n, k)
    x = torch.from_numpy(g.standard_normal((M, n)).astype(np.float32)).bfloat16()
    ref = rows_ref(x.float().numpy(), _w16(words, k, T, L), scales) / 8192
    got = _rows_matvec(x, words, scales, k, T, L, cfg)
    err = np.abs(got - ref).max()
    assert err <= 1e-5 * np.abs(ref).max()


@needs_cuda
@pytest.mark.parametrize("k,L", [(2, 16), (3, 16), (4, 16), (3, 12)])
@pytest.mark.parametrize("pp", [1, 2, 4])
@pytest.mark.parametrize("M,dtype,n", [(1, torch.bfloat16, 1024), (2, torch.float16, 1024),
                                       (4, torch.bfloat16, 8192), (5, torch.float32, 1024),
                                       (8, torch.bfloat16, 4096), (8, torch.float16, 1024)])
def test_rows_mma_equals_the_reference(k, L, M, dtype, n, pp):
    """pair_rows_mma (ROWS_MMA) on the GPU's tensor cores: x and the entries in bf16 (fp16
    for fp16 x; float32 x rounded to bf16), float32 sums; 300 rows (a last tile partly
    filled), x's rows below and above the table at 4096 and 8192 inputs."""
    from test_pair_rows_mma_host import X_BF16, X_F16, X_F32, mma_ref

    g = np.random.default_rng(k * 100 + L + M * 7 + n)
    rows, T = 300, 256
    words, scales = _stored_rows(g, rows, n, k)
    x = torch.from_numpy(g.standard_normal((M, n)).astype(np.float32)).to(dtype)
    xdt = {torch.bfloat16: X_BF16, torch.float16: X_F16, torch.float32: X_F32}[dtype]
    ref = mma_ref(x.float().numpy(), _w16(words, k, T, L), scales, xdt) / 8192
    got = _rows_matvec(x, words, scales, k, T, L, (0, pp, 512))
    err = np.abs(got - ref).max()
    assert err <= 1e-5 * np.abs(ref).max()


@needs_cuda
@pytest.mark.parametrize("k,L", [(2, 16), (3, 16), (4, 16), (3, 12)])
@pytest.mark.parametrize("n_in,n_out,T,M", [(512, 1536, 256, 1), (1024, 5120, 256, 2),
                                            (96, 512, 64, 1), (17408, 5120, 256, 1)])
@pytest.mark.parametrize("sub", [1, 2])
def test_cols_kernel_equals_the_reference(k, L, n_in, n_out, T, M, sub):
    from tqbuild.runtime import pair_cuda

    words, scales, xn, w16 = cols_case(k, L, n_in, n_out, T, M, seed=k + n_in + M)
    x = torch.from_numpy(xn)
    xs = (xn * scales.astype(np.float32)[None, :]).astype(np.float32)
    q, gs = quantize(xs)
    ref = np.einsum("mgj,gjo->mgo", q, w16.reshape(-1, 32, n_out))
    ref = (ref * gs[:, :, None]).sum(1) / 8192
    got = pair_cuda.matvec(x.cuda(), torch.from_numpy(words.view(np.int32)).cuda(),
                           torch.from_numpy(scales).cuda(), k=k, T=T, L=L, axis=0,
                           out_features=n_out, in_features=n_in, cfg=(sub, 0))
    err = np.abs(got.double().cpu().numpy() - ref).max()
    assert err <= 1e-5 * np.abs(ref).max()


@needs_cuda
@pytest.mark.parametrize("k,L,n_in,n_out,T", [
    *((k, L, n_in, n_out, T) for k, L in [(2, 16), (3, 16), (4, 16), (3, 12)]
      for n_in, n_out, T in [(512, 1536, 256), (96, 512, 64)]),
    (3, 16, 17408, 5120, 256)])  # the down_proj shape once (its reference takes seconds)
@pytest.mark.parametrize("sub", [1, 2])
def test_cols_kernel_in_fp16_is_within_the_int8_kernels_error(k, L, n_in, n_out, T, sub):
    """The packed-fp16 walk (cfg (sub, 1)) against the exact product of the decoded
    weights and the inputs: within 2^-9 of the largest output and closer than the int8
    walk (as tests/test_pair_gemv_host.py checks it in the emulator)."""
    from tqbuild.runtime import pair_cuda

    words, scales, xn, w16 = cols_case(k, L, n_in, n_out, T, 1, seed=k + n_in + 11)
    xn[0, 5] = 40.0
    x = torch.from_numpy(xn)
    exact = (xn.astype(np.float64) * scales.astype(np.float64)[None, :]) @ w16 / 8192
    dims = dict(k=k, T=T, L=L, axis=0, out_features=n_out, in_features=n_in)
    w, sc = torch.from_numpy(words.view(np.int32)).cuda(), torch.from_numpy(scales).cuda()
    top = np.abs(exact).max()
    err = {h: np.abs(pair_cuda.matvec(x.cuda(), w, sc, cfg=(sub, h), **dims).double().cpu()
                     .numpy() - exact).max() / top for h in (0, 1)}
    assert err[1] <= 2**-9 and err[1] < err[0], err


@needs_cuda
@pytest.mark.parametrize("k,L,n_in,n_out,T,M", [
    *((k, L, 512, 1536, 256, M) for k, L in [(2, 16), (3, 16), (4, 16), (3, 12)]
      for M in (2, 3, 4, 5, 8)),
    (3, 16, 96, 512, 64, 4), (3, 16, 17408, 5120, 256, 4)])
@pytest.mark.parametrize("sub", [1, 2])
def test_cols_rows_share_one_decode_within_the_fp16_error(k, L, n_in, n_out, T, M, sub):
    """The packed-fp16 walk at M > 1 (up to 4 rows a launch sharing one decode, summed in
    fp16 over a walker's range): each row within 2^-9 of its largest exact output and
    closer than the int8 walk (as tests/test_pair_gemv_host.py checks it in the emulator)."""
    from tqbuild.runtime import pair_cuda

    words, scales, xn, w16 = cols_case(k, L, n_in, n_out, T, M, seed=k + n_in + M + 29)
    xn[M - 1, 5] = 40.0
    x = torch.from_numpy(xn)
    exact = (xn.astype(np.float64) * scales.astype(np.float64)[None, :]) @ w16 / 8192
    dims = dict(k=k, T=T, L=L, axis=0, out_features=n_out, in_features=n_in)
    w, sc = torch.from_numpy(words.view(np.int32)).cuda(), torch.from_numpy(scales).cuda()
    top = np.abs(exact).max(axis=1)
    err = {h: np.abs(pair_cuda.matvec(x.cuda(), w, sc, cfg=(sub, h), **dims).double().cpu()
                     .numpy() - exact).max(axis=1) / top for h in (0, 1)}
    assert (err[1] <= 2**-9).all() and (err[1] < err[0]).all(), err


@needs_cuda
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("k", [2, 4])
def test_misaligned_words_give_the_aligned_result(axis, k):
    """The kernels load a period's words as one 8- or 16-byte vector at k = 2, 4: words
    that start 4 bytes past an aligned address (a view into a larger buffer) are served
    (copied), not read misaligned, and the library refuses such a pointer itself."""
    from tqbuild.runtime import pair_cuda

    g = np.random.default_rng(k + 7 * axis)
    rows, cols, T, L = 256, 1024, 256, 16
    flat = torch.from_numpy(g.integers(0, 2**32, rows * cols * k // 32 + 1, dtype=np.uint64)
                            .astype(np.uint32).view(np.int32)).cuda()
    shifted = flat[1:].view(rows, cols * k // 32)
    assert shifted.data_ptr() % 16 == 4
    scales = torch.from_numpy((g.random(rows) + 0.5).astype(np.float16)).cuda()
    x = torch.randn(1, rows if axis == 0 else cols, device="cuda")
    dims = dict(k=k, T=T, L=L, axis=axis, out_features=cols if axis == 0 else rows,
                in_features=rows if axis == 0 else cols)
    assert torch.equal(pair_cuda.matvec(x, shifted, scales, **dims),
                       pair_cuda.matvec(x, shifted.clone(), scales, **dims))
    lib = pair_cuda.library(k, L)
    out = torch.empty(1, dims["out_features"], device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    if axis == 1:
        rc = lib.tq_pair_rows(shifted.data_ptr(), scales.data_ptr(), pair_cuda._table(x.device)
                              .data_ptr(), x.data_ptr(), 0, out.data_ptr(), 0, 1, rows, cols, T,
                              *pair_cuda.ROWS_CFG[1], pair_cuda.FACTOR, 4, 0, stream)
    else:
        part = torch.empty(4 * 2050, device="cuda")
        rc = lib.tq_pair_cols(shifted.data_ptr(), scales.data_ptr(), pair_cuda._table(x.device)
                              .data_ptr(), x.data_ptr(), 0, part.data_ptr(), out.data_ptr(), 0,
                              1, rows, cols, T, 1, 0, pair_cuda.FACTOR, 4, 0, stream)
    assert rc == -3


@needs_cuda
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_outputs_are_the_float_outputs_rounded(axis, dtype):
    from tqbuild.runtime import pair_cuda

    g = np.random.default_rng(axis)
    rows, cols, T, k, L = 256, 1024, 256, 3, 16
    words = torch.from_numpy(g.integers(0, 2**32, (rows, cols * k // 32), dtype=np.uint64)
                             .astype(np.uint32).view(np.int32)).cuda()
    scales = torch.from_numpy((g.random(rows) + 0.5).astype(np.float16)).cuda()
    x = torch.randn(2, rows if axis == 0 else cols, device="cuda", dtype=dtype)
    dims = dict(k=k, T=T, L=L, axis=axis, out_features=cols if axis == 0 else rows,
                in_features=rows if axis == 0 else cols)
    f32 = pair_cuda.matvec(x, words, scales, **dims)
    half = pair_cuda.matvec(x, words, scales, out_dtype=dtype, **dims)
    assert half.dtype == dtype and torch.equal(half, f32.to(dtype))


@needs_cuda
@pytest.mark.parametrize("axis,M,k", [(0, 2, 3), (1, 2, 3), (1, 5, 2), (1, 5, 3), (1, 5, 4)])
def test_trellis_linear_runs_the_kernels_on_cuda(axis, M, k):
    """A pair-code TrellisLinear on CUDA (the kernels: rows at M = 5 on the tensor cores,
    each k's default run of periods) against its expanded weight."""
    from tqbuild.kernels import viterbi
    from tqbuild.runtime.trellis_torch import TrellisLinear

    T, L = 256, 16
    rows, cols = 256, 512
    g = torch.Generator().manual_seed(axis)
    st = viterbi.quantize_blocks(torch.randn(rows * cols // T, T, generator=g), L, k,
                                 "pair").reshape(rows, cols)
    scales = (torch.rand(rows, generator=g) + 0.5).half()
    words = fmt.pack(st.numpy(), k, T)
    entry = {"bits": k, "group_size": T, "trellis": {"L": L, "code": "pair", "axis": axis,
                                                      "interleave": False, "version": 3}}
    mod = TrellisLinear(torch.from_numpy(words.view(np.int32)), scales, entry).cuda()
    dense = mod.weight_f32()
    x = torch.randn(M, dense.shape[1], generator=g).cuda().bfloat16()
    y = mod(x).float()
    ref = x.float() @ dense.t()
    assert (y - ref).abs().max() <= 0.03 * ref.abs().max()  # int8 x (M = 2) / bf16 (M = 5)


@needs_cuda
@pytest.mark.parametrize("k", [2, 3, 4])
def test_cuda_viterbi_states_equal_the_torch_path(k):
    """The codec set's shape (here 512 × 256, several launches' worth of blocks) and
    tie-heavy rows: zeros, and inputs equal to table values."""
    from tqbuild.kernels import pair_viterbi_cuda, viterbi
    from tqbuild.kernels.trellis_codes import pair_entries

    g = torch.Generator().manual_seed(k)
    x = torch.randn(512, 256, generator=g)
    x[0] = 0
    x[1] = torch.from_numpy(pair_entries()[torch.arange(128) * 7 % 512].reshape(-1))
    assert pair_viterbi_cuda.available(x.cuda(), 16, k)
    got = pair_viterbi_cuda.tailbiting_steps(x.cuda(), k).cpu()
    assert torch.equal(got, viterbi._pair_steps_torch(x, 16, k))
    st = viterbi.quantize_blocks(x.cuda(), 16, k, "pair").cpu()  # through the dispatch
    assert torch.equal(st, viterbi.weight_states(got, k, 16))


@needs_cuda
def test_cuda_viterbi_serves_ldlq():
    """A pair-code LDLQ tensor on CUDA: the CUDA kernels code it (states equal the torch
    path's on the same targets) and the proxy loss sits near the CPU build's."""
    from tqbuild.stages.trellis import Geometry, trellis_guarded

    g = torch.Generator().manual_seed(5)
    w = 0.02 * torch.randn(128, 512, generator=g)
    a = torch.randn(2048, 512, generator=g)
    h = (a.T @ a).double()
    geo = Geometry(L=16, k=3, T=256, code="pair", axis=1, group=256)
    cpu = trellis_guarded(w, h, geo)
    gpu = trellis_guarded(w.cuda(), h.cuda(), geo)
    assert gpu.method == cpu.method == "ldlq"
    assert abs(gpu.proxy_loss - cpu.proxy_loss) <= 0.02 * cpu.proxy_loss
