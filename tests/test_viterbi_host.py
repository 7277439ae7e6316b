"""kernels/viterbi_cuda.cu's kernel run on the host in the SIMT emulator (tests/simt;
g++ -std=c++20, skipped without it): its states equal the torch path's bit for bit,
as on the GPU (tests/test_viterbi_cuda.py), on random and tie-heavy inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import simt_harness
import torch

from tqbuild.kernels import viterbi
from tqbuild.kernels.viterbi_cuda import MODES

# (defines, id, fast): the fast builds run in every suite, the others with -m slow — each
# build compiles for ~10 s and runs 10 cases
BUILDS = [((), "default", True),
          (("TQ_VIT_REG=0", "TQ_VIT_HIST=0"), "neither", True),
          (("TQ_VIT_ROWS=0",), "rows0", False),
          (("TQ_VIT_HIST=1",), "hist1", False),
          (("TQ_VIT_HIST=2", "TQ_VIT_BUF3=0", "TQ_VIT_HSTEP=1"), "hist2", False),
          (("TQ_VIT_REG=1", "TQ_VIT_HIST=2"), "reg1-hist2", False),
          (("TQ_VIT_HIST=2", "TQ_VIT_BUF3=1", "TQ_VIT_HSTEP=1"), "hist2-buf3", False),
          (("TQ_VIT_SPLIT=0", "TQ_VIT_SWZ=0", "TQ_VIT_TREE=0"), "plain", False),
          (("TQ_VIT_SPLIT=0",), "split0", False),
          (("TQ_VIT_ROWS=4", "TQ_VIT_HIST=1"), "rows4-hist1", False),
          (("TQ_VIT_BT=0", "TQ_VIT_HIST=0"), "fused", True),
          (("TQ_VIT_BT=0", "TQ_VIT_HIST=2"), "fused-hist2", False),
          (("TQ_VIT_HIST=2", "TQ_VIT_HSTEP=2", "TQ_VIT_BUF3=0"), "hist2-step2", False),
          (("TQ_VIT_HIST=2", "TQ_VIT_HSTEP=2", "TQ_VIT_BUF3=1"), "hist2-step2-buf3", True),
          (("TQ_VIT_HSTEP=4",), "step4", False),
          (("TQ_VIT_BTW=32",), "btw32", False)]


@pytest.fixture(scope="module", params=[
    pytest.param(d, id=i, marks=() if fast else pytest.mark.slow) for d, i, fast in BUILDS])
def harness(request, tmp_path_factory) -> Path:
    """The kernel as built (codes of a group a thread in registers at k = 2, 3, the
    first rows of the first computed group in shared memory, each step's class minima
    copied out by one bulk copy a step — at k = 2 every other step's, at k = 3 with three
    cost buffers —, k = 4's groups shared by two threads, rotated cost stores, tournament
    minima, the L = 16 backtrack in a kernel of its own); with no register codes and
    backpointers throughout; with no cached rows; with the minima at every k stored by
    each thread, copied in bulk (two buffers, every step), with register codes, with three
    buffers; with none of split, rotation and tournament; with one thread a group at
    k = 4; with at most 4 cached rows and the minima stored by each thread; with the
    L = 16 backtrack in the forward kernel's block (with backpointers, with bulk-copied
    minima); with every other step's minima kept at every k (with two and with three cost
    buffers); with every fourth step's at k = 2; with 32 sequences a backtrack block."""
    return simt_harness.build("viterbi_host", "tqbuild/kernels", tmp_path_factory.mktemp("simt"),
                              request.param)


def torch_states(x: torch.Tensor, L: int, k: int, code: str) -> torch.Tensor:
    table = viterbi.code_tensor(code, L, x.device)
    T = x.shape[1]
    first = viterbi._pass(torch.roll(x, T // 2, dims=1).contiguous(), table, L, k, None)
    return viterbi._pass(x, table, L, k, first[:, T // 2] >> k)


def kernel_states(exe: Path, tmp: Path, x: torch.Tensor, L: int, k: int, code: str):
    B, T = x.shape
    inp, out = tmp / "in.bin", tmp / "out.bin"
    with open(inp, "wb") as f:
        np.array([B, T, L, k, MODES.get(code, 0)], np.int32).tofile(f)
        x.numpy().astype(np.float32).tofile(f)
        viterbi.code_tensor(code, L, "cpu").numpy().astype(np.float32).tofile(f)
    simt_harness.run(exe, inp, out)
    return torch.from_numpy(np.fromfile(out, np.int64).reshape(B, T))


@pytest.mark.parametrize("L,k,code,T", [(16, 2, "mul1", 256), (16, 3, "mul1", 256),
                                        (16, 4, "1mad", 64), (16, 3, "3inst", 48),
                                        (16, 2, "1mad", 54), (12, 3, "1mad", 128),
                                        (12, 2, "mul1", 64)])
def test_kernel_states_equal_torch(harness, tmp_path, L, k, code, T):
    x = torch.randn(2, T, generator=torch.Generator().manual_seed(L + k + T))
    assert torch.equal(kernel_states(harness, tmp_path, x, L, k, code),
                       torch_states(x, L, k, code))


@pytest.mark.parametrize("L,k", [(16, 2), (16, 3), (16, 4)])
def test_tie_heavy_inputs(harness, tmp_path, L, k):
    """All-zero rows (every path's first cost ties) and x on code values."""
    table = viterbi.code_tensor("mul1", L, "cpu")
    g = torch.Generator().manual_seed(3)
    x = torch.stack([torch.zeros(64), table[torch.randint(0, 2**L, (64,), generator=g)],
                     torch.randn(64, generator=g).round()])
    assert torch.equal(kernel_states(harness, tmp_path, x, L, k, "mul1"),
                       torch_states(x, L, k, "mul1"))
