"""`tq-build codec-check`: MSE of the tail-biting trellis code on i.i.d.
N(0, 1) sequences (QTIP Tables 1 and 2), and the encoder's throughput."""

from __future__ import annotations

import time

import torch

from .viterbi import quantize_blocks, reconstruct

# arXiv 2406.11235: Table 2 (L = 12, tail-biting, T = 256) and Table 1 (L = 16, k = 2)
PUBLISHED = {(12, 1): 0.2803, (12, 2): 0.0733, (12, 3): 0.0198, (12, 4): 0.0055,
             (16, 2): 0.069}


def codec_check(L: int = 12, k: int = 2, code: str = "1mad", T: int = 256,
                sequences: int = 4096, device: str = "cpu", seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)  # same inputs on every device
    x = torch.randn(sequences, T, generator=g).to(device)
    if device.startswith("cuda"):
        quantize_blocks(x[:2], L, k, code)  # warm-up (kernels, allocator)
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    states = quantize_blocks(x, L, k, code)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    err = (reconstruct(states, L, code).double() - x.double()).pow(2).mean()
    out = {"L": L, "k": k, "code": code, "T": T, "sequences": sequences,
           "mse": round(float(err), 6), "seconds": round(seconds, 3),
           "weights_per_s": round(sequences * T / seconds), "device": device}
    if (L, k) in PUBLISHED:
        out["published_mse"] = PUBLISHED[(L, k)]
    return out
