"""One decoder layer's one-token attention, compiled: transformers' sdpa (under
torch.compile it copies the cached keys and values out to every query head,
repeat_kv) vs tq-build's tq_sdpa (runtime/gqa_attention.py: the key/value heads'
own attention over their groups' queries) vs tq_sdpa with split-KV flash decoding
(TQBUILD_DECODE_ATTN=1, runtime/decode_attention.py; where Triton runs: CUDA),
Llama-3-8B's heads (32 query / 8 key-value, head_dim 128), a static cache of S
positions, the first `--valid` of them attended (the rest a static cache's unused slots).
On CUDA each is timed as a decode step meets it: a CUDA graph replays the compiled call
over copies of the cache (as many layers' worth as make the keys and values ≥ 3× the L2,
at most 32), µs per call = per layer; on CPU, the median wall time of one call. (Session
25's figures before this, `…-s25-v*.json`, were host-bound single calls, not GPU time.)

    python bench/gqa_attention.py [--lengths 128,1024,4096,16384] [--dtype float32]
        [--valid 1.0] [--tag=-x]  # -> bench/results/gqa_attention-{cpu|cuda}{tag}.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from hostinfo import host  # noqa: E402
from trellis_matvec import copies_for, graph_time  # noqa: E402

from tqbuild.runtime import decode_attention, gqa_attention  # noqa: E402


class Layer(nn.Module):  # what the attention functions read of a decoder attention
    num_key_value_groups = 4
    is_causal = True
    training = False


def timed(fn, q, caches: list, mask, reps: int) -> float:
    """Seconds a call of fn over the caches' (k, v) pairs: on CUDA replayed from one
    CUDA graph of one call a cache (a decode step's layers, each its own bytes); on CPU the
    median of `reps` calls on the first (after 3 warm-up calls)."""
    if q.is_cuda:
        return graph_time(lambda: [fn(q, k, v, mask) for k, v in caches], reps) / len(caches)
    k, v = caches[0]
    for _ in range(3):
        fn(q, k, v, mask)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn(q, k, v, mask)
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def main() -> None:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", default="128,1024,4096,16384")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--valid", type=float, default=1.0)
    ap.add_argument("--tag", default="")
    ap.add_argument("--splits", default="0", help="tq_decode's splits to time (0: its plan)")
    a = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    dt = getattr(torch, a.dtype)
    layer = Layer()
    scale = 128**-0.5
    fns = {"sdpa": lambda q, k, v, m: sdpa_attention_forward(layer, q, k, v, m, scaling=scale)[0],
           "tq_sdpa": lambda q, k, v, m: gqa_attention.attention(layer, q, k, v, m,
                                                                 scaling=scale)[0]}
    splits = [int(n) for n in a.splits.split(",")]
    if dev == "cuda" and decode_attention.triton is not None:
        for n in splits:  # traced with TQBUILD_DECODE_ATTN=1, TQBUILD_DECODE_ATTN_SPLITS=n
            fns[f"tq_decode_s{n}"] = fns["tq_sdpa"]
    res = {"host": host(), "device": dev, "dtype": a.dtype,
           "heads": "32/8, head_dim 128", "compiled": True, "valid": a.valid, "rows": []}
    g = torch.Generator(device=dev).manual_seed(0)
    for S in map(int, a.lengths.split(",")):
        q = torch.randn(1, 32, 1, 128, device=dev, dtype=dt, generator=g)
        k, v = (torch.randn(1, 8, S, 128, device=dev, dtype=dt, generator=g) for _ in range(2))
        mask = (torch.arange(S, device=dev) < max(1, round(a.valid * S))).view(1, 1, 1, S)
        kv_bytes = 2 * k.numel() * k.element_size()
        n = min(32, copies_for(kv_bytes, torch.cuda.get_device_properties(0).L2_cache_size)) \
            if dev == "cuda" else 1
        caches = [(k, v)] + [(k.clone(), v.clone()) for _ in range(n - 1)]
        row: dict = {"S": S, "kv_MB": kv_bytes / 1e6, "copies": n}
        outs = {}
        for name, fn in fns.items():
            torch._dynamo.reset()
            os.environ["TQBUILD_DECODE_ATTN"] = "1" if name.startswith("tq_decode") else "0"
            os.environ["TQBUILD_DECODE_ATTN_SPLITS"] = name.split("_s")[-1] \
                if name.startswith("tq_decode") else "0"
            compiled = torch.compile(fn)
            outs[name] = compiled(q, k, v, mask)
            row[name + "_us"] = timed(compiled, q, caches, mask, reps=a.reps) * 1e6
        os.environ.pop("TQBUILD_DECODE_ATTN")
        os.environ.pop("TQBUILD_DECODE_ATTN_SPLITS")
        row["max_abs_diff"] = float((outs["sdpa"] - outs["tq_sdpa"]).abs().max())
        row["speedup"] = row["sdpa_us"] / row["tq_sdpa_us"]
        for n in (splits if f"tq_decode_s{splits[0]}" in outs else []):
            row[f"decode_s{n}_max_abs_diff"] = float(
                (outs["sdpa"] - outs[f"tq_decode_s{n}"]).abs().max())
            row[f"decode_s{n}_vs_tq_sdpa"] = row["tq_sdpa_us"] / row[f"tq_decode_s{n}_us"]
        res["rows"].append(row)
        print(json.dumps(row), flush=True)
    out = HERE / "results" / f"gqa_attention-{dev}{a.tag}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
