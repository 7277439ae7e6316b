"""Greedy decode tokens/s of a trellis model vs the same model in bf16 (CUDA).

    python bench/trellis_decode.py [--layers 8 --hidden 8192 --inter 28672]

A synthetic llama (random weights; speed does not depend on the values)
decodes greedily 64 new tokens in bf16 — with `generate` (eager) and with a
static KV cache replaying one CUDA graph per token — then every decoder linear is
swapped for a packed TrellisLinear (k = 3, L = 12, T = 256; random codes, any
bit pattern being a valid state — down_proj coded along its output dim as the
recipes do) and the same generation is timed again. Writes
bench/results/trellis_decode-cuda.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from hostinfo import host  # noqa: E402
from trellis_matvec import graph_time  # noqa: E402

from tqbuild.runtime.trellis_torch import TrellisLinear  # noqa: E402


def graph_tokens_per_s(model, new: int = 64, cache_len: int = 128) -> float:
    """Greedy decode with a static KV cache of cache_len slots, each token's forward
    replayed from one CUDA graph (launch overhead out of the way, as a serving stack
    would). The attention reads (and sdpa's repeat_kv copies) every slot whatever
    the position, so cache_len stands for the context length."""
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=cache_len)
    ids = torch.arange(1, 17, device="cuda")[None]
    with torch.no_grad():
        out = model(ids, past_key_values=cache, cache_position=torch.arange(16, device="cuda"),
                    use_cache=True)
        tok = out.logits[:, -1:].argmax(-1)
        pos = torch.tensor([16], device="cuda")

        def step():
            o = model(tok, past_key_values=cache, cache_position=pos, use_cache=True)
            tok.copy_(o.logits[:, -1:].argmax(-1))
            pos.add_(1)

        return 1.0 / graph_time(step, n_iter=new)


def tokens_per_s(model, new: int = 64) -> float:
    ids = torch.arange(1, 17, device="cuda")[None]
    model.generate(ids, max_new_tokens=8, do_sample=False, min_new_tokens=8)
    torch.cuda.synchronize()
    t = time.perf_counter()
    model.generate(ids, max_new_tokens=new, do_sample=False, min_new_tokens=new)
    torch.cuda.synchronize()
    return new / (time.perf_counter() - t)


def main() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=8192)
    ap.add_argument("--inter", type=int, default=28672)
    ap.add_argument("--k", type=int, default=3)
    a = ap.parse_args()
    cfg = LlamaConfig(hidden_size=a.hidden, intermediate_size=a.inter,
                      num_hidden_layers=a.layers, num_attention_heads=a.hidden // 128,
                      num_key_value_heads=8, vocab_size=32000, max_position_embeddings=512)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    bf16 = tokens_per_s(model)
    try:
        bf16_graph = graph_tokens_per_s(model)
        graph_error = None
    except Exception as e:  # noqa: BLE001 - recorded in the results
        bf16_graph, graph_error = None, f"{type(e).__name__}: {e}"[:300]
    g = torch.Generator(device="cuda").manual_seed(0)
    n = 0
    for layer in model.model.layers:
        for parent, names in ((layer.self_attn, ("q_proj", "k_proj", "v_proj", "o_proj")),
                              (layer.mlp, ("gate_proj", "up_proj", "down_proj"))):
            for nm in names:
                old = getattr(parent, nm)
                out_f, in_f = old.weight.shape
                axis = 0 if nm == "down_proj" else 1
                rows, cols = (out_f, in_f) if axis == 1 else (in_f, out_f)
                words = torch.randint(-2**31, 2**31 - 1, (rows, cols * a.k // 32),
                                      device="cuda", dtype=torch.int32, generator=g)
                scales = (torch.rand(rows, device="cuda", generator=g) * 0.02).half()
                entry = {"bits": a.k, "group_size": 256, "mode": "trellis",
                         "trellis": {"L": 12, "code": "3inst", "axis": axis,
                                     "interleave": False, "version": 1}}
                setattr(parent, nm, TrellisLinear(words, scales,
                                                  entry).cuda())
                del old
                n += 1
    torch.cuda.empty_cache()
    trellis = tokens_per_s(model)
    trellis_graph = graph_tokens_per_s(model) if bf16_graph else None
    res = {"graph_bf16_tokens_per_s": bf16_graph, "graph_trellis_tokens_per_s": trellis_graph,
           "graph_speedup": trellis_graph / bf16_graph if bf16_graph else None,
           "graph_error": graph_error,
           "host": host(), "layers": a.layers, "hidden": a.hidden, "inter": a.inter,
           "k": a.k, "trellis_modules": n, "bf16_tokens_per_s": bf16,
           "trellis_tokens_per_s": trellis, "speedup": trellis / bf16,
           "note": "greedy, 64 new tokens after 16 prompt tokens, random weights; "
                   "graph_*: static KV cache, one CUDA graph per token; the others: "
                   "transformers generate, eager"}
    print(json.dumps(res))
    (HERE / "results" / "trellis_decode-cuda.json").write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
