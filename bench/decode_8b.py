"""Greedy decode tokens/s of an 8B-shaped model on the H200: bf16, an affine
4-bit model, and the Q3 layout (MLP trellis k = 3, attention affine 4-bit).

    python bench/decode_8b.py [--compile] [--only bf16,q3] [--no-eager] [--tag=-x]
        # -> bench/results/decode_8b-cuda{tag}.json

A random-weight llama with Llama-3-8B's shapes (hidden 4096, MLP 14336, 32
layers, 32/8 heads, vocab 128256; speed does not depend on the values) decodes
64 tokens greedily with a static KV cache, one CUDA graph per token, through
transformers. Variants swap the decoder linears in place:
  bf16      — as built;
  affine4   — every decoder linear 4-bit affine, group 64, on torch's tinygemm
              int4 kernel (`aten._weight_int4pack_mm`, the kernel torchao
              serves int4 weights with: the strong 4-bit baseline);
  q3        — MLP TrellisLinear (mul1, k = 3, L = 12, T = 256, down_proj coded
              along its output dim as the recipes do) on the int8-activation
              CUDA kernels, attention affine 4-bit as `affine4`;
  q3-float  — the same with TQBUILD_TRELLIS_ACT=float (the Triton float kernels);
  q3-fused  — q3 with gate and up stacked into one module (runtime/fused_mlp.py:
              one kernel call, x quantized once), as the CUDA loaders serve it;
  q3-attn-bf16 — q3's MLP, attention left in bf16 (the MLP's share);
  affine4-cu — every decoder linear tq-build's own AffineLinear (MLX affine
              4-bit, group 64, bf16 scales and biases) on its tensor-core CUDA
              kernel (runtime/affine_cuda.py), as the artifacts' runtime serves them;
  q3-fused-cu — q3-fused with its attention on AffineLinear: the Q3 artifact
              as the transformers runtime runs it;
  affine4-tq, q3-fused-tq — the same with TQBUILD_AFFINE_KERNEL=triton (the
              Triton kernel, runtime/affine_triton.py);
  q3-fused-cu-lm8 — q3-fused-cu with lm_head 8-bit affine (group 64) on
              AffineLinear, as the recipes quantize it;
  q3-fused-cu-lm8-qkv — that with q, k and v in one module (runtime/fused_qkv.py),
              as the CUDA loaders now serve an artifact;
  affine4-cu-lm8-qkv — affine4-cu with the same 8-bit lm_head and fused q, k, v;
  p3-fused-cu-lm8-qkv — q3-fused-cu-lm8-qkv with the MLP in the pair code (format
              version 3, k = 3, L = 16: runtime/pair_gemv.cu's kernels);
  p3g-fused-cu-lm8-qkv — gate and up in the pair code, down in mul1 (L = 12): each
              tensor on the faster kernel of session 18's measurements (rows: pair,
              cols: mul1) — codes may differ tensor by tensor in one artifact.
  p3h-fused-cu-lm8-qkv — p3's MLP with down_proj's cols walk in packed fp16
              (runtime/pair_cuda.py's COLS_CFG (1, 1), pair_gemv.cu's cols_steps_half;
              the default since session 29, so p3 runs the same kernels).
  …-lm4-… — the same with lm_head 4-bit affine (group 64), as recipes/qwen38-q3.yaml
              (the seed's Q3: "4-bit attention and embeddings") quantizes it; the
              affine-4 baseline gets the same lm_head.
lm_head stays bf16 in every other variant (the same bytes for all). `--compile`:
each variant's forward also through torch.compile
(inductor fuses the norms, RoPE and elementwise work between the linears;
TrellisLinear is one custom op there), as `<variant>+compile`. `affine4`, `q3`,
`q3-float` and `q3-fused` put their affine layers on tinygemm, the `-cu` variants on
tq-build's own AffineLinear (its CUDA kernel), the `-tq` ones on its Triton kernel.
"""

from __future__ import annotations

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
from trellis_decode import graph_tokens_per_s  # noqa: E402

from tqbuild.runtime import (  # noqa: E402
    affine_cuda,
    decode_attention,
    gqa_attention,
    pair_cuda,
    trellis_cuda,
)
from tqbuild.runtime.affine_torch import AffineLinear  # noqa: E402
from tqbuild.runtime.fused_mlp import GateUpMLP, fuse_gate_up, stack_rows  # noqa: E402
from tqbuild.runtime.fused_qkv import PROJ, fuse_qkv  # noqa: E402
from tqbuild.runtime.trellis_torch import TrellisLinear  # noqa: E402

ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")


class Int4Linear(nn.Module):
    """4-bit affine (q − 8)·scale + zero per group of 64, torch's tinygemm kernel."""

    def __init__(self, out_f: int, in_f: int, g: torch.Generator, group: int = 64):
        super().__init__()
        q = torch.randint(0, 16, (out_f, in_f), device="cuda", dtype=torch.int32, generator=g)
        packed = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8)
        self.w = torch.ops.aten._convert_weight_to_int4pack(packed, 8)
        sz = torch.empty(in_f // group, out_f, 2, device="cuda", dtype=torch.bfloat16)
        sz[..., 0] = torch.rand(in_f // group, out_f, device="cuda", generator=g) * 0.004
        sz[..., 1] = 0
        self.sz, self.group, self.out_features = sz, group, out_f

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1])
        y = torch.ops.aten._weight_int4pack_mm(x2, self.w, self.group, self.sz)
        return y.reshape(*x.shape[:-1], self.out_features)


def affine_tq(out_f: int, in_f: int, g: torch.Generator, bits: int = 4,
              group: int = 64) -> AffineLinear:
    """tq-build's MLX-affine module, random packed words (every bit pattern a value)."""
    words = torch.randint(-2**31, 2**31 - 1, (out_f, in_f * bits // 32), device="cuda",
                          dtype=torch.int32, generator=g)
    scales = (torch.rand(out_f, in_f // group, device="cuda", generator=g) * 0.004).bfloat16()
    biases = (-(2 ** (bits - 1)) * scales.float()).bfloat16()  # values centred on 0
    return AffineLinear(words, scales, biases, bits, group)


def trellis(out_f: int, in_f: int, axis: int, g: torch.Generator, k: int = 3,
            code: str = "mul1", L: int = 12) -> TrellisLinear:
    rows, cols = (out_f, in_f) if axis == 1 else (in_f, out_f)
    words = torch.randint(-2**31, 2**31 - 1, (rows, cols * k // 32), device="cuda",
                          dtype=torch.int32, generator=g)  # every bit pattern is a valid state
    scales = (torch.rand(rows, device="cuda", generator=g) * 0.02 + 0.005).half()
    entry = {"bits": k, "group_size": 256, "mode": "trellis",
             "trellis": {"L": L, "code": code, "axis": axis, "interleave": False,
                         "version": 3 if code == "pair" else 2}}
    return TrellisLinear(words, scales, entry).cuda()


def unfuse_qkv(model, orig: dict) -> None:
    """Each fused attention back to its own class, with the original dense q, k, v
    (the next variant swaps them)."""
    for i, layer in enumerate(model.model.layers):
        att = layer.self_attn
        if hasattr(att, "qkv_proj"):
            att.__class__ = type(att).__mro__[1]
            del att.qkv_proj
            for nm in PROJ:
                setattr(att, nm, orig[(i, nm)])


def swap(model, names, make) -> None:
    for layer in model.model.layers:
        for parent in (layer.self_attn, layer.mlp):
            for nm in names:
                if hasattr(parent, nm):
                    old = getattr(parent, nm)
                    out_f, in_f = old.out_features, old.in_features
                    setattr(parent, nm, make(nm, out_f, in_f))


def main() -> None:
    import argparse

    from transformers import LlamaConfig, LlamaForCausalLM

    ap = argparse.ArgumentParser()
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--no-eager", action="store_true", help="with --compile: compiled only")
    ap.add_argument("--only", default="", help="variant names, comma-separated")
    ap.add_argument("--tag", default="")
    ap.add_argument("--attn", default="sdpa",
                    help="transformers' attention implementation (sdpa, eager, …, or tq-build's "
                         "tq_sdpa: runtime/gqa_attention.py), every variant")
    ap.add_argument("--cache-len", type=int, default=128,
                    help="static KV cache slots (the context every token's attention reads)")
    ap.add_argument("--profile", action="store_true",
                    help="also each variant's GPU time a token by kernel (torch.profiler)")
    ap.add_argument("--cols-bps", default="",
                    help="the p3g variants again at each of these blocks an SM of the mul1 "
                         "down_proj's cols split (trellis_cuda.COLS_BPS; 0: the kernel's "
                         "occupancy), as <variant>-bps<b>")
    a = ap.parse_args()
    global TAG
    TAG = a.tag
    modes = ([] if a.no_eager and a.compile else [False]) + ([True] if a.compile else [])
    only = set(filter(None, a.only.split(",")))

    cfg = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                      max_position_embeddings=max(512, a.cache_len), rope_theta=500000.0)
    cfg._attn_implementation = "sdpa" if a.attn == gqa_attention.NAME else a.attn
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    if a.attn == gqa_attention.NAME:  # every variant, bf16 included
        assert gqa_attention.use_gqa_attention(model)
    orig = {(i, nm): getattr(p, nm) for i, layer in enumerate(model.model.layers)
            for p, names in ((layer.self_attn, ATTN), (layer.mlp, MLP)) for nm in names}
    g = torch.Generator(device="cuda").manual_seed(0)
    trellis_cuda.prebuild([(3, 12, "mul1")])
    res = {"host": host(), "config": {"hidden": 4096, "inter": 14336, "layers": 32,
                                      "heads": "32/8", "vocab": 128256,
                                      "attn": cfg._attn_implementation,
                                      "cache_len": a.cache_len},
           "tokens": 64, "variants": {},
           "env": {k: os.environ[k] for k in ("TORCHINDUCTOR_ENABLE_PDL", "TQBUILD_GEMV_FLAGS",
                                              "TQBUILD_AFFINE_FLAGS", "TQBUILD_DECODE_ATTN")
                   if k in os.environ},
           "decode_attention": decode_attention.enabled(),  # tq_sdpa's split-KV kernel
           # the defines the decode libraries are built with (PDL follows inductor's)
           "kernel_flags": {"trellis": trellis_cuda._flags(3, 12, "mul1")[3:],
                            "affine": affine_cuda.flags()}}

    suffix = ""  # the cols split's blocks an SM (--cols-bps), where several are run

    def run(name: str) -> None:
        if only and name not in only:
            return
        for compiled in modes:
            key = name + suffix + ("+compile" if compiled else "")
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            forward = model.forward
            try:
                if compiled:
                    torch._dynamo.reset()
                    model.forward = torch.compile(forward)
                tps = graph_tokens_per_s(model, cache_len=a.cache_len)
                res["variants"][key] = {"tokens_per_s": tps,
                                        "memory_GB": torch.cuda.memory_allocated() / 1e9}
                if a.profile:
                    res["variants"][key]["profile"] = kernel_profile(model, cache_len=a.cache_len)
            except Exception as e:  # noqa: BLE001 - recorded
                res["variants"][key] = {"error": f"{type(e).__name__}: {e}"[:400]}
            finally:
                model.forward = forward
            res["variants"][key]["wall_s"] = time.perf_counter() - t0
            print(key, json.dumps(res["variants"][key]), flush=True)
            save(res)

    def restore(names) -> None:
        for i, layer in enumerate(model.model.layers):
            for p in (layer.self_attn, layer.mlp):
                for nm in names:
                    if hasattr(p, nm):
                        setattr(p, nm, orig[(i, nm)])

    run("bf16")
    swap(model, ATTN + MLP, lambda nm, o, i: affine_tq(o, i, g))
    os.environ["TQBUILD_AFFINE_KERNEL"] = "triton"
    run("affine4-tq")
    os.environ.pop("TQBUILD_AFFINE_KERNEL")
    run("affine4-cu")
    lm_heads = {bits: affine_tq(cfg.vocab_size, cfg.hidden_size, g, bits=bits) for bits in (8, 4)}

    def run_lm(name: str) -> None:
        """name (an -lm8- variant) with the 8-bit lm_head, then its -lm4- twin with the
        4-bit one; the 8-bit lm_head stays."""
        for bits in (8, 4):
            model.lm_head = lm_heads[bits]
            run(name.replace("-lm8-", f"-lm{bits}-"))
        model.lm_head = lm_heads[8]

    def wanted(name: str) -> bool:  # the variant or its -lm4- twin
        return not only or bool({name, name.replace("-lm8-", "-lm4-")} & only)

    if wanted("affine4-cu-lm8-qkv"):
        lm_head = model.lm_head
        res["fused_qkv_affine4"] = fuse_qkv(model)
        run_lm("affine4-cu-lm8-qkv")
        unfuse_qkv(model, orig)
        model.lm_head = lm_head
    try:
        swap(model, ATTN + MLP, lambda nm, o, i: Int4Linear(o, i, g))
        run("affine4")
    except Exception as e:  # noqa: BLE001 - no tinygemm on this build
        res["variants"]["affine4"] = {"error": f"{type(e).__name__}: {e}"[:400]}
    restore(MLP)
    swap(model, MLP, lambda nm, o, i: trellis(o, i, 0 if nm == "down_proj" else 1, g))
    if "error" not in res["variants"].get("affine4", {}):
        run("q3")
        os.environ["TQBUILD_TRELLIS_ACT"] = "float"
        run("q3-float")
        os.environ["TQBUILD_TRELLIS_ACT"] = "auto"
        fuse_gate_up(model)  # gate and up in one call from here on
        run("q3-fused")
    restore(ATTN)  # the MLP keeps its (fused) trellis modules
    run("q3-attn-bf16")
    swap(model, ATTN, lambda nm, o, i: affine_tq(o, i, g))
    os.environ["TQBUILD_AFFINE_KERNEL"] = "triton"
    run("q3-fused-tq")
    os.environ.pop("TQBUILD_AFFINE_KERNEL")
    run("q3-fused-cu")
    lm_head = model.lm_head
    model.lm_head = lm_heads[8]
    run("q3-fused-cu-lm8")
    res["fused_qkv"] = fuse_qkv(model)  # attentions fused (32 where the rewrite applies)
    run_lm("q3-fused-cu-lm8-qkv")
    inter, hid = cfg.intermediate_size, cfg.hidden_size
    # the MLP with gate/up in the pair code and down in the pair code (p3; p3h: its cols walk
    # in packed fp16) or mul1 (p3g)
    cols_cfg = pair_cuda.COLS_CFG
    for name, down in (("p3-fused-cu-lm8-qkv", dict(code="pair", L=16)),
                       ("p3h-fused-cu-lm8-qkv", dict(code="pair", L=16)),
                       ("p3g-fused-cu-lm8-qkv", {})):
        if not wanted(name):
            continue
        pair_cuda.COLS_CFG = (1, 1) if name.startswith("p3h") else cols_cfg
        for layer in model.model.layers:
            gate_up = stack_rows([trellis(inter, hid, 1, g, code="pair", L=16)
                                  for _ in range(2)])
            layer.mlp = GateUpMLP(gate_up, trellis(hid, inter, 0, g, **down), layer.mlp.act_fn)
        bps0 = trellis_cuda.COLS_BPS
        for bps in [int(b) for b in a.cols_bps.split(",") if b] or [None]:
            if bps is not None:
                suffix = f"-bps{bps}"
                trellis_cuda.COLS_BPS = bps
                trellis_cuda._cols_default.cache_clear()
            run_lm(name)
        suffix = ""
        pair_cuda.COLS_CFG = cols_cfg
        trellis_cuda.COLS_BPS = bps0
        trellis_cuda._cols_default.cache_clear()
    model.lm_head = lm_head
    for key, v in res["variants"].items():  # vs bf16 run the same way (eager / compiled)
        b = res["variants"].get("bf16" + ("+compile" if key.endswith("+compile") else ""), {})
        if "tokens_per_s" in b and "tokens_per_s" in v:
            v["speedup_vs_bf16"] = v["tokens_per_s"] / b["tokens_per_s"]
    save(res)


TAG = ""
KINDS = (("trellis", ("rows_fused", "rows_tc", "rows_mma", "cols_", "quantize_x",
                      "sum_splits", "pair_rows", "pair_cols")),
         ("int4 tinygemm", ("int4", "tinygemm")),
         ("affine (tq Triton)", ("_affine_mm", "_affine_vec")),
         ("affine (tq CUDA)", ("affine_mma",)),
         ("attention", ("attention", "flash", "fmha", "sdpa")),  # before sm90_: cuDNN's
         ("bf16 GEMM/GEMV", ("gemm", "gemv", "cutlass", "sm90_", "nvjet", "cublas")),
         ("inductor fused elementwise", ("triton_",)))


def kernel_profile(model, steps: int = 5, cache_len: int = 128) -> dict:
    """GPU time a token by kernel for one-token eager forwards with a static
    cache: the kernels' own times summed (launch gaps excluded), by kind and the
    15 largest."""
    from torch.profiler import ProfilerActivity, profile
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=cache_len)
    with torch.no_grad():
        model(torch.arange(1, 17, device="cuda")[None], past_key_values=cache,
              cache_position=torch.arange(16, device="cuda"), use_cache=True)
        tok = torch.ones(1, 1, dtype=torch.long, device="cuda")

        def step(i: int) -> None:
            model(tok, past_key_values=cache, cache_position=torch.tensor([16 + i], device="cuda"),
                  use_cache=True)
        for i in range(3):
            step(i)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for i in range(3, 3 + steps):
                step(i)
            torch.cuda.synchronize()
    per: dict[str, float] = {}
    for ev in prof.key_averages():
        t = getattr(ev, "device_time_total", 0.0) or getattr(ev, "cuda_time_total", 0.0)
        if t > 0 and ev.key:
            per[ev.key] = per.get(ev.key, 0.0) + t / steps / 1e6  # µs -> s a token
    kinds: dict[str, float] = {}
    for name, t in per.items():
        kind = next((k for k, pats in KINDS if any(p in name.lower() for p in pats)), "other")
        kinds[kind] = kinds.get(kind, 0.0) + t
    top = sorted(per.items(), key=lambda kv: -kv[1])[:15]
    return {"gpu_seconds_per_token": sum(per.values()), "by_kind": kinds,
            "top": [{"kernel": n[:120], "seconds": t} for n, t in top]}


def save(res: dict) -> None:
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / f"decode_8b-cuda{TAG}.json").write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
