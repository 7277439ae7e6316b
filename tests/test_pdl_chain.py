"""The decode kernels between inductor's kernels with programmatic dependent launch
(TORCHINDUCTOR_ENABLE_PDL=1 lets inductor's kernels start theirs early; our kernels
may then start before x is written and must wait for it): a compiled
x -> 2x -> module -> y/2, replayed from a CUDA graph on fresh inputs, equals the
module's eager output on 2x every time (a read of x before the kernel ahead wrote it
would see the last replay's). The CUDA cases run on a GPU only."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from tqbuild.runtime.affine_torch import AffineLinear
from tqbuild.runtime.trellis_torch import TrellisLinear

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs CUDA")


def affine(g: torch.Generator, out_f: int, in_f: int, bits: int = 4) -> AffineLinear:
    words = torch.randint(-2**31, 2**31 - 1, (out_f, in_f * bits // 32), generator=g,
                          dtype=torch.int32)
    scales = (torch.rand(out_f, in_f // 64, generator=g) * 0.01).bfloat16()
    return AffineLinear(words, scales, (-(2 ** (bits - 1)) * scales.float()).bfloat16(), bits, 64)


def trellis(rows: int, cols: int, axis: int, seed: int, code: str = "mul1") -> TrellisLinear:
    rng = np.random.default_rng(seed)
    words = rng.integers(0, 2**32, (rows, cols * 3 // 32), dtype=np.uint32)
    scales = (rng.random(rows) * 0.02 + 0.01).astype(np.float16)
    entry = {"bits": 3, "group_size": 256, "mode": "trellis",
             "trellis": {"L": 16 if code == "pair" else 12, "code": code, "axis": axis,
                         "interleave": False, "version": 3 if code == "pair" else 2}}
    return TrellisLinear(torch.from_numpy(words.view(np.int32)), torch.from_numpy(scales), entry)


def modules() -> dict:
    g = torch.Generator().manual_seed(3)
    return {"affine4": affine(g, 1536, 1024), "affine8": affine(g, 1024, 1024, bits=8),
            "trellis-rows": trellis(2048, 1024, 1, 1),  # out 2048, in 1024
            "trellis-cols": trellis(4096, 1024, 0, 2),  # stored [in 4096, out 1024]
            "pair-rows": trellis(2048, 1024, 1, 3, "pair"),
            "pair-cols": trellis(4096, 1024, 0, 4, "pair")}


@needs_cuda
@pytest.mark.parametrize("name", ["affine4", "affine8", "trellis-rows", "trellis-cols",
                                  "pair-rows", "pair-cols"])
def test_compiled_chain_with_pdl_equals_eager(name, monkeypatch):
    import torch._inductor.config as ind

    from tqbuild.runtime import affine_cuda, pair_cuda, trellis_cuda

    if not hasattr(ind.triton, "enable_pdl"):
        pytest.skip("this torch's inductor has no PDL")
    monkeypatch.setattr(ind.triton, "enable_pdl", True)
    monkeypatch.setattr(pair_cuda, "_libs", {})  # built again, now with TQ_PDL_IN
    monkeypatch.setattr(trellis_cuda, "_libs", {})
    monkeypatch.setattr(affine_cuda, "_library", functools.cache(affine_cuda._library.__wrapped__))
    torch._dynamo.reset()
    mod = modules()[name].cuda()

    def chain(x):
        return mod(x * 2) * 0.5

    step = torch.compile(chain)
    x = torch.zeros(1, mod.in_features, device="cuda", dtype=torch.bfloat16)
    for _ in range(2):
        step(x)  # compile and warm up outside the graph
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = step(x)
    g = torch.Generator(device="cuda").manual_seed(0)
    for _ in range(20):
        x.copy_(torch.randn(x.shape, device="cuda", generator=g))
        graph.replay()
        want = mod(x * 2) * 0.5
        assert torch.equal(y, want)


@pytest.mark.parametrize("env,inductor,want", [
    ("", False, []),
    ("", True, ["-DTQ_PDL_IN=1"]),
    ("-DTQ_COLS_DEPTH=2", True, ["-DTQ_COLS_DEPTH=2", "-DTQ_PDL_IN=1"]),
    ("-DTQ_PDL_IN=0", True, ["-DTQ_PDL_IN=0"]),
    ("-DTQ_PDL_IN=1", False, ["-DTQ_PDL_IN=1"]),
    ("-DTQ_PDL_INX=2", True, ["-DTQ_PDL_INX=2", "-DTQ_PDL_IN=1"])])
def test_decode_kernels_follow_inductors_pdl(monkeypatch, env, inductor, want):
    """Our kernels' PDL is on by default exactly where inductor's is; an explicit
    define in the flags wins either way."""
    from tqbuild.runtime import affine_cuda, gpu_info, trellis_cuda
    monkeypatch.setenv("TQBUILD_GEMV_FLAGS", env)
    monkeypatch.setenv("TQBUILD_AFFINE_FLAGS", env.replace("TQ_PDL_IN", "TQ_AFF_PDL"))
    monkeypatch.setattr(gpu_info, "inductor_pdl", lambda: inductor)
    assert trellis_cuda._flags(3, 12, "mul1")[3:] == want
    assert affine_cuda.flags() == [f.replace("TQ_PDL_IN", "TQ_AFF_PDL") for f in want]


def test_inductor_pdl_reads_torchs_config(monkeypatch):
    from torch._inductor import config

    from tqbuild.runtime import gpu_info
    monkeypatch.setattr(config.triton, "enable_pdl", True)
    assert gpu_info.inductor_pdl()
    monkeypatch.setattr(config.triton, "enable_pdl", False)
    assert not gpu_info.inductor_pdl()


def test_pdl_only_on_gpus_that_run_it(monkeypatch):
    """As inductor: sm_90 and later, not ROCm (decode_attention's gdc_wait would not
    compile on an sm_80)."""
    from tqbuild.runtime import gpu_info
    check = gpu_info.has_pdl.__wrapped__  # uncached
    for cap, hip, want in (((9, 0), None, True), ((10, 0), None, True), ((8, 0), None, False),
                           ((9, 4), "6.2", False)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=0, c=cap: c)
        monkeypatch.setattr(torch.version, "hip", hip)
        assert check(0) is want, (cap, hip)
