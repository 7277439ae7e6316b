"""A whole Q3-style build of a random-weight 8B-shaped llama on one GPU.

    python bench/build_8b_h200.py [--dir /tmp/b8] [--layers 32] [--hidden 4096] ...

Writes an HF checkpoint (bf16 safetensors shards, hidden 4096, intermediate
14336, 32 layers, GQA 32/8, vocab 128256) generated on the device, a measured-
looking k map (random per-tensor losses, k ∈ {2, 3, 4}), and runs
`tq-build RECIPE --device cuda`: γ-fold + R1 + R2, self-generated calibration,
Hessians, attention GPTQ 4-bit g64, MLP trellis LDLQ L = 12 with k allocated to
3.00 bits (down_proj along its output dim, interleaved), write. Reports wall
time per stage (from the build's --log-json), peak host RSS (the build
process) and peak GPU memory (torch's allocator, sampled by nvidia-smi), and
projects Qwen3.8-27B (64 layers, hidden 5120, intermediate 17408) from the
measured per-layer time scaled by weight count. A second run of the same
command resumes from the work dir (a killed call resumes there).
Writes bench/results/build_8b-cuda.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import torch  # noqa: E402
from hostinfo import host  # noqa: E402

RECIPE = """name: synth8b-q3
source: {{path: {src}}}
output: {out}
workdir: {work}
calibration: {{source: {{self_generated: true}}, samples: {samples}, seq_len: {seq}, seed: 0,
              batch_size: {batch}}}
stages:
  - untie
  - norm_fold
  - rotate: {{seed: 42}}
  - calibrate
  - quantize:
      default: {{method: gptq, format: affine, bits: 4, group_size: 64, damp: 0.01}}
      rules:
        - match: 'mlp\\.down_proj$'
          format: trellis
          method: ldlq
          bits: {{kmap: kmap.json, budget: 3.0}}
          trellis: {{L: 12, T: 256, code: 1mad, axis: 0, interleave: true}}
        - match: 'mlp\\.(gate|up)_proj$'
          format: trellis
          method: ldlq
          bits: {{kmap: kmap.json, budget: 3.0}}
          trellis: {{L: 12, T: 256, code: 1mad, axis: 1}}
  - write
"""


def make_checkpoint(d: Path, a) -> None:
    from safetensors.torch import save_file
    from transformers import LlamaConfig

    if (d / "config.json").is_file():
        return
    d.mkdir(parents=True, exist_ok=True)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=dev).manual_seed(0)
    hd = a.hidden // a.heads

    def w(*shape, scale=0.02):
        return (scale * torch.randn(*shape, device=dev, generator=g)).to(torch.bfloat16).cpu()

    def norm():
        return (1 + 0.1 * torch.randn(a.hidden, device=dev, generator=g)).to(torch.bfloat16).cpu()

    shard, n, index = {}, 0, {}

    def flush(final=False):
        nonlocal shard, n
        if shard and (final or sum(t.numel() * 2 for t in shard.values()) > 2 << 30):
            name = f"model-{n:05d}.safetensors"
            save_file(shard, str(d / name), metadata={"format": "pt"})
            index.update({k: name for k in shard})
            shard, n = {}, n + 1

    shard["model.embed_tokens.weight"] = w(a.vocab, a.hidden)
    for i in range(a.layers):
        p = f"model.layers.{i}."
        shard.update({
            p + "input_layernorm.weight": norm(), p + "post_attention_layernorm.weight": norm(),
            p + "self_attn.q_proj.weight": w(a.heads * hd, a.hidden),
            p + "self_attn.k_proj.weight": w(a.kv * hd, a.hidden),
            p + "self_attn.v_proj.weight": w(a.kv * hd, a.hidden),
            p + "self_attn.o_proj.weight": w(a.hidden, a.heads * hd),
            p + "mlp.gate_proj.weight": w(a.inter, a.hidden),
            p + "mlp.up_proj.weight": w(a.inter, a.hidden),
            p + "mlp.down_proj.weight": w(a.hidden, a.inter)})
        flush()
    shard["model.norm.weight"] = norm()
    shard["lm_head.weight"] = w(a.vocab, a.hidden)
    flush(final=True)
    (d / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": index}))
    LlamaConfig(hidden_size=a.hidden, intermediate_size=a.inter, num_hidden_layers=a.layers,
                num_attention_heads=a.heads, num_key_value_heads=a.kv, head_dim=hd,
                vocab_size=a.vocab, tie_word_embeddings=False, rope_theta=500000.0,
                max_position_embeddings=8192, torch_dtype="bfloat16").save_pretrained(d)


def make_kmap(path: Path, layers: int) -> None:
    g = torch.Generator().manual_seed(1)
    table = {"_about": "synthetic per-tensor losses for the 8B-shaped build bench"}
    for i in range(layers):
        for m in ("gate_proj", "up_proj", "down_proj"):
            base = 0.5 + 1.5 * float(torch.rand(1, generator=g))
            table[f"model.layers.{i}.mlp.{m}"] = {"2": base, "3": base / 4, "4": base / 16}
    path.write_text(json.dumps(table))


class GpuPeak(threading.Thread):
    """Peak used GPU memory seen by nvidia-smi every 0.5 s (the build runs in a child)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak, self.stop = 0, False

    def run(self):
        while not self.stop:
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used",
                                      "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=10).stdout
                self.peak = max(self.peak, int(out.split()[0]))
            except (OSError, ValueError, IndexError, subprocess.SubprocessError):
                pass
            time.sleep(0.5)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/b8")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--inter", type=int, default=14336)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tag", default="", help="suffix of the result file name")
    ap.add_argument("--profile", default=None, help="cProfile the build into this file")
    ap.add_argument("--limit", type=float, default=None, help="stop the build after this many "
                    "seconds (SIGTERM: it checkpoints; rerun to resume)")
    ap.add_argument("--out", default=str(HERE / "results"))
    a = ap.parse_args()
    d = Path(a.dir)
    res: dict = {"host": host(), "shape": vars(a)}
    t = time.perf_counter()
    make_checkpoint(d / "src", a)
    res["checkpoint_write_s"] = round(time.perf_counter() - t, 1)
    make_kmap(d / "kmap.json", a.layers)
    (d / "r.yaml").write_text(RECIPE.format(src=d / "src", out=d / "out", work=d / "work",
                                            samples=a.samples, seq=a.seq, batch=a.batch))
    log = d / "events.jsonl"
    log.unlink(missing_ok=True)
    peak = GpuPeak()
    if a.device.startswith("cuda"):
        peak.start()
    t = time.perf_counter()
    prof = ["-m", "cProfile", "-o", a.profile] if a.profile else []
    proc = subprocess.Popen([sys.executable, *prof, "-m", "tqbuild", str(d / "r.yaml"), "--device",
                             a.device, "--log-json", str(log), "--no-lock"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=a.limit)
    except subprocess.TimeoutExpired:
        proc.terminate()  # Ctrl-C semantics: finished layers stay checkpointed
        _, err = proc.communicate()
    res["build_wall_s"] = round(time.perf_counter() - t, 1)
    peak.stop = True
    res["exit_code"] = proc.returncode
    res["stderr_tail"] = err[-1500:]
    res["peak_host_rss_mib_build"] = round(
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
    res["peak_gpu_mib_nvidia_smi"] = peak.peak
    events = [json.loads(x) for x in log.read_text().splitlines()] if log.is_file() else []
    units = [e for e in events if e.get("event") == "unit_end"]
    layers = [e for e in units if str(e.get("unit", "")).startswith("layer")]
    res["units_done"] = len(units)
    res["from_checkpoint"] = sum(bool(e.get("cached")) for e in units)
    computed = [e["seconds"] for e in layers if not e.get("cached")]
    res["unit_seconds"] = {e["unit"]: e.get("seconds") for e in units}
    if computed:
        per_layer = sorted(computed)[len(computed) // 2]
        res["median_layer_s"] = per_layer
        # Qwen3.8-27B: 64 layers; per-layer work ∝ weights (GPTQ/LDLQ, capture)
        w8 = (2 * a.hidden * a.hidden
              + 2 * a.hidden * a.kv * (a.hidden // a.heads)
              + 3 * a.hidden * a.inter)
        w27 = 2 * 5120 * 6144 + 2 * 5120 * 1024 + 3 * 5120 * 17408
        res["projection_qwen38_27b_min"] = round(64 * per_layer * w27 / w8 / 60, 1)
    if (d / "work" / "synth8b-q3" / "report.json").is_file():
        res["report"] = json.loads((d / "work" / "synth8b-q3" / "report.json").read_text())
    print(json.dumps({k: v for k, v in res.items() if k not in ("report", "unit_seconds")}))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"build_8b-{a.device.split(':')[0]}{a.tag}.json"
    (out / name).write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
