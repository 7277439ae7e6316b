"""Hessian capture + GPTQ for one 27B-shaped decoder layer (hidden 5120,
intermediate 17408, 40 heads / 8 KV heads of 128; synthetic bf16 weights) on
128 × 512 calibration tokens, through tq-build's own layer runner, capture and
guarded GPTQ — then the projection to 64 layers.

    python bench/gptq_layer_27b.py [--device cuda] [--samples 128] [--seq 512]
    -> bench/results/gptq_layer_27b-<device>.json
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import torch
from hostinfo import host

from tqbuild.models import family_for
from tqbuild.recipe import GuardParams, QuantSpec
from tqbuild.stages.hessian import HessianCapture
from tqbuild.stages.layer_forward import LayerRunner
from tqbuild.stages.quantize import quantize_tensor

HIDDEN, INTER, HEADS, KV, HD = 5120, 17408, 40, 8, 128
CONFIG = {"model_type": "llama", "hidden_size": HIDDEN, "intermediate_size": INTER,
          "num_attention_heads": HEADS, "num_key_value_heads": KV, "head_dim": HD,
          "num_hidden_layers": 64, "vocab_size": 4096, "rms_norm_eps": 1e-6,
          "max_position_embeddings": 4096, "rope_theta": 1e6, "tie_word_embeddings": False}


def synthetic_layer(g: torch.Generator) -> dict[str, torch.Tensor]:
    def w(o, i):
        return (torch.randn(o, i, generator=g) / i**0.5).to(torch.bfloat16).float()

    return {"input_layernorm.weight": 1 + 0.1 * torch.randn(HIDDEN, generator=g),
            "post_attention_layernorm.weight": 1 + 0.1 * torch.randn(HIDDEN, generator=g),
            "self_attn.q_proj.weight": w(HEADS * HD, HIDDEN),
            "self_attn.k_proj.weight": w(KV * HD, HIDDEN),
            "self_attn.v_proj.weight": w(KV * HD, HIDDEN),
            "self_attn.o_proj.weight": w(HIDDEN, HEADS * HD),
            "mlp.gate_proj.weight": w(INTER, HIDDEN), "mlp.up_proj.weight": w(INTER, HIDDEN),
            "mlp.down_proj.weight": w(HIDDEN, INTER)}


def sync(dev):
    if dev.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--samples", type=int, default=128)
    ap.add_argument("--seq", type=int, default=512)
    args = ap.parse_args()
    dev = args.device
    g = torch.Generator().manual_seed(0)
    state = synthetic_layer(g)
    runner = LayerRunner(CONFIG, family_for("llama"), dev)
    # activations entering the layer: unit-RMS residual-like inputs with a few outlier dims
    x = torch.randn(args.samples, args.seq, HIDDEN, generator=g)
    x[..., :8] *= 20
    x = x.to(dev)
    layer = runner.layer(3, state)
    runner.run(3, layer, x[:2])  # warm-up (kernels, rotary)
    sync(dev)
    t0 = time.perf_counter()
    cap = HessianCapture(layer, args.seq)
    y = runner.run(3, layer, x, on_sample=cap.start_batch)
    cap.close()
    sync(dev)
    t_h = time.perf_counter() - t0
    spec = QuantSpec(method="gptq", bits=4, group_size=128)
    per_matrix, events = {}, 0
    t1 = time.perf_counter()
    for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                 "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
        tm = time.perf_counter()
        w = state[f"{name}.weight"].to(dev)
        _, rec = quantize_tensor(f"{name}.weight", w, spec, torch.bfloat16,
                                 [cap.for_module(name)], GuardParams())
        sync(dev)
        per_matrix[name] = {"seconds": round(time.perf_counter() - tm, 2),
                            "shape": list(w.shape), "method": rec["method"],
                            "proxy_gptq_over_rtn": rec["hessian_proxy_loss"]["gptq_or_kept"]
                            / rec["hessian_proxy_loss"]["rtn"]}
        events += len(rec.get("guard_events", []))
    t_q = time.perf_counter() - t1
    total = t_h + t_q
    result = {
        "what": "one 27B-shaped llama layer: Hessian capture (per-sample float64 partials) "
                "+ guarded GPTQ 4-bit g128 of its 7 matrices (incl. packing)",
        "host": host(), "device": dev, "samples": args.samples, "seq_len": args.seq,
        "hessian_capture_s": round(t_h, 2), "gptq_s": round(t_q, 2), "layer_s": round(total, 2),
        "projection_64_layers_min": round(64 * total / 60, 1),
        "per_matrix": per_matrix, "guard_events": events,
        "peak_host_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "peak_gpu_mib": (round(torch.cuda.max_memory_allocated() / 2**20)
                         if dev.startswith("cuda") else None),
        "output_finite": bool(torch.isfinite(y).all()),
    }
    out = Path(__file__).parent / "results" / f"gptq_layer_27b-{dev.split(':')[0]}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
