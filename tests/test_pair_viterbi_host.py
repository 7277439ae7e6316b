"""kernels/pair_viterbi.cu (the pair code's CUDA Viterbi) run on the host in the SIMT
emulator of tests/simt: its step states equal the torch path's (`viterbi._pair_pass`
tail-biting) bit for bit, on Gaussian inputs and on tie-heavy ones; the same kernels run on
the GPU in tests/test_pair_cuda.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import simt_harness
import torch

from tqbuild.kernels import viterbi
from tqbuild.kernels.trellis_codes import pair_entries


@pytest.fixture(scope="module")
def exe(tmp_path_factory) -> Path:
    return simt_harness.build("pair_viterbi_host", "tqbuild/kernels",
                              tmp_path_factory.mktemp("pairvit"))


def run(exe: Path, tmp: Path, x: torch.Tensor, k: int, entries=None) -> torch.Tensor:
    B, T = x.shape
    entries = pair_entries() if entries is None else entries
    inp, out = tmp / "in.bin", tmp / "out.bin"
    with open(inp, "wb") as f:
        np.array([B, T, k], np.int32).tofile(f)
        x.numpy().astype(np.float32).tofile(f)
        np.asarray(entries, dtype=np.float32).tofile(f)
    simt_harness.run(exe, inp, out, timeout=600)
    return torch.from_numpy(np.fromfile(out, np.int64).reshape(B, T // 2))


def torch_steps(x: torch.Tensor, k: int, entries=None) -> torch.Tensor:
    """The torch path's step states (pair_tailbiting before weight_states)."""
    B, T = x.shape
    L, K, P = 16, 2 * k, T // 2
    xp = x.view(B, P, 2)
    tab = torch.from_numpy(np.array(pair_entries() if entries is None else entries))
    from tqbuild.kernels.trellis_codes import pair_index

    idx = torch.from_numpy(pair_index(np.arange(2**L, dtype=np.uint32), L))
    first = viterbi._pair_pass(torch.roll(xp, P // 2, dims=1).contiguous(), tab, idx, L, K, None)
    return viterbi._pair_pass(xp, tab, idx, L, K, first[:, P // 2] >> K)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_states_equal_the_torch_path(exe, tmp_path, k):
    g = torch.Generator().manual_seed(k)
    x = torch.randn(2, 24, generator=g)
    assert torch.equal(run(exe, tmp_path, x, k), torch_steps(x, k))


@pytest.mark.parametrize("k", [2, 4])
def test_ties_go_where_the_torch_path_sends_them(exe, tmp_path, k):
    """All-zero rows and inputs equal to table values: many equal costs."""
    e = torch.from_numpy(pair_entries().copy())
    x = torch.zeros(2, 16)
    x[1] = e[torch.arange(8) * 37 % 512].reshape(-1)
    assert torch.equal(run(exe, tmp_path, x, k), torch_steps(x, k))


@pytest.mark.parametrize("k", [3, 4])
@pytest.mark.parametrize("levels", [1, 2])
def test_degenerate_tables_tie_everywhere_as_the_torch_path(exe, tmp_path, k, levels):
    """A table of two value pairs: most paths cost the same, so nearly every
    step's minimum is a tie decided by the smallest c — across the lanes sharing a class
    too — and the free end by the smallest state."""
    e = np.zeros((512, 2), np.float32)
    e[::2] = 0.5
    if levels == 2:
        e[1::2] = -0.25
    g = torch.Generator().manual_seed(levels)
    x = torch.randn(2, 16, generator=g)
    assert torch.equal(run(exe, tmp_path, x, k, e), torch_steps(x, k, e))
