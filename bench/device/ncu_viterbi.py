"""One L = 16 Viterbi call a k (mul1, 2048 sequences of 256) for Nsight Compute:

    ncu --clock-control none -k regex:viterbi_tailbiting \
        python bench/device/ncu_viterbi.py 2 3 4

(`bash bench/device/viterbi.sh ncu`; ncu replays each launch once a section pass)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tqbuild.kernels import viterbi, viterbi_cuda  # noqa: E402


def main() -> None:
    ks = [int(a) for a in sys.argv[1:] if a.isdigit()] or [2, 3, 4]
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(2048, 256, device="cuda", generator=g)
    table = viterbi.code_tensor("mul1", 16, "cuda")
    for k in ks:
        assert viterbi_cuda.available(x, 16, k)
        viterbi_cuda.viterbi_tailbiting(x, table, 16, k, "mul1")
        torch.cuda.synchronize()
        print("k", k, "done", flush=True)


if __name__ == "__main__":
    main()
