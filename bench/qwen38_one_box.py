"""The qwen38-q3 instruments on a Qwen3.8-27B-shaped checkpoint, one layer at a
time: time per layer of `tq-build sensitivity` (streamed), of layer-streamed
self-generated calibration and of the layer-streamed teacher/candidate
evaluation, with peak host RSS and GPU memory, projected to the 64-layer model.

    python bench/qwen38_one_box.py [--device cuda] [--layers 4] [--dir /tmp/q38]

The checkpoint is random (bf16 safetensors, qwen3_5_text): hidden 5120,
intermediate 17408, 24 query / 4 KV heads of 256, gated-delta linear attention
(16 key / 48 value heads of 128) with a full-attention layer every 4th, vocab
248320 — the 27B's shapes as far as they set the cost; the weights' values do
not. Writes bench/results/qwen38_one_box-<device>.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import torch  # noqa: E402
import yaml  # noqa: E402
from hostinfo import host  # noqa: E402

FULL_LAYERS = 64
SHAPE = dict(hidden_size=5120, intermediate_size=17408, num_attention_heads=24,
             num_key_value_heads=4, head_dim=256, linear_num_key_heads=16,
             linear_num_value_heads=48, linear_key_head_dim=128, linear_value_head_dim=128,
             linear_conv_kernel_dim=4, full_attention_interval=4, vocab_size=248320,
             max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=False)


TINY = dict(SHAPE, hidden_size=512, intermediate_size=1024, num_attention_heads=4, head_dim=64,
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=64,
            linear_value_head_dim=64, vocab_size=4096)  # --tiny: a smoke test of this script


def make_checkpoint(d: Path, layers: int, device: str, shape: dict) -> float:
    from transformers import AutoConfig, AutoModelForCausalLM

    if (d / "config.json").is_file():
        return 0.0
    t = time.perf_counter()
    types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
             for i in range(layers)]
    cfg = AutoConfig.for_model("qwen3_5_text", num_hidden_layers=layers, layer_types=types,
                               **shape)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.save_pretrained(d, max_shard_size="4GB")
    del model
    sys.path.insert(0, str(HERE.parent / "tests"))
    from tiny import save_char_tokenizer  # a character tokenizer: the eval text needs one

    save_char_tokenizer(d, vocab_size=100)
    return time.perf_counter() - t


def recipe(d: Path) -> Path:
    r = yaml.safe_load((HERE.parent / "recipes/qwen38-q3.yaml").read_text())
    r["source"] = {"path": str(d / "src")}
    r["output"] = str(d / "out")
    f = d / "qwen38-q3.yaml"
    f.write_text(yaml.safe_dump(r, sort_keys=False))
    return f


def vm_hwm_mib() -> float:
    line = next(x for x in open("/proc/self/status") if x.startswith("VmHWM"))
    return int(line.split()[1]) / 1024


def phase(name: str, a) -> dict:
    """One measurement, run in its own process (its peak RSS is its own)."""
    from tqbuild.eval.run import evaluate
    from tqbuild.eval.sensitivity import fold_reference, sensitivity, write_table
    from tqbuild.recipe import CalibrateParams
    from tqbuild.stages.calib_stream import self_generated_streamed

    shape = TINY if a.tiny else SHAPE
    r, work, src = a.dir / "qwen38-q3.yaml", a.dir / "work", a.dir / "src"
    out: dict = {}
    t0 = time.perf_counter()
    if name == "checkpoint":
        make_checkpoint(src, a.layers, a.device, shape)
        recipe(a.dir)
    elif name == "fold_reference_build":
        fold_reference(r, work, device=a.device)
    elif name == "sensitivity":
        timings: dict = {}
        table = sensitivity(r, method=a.method, tokens=a.tokens, workdir=work, stream=True,
                            device=a.device, timings=timings, log=lambda m: None)
        write_table(table, a.dir / "qwen38-q3.kmap.json", {"method": a.method})
        out = {"method": a.method, "timings": timings,
               "candidates_per_layer": sum(len(v) for v in table.values()) // a.layers}
    elif name.startswith("calibration_sampling"):
        p = CalibrateParams(samples=512, seq_len=a.calib_steps + 1, stream=True)
        resident = 1 << 40 if name.endswith("resident") else 0
        self_generated_streamed(src, p, a.device, resident_bytes=resident)
        out = {"samples": 512, "steps": a.calib_steps, "seconds_per_step_per_layer": round(
            (time.perf_counter() - t0) / a.calib_steps / a.layers, 4)}
    elif name == "eval_streamed":
        e = evaluate(a.dir / "work" / "qwen38-q3" / "sensitivity" / "fold", src,
                     tokens=a.tokens, window=a.tokens, device=a.device, workdir=work,
                     probe=False, stream=True)
        out = {"mean_kl": e["mean_kl"]}
    gpu = (torch.cuda.max_memory_allocated() / 2**30 if a.device.startswith("cuda") else None)
    return {"seconds": round(time.perf_counter() - t0, 2), "peak_rss_mib": round(vm_hwm_mib()),
            "peak_gpu_gib": gpu, **out}


PHASES = ["checkpoint", "fold_reference_build", "sensitivity", "calibration_sampling",
          "calibration_sampling_resident", "eval_streamed"]


def main() -> None:
    import subprocess

    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/q38"))
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--method", default="noise")
    ap.add_argument("--calib-steps", type=int, default=7)  # seq_len >= 8
    ap.add_argument("--out", type=Path)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--phase")
    a = ap.parse_args()
    if a.phase:
        print("PHASE " + json.dumps(phase(a.phase, a)), flush=True)
        return
    a.dir.mkdir(parents=True, exist_ok=True)
    res: dict = {"host": host(), "device": a.device, "layers": a.layers,
                 "shape": TINY if a.tiny else SHAPE, "tokens": a.tokens,
                 "protocol": "each phase in its own process: peak_rss_mib is that process's "
                             "VmHWM, peak_gpu_gib torch's allocator peak"}
    for name in PHASES:
        p = subprocess.run([sys.executable, __file__, "--phase", name, *sys.argv[1:]],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"{name} failed: {p.stderr[-3000:]}")
        res[name] = json.loads(p.stdout.split("PHASE ", 1)[1])
        print(name, json.dumps({k: v for k, v in res[name].items() if k != "timings"}),
              flush=True)
    timings = res["sensitivity"].pop("timings")
    per_layer = timings["seconds_per_layer"]
    res["sensitivity"]["seconds_per_layer"] = [round(x, 2) for x in per_layer]
    cands = res["sensitivity"]["candidates_per_layer"]
    N = FULL_LAYERS
    opened = sum(timings["open_candidates"])
    per_pass = sum(timings["open_seconds"]) / max(opened, 1)  # one open candidate, one layer
    base = [t - o for t, o in zip(per_layer, timings["open_seconds"], strict=True)]
    proj_sens = sum(base) / len(base) * N + per_pass * cands * N * (N - 1) / 2
    res["sensitivity"]["seconds_per_open_candidate_pass"] = round(per_pass, 4)
    res["projection_64_layers"] = {
        "sensitivity_seconds": round(proj_sens, 1),
        "sensitivity_seconds_per_layer_mean": round(proj_sens / N, 2),
        "calibration_512x128_seconds": round(
            res["calibration_sampling"]["seconds_per_step_per_layer"] * 127 * N, 1),
        "calibration_512x128_seconds_resident": round(
            res["calibration_sampling_resident"]["seconds_per_step_per_layer"] * 127 * N, 1),
        "eval_seconds_per_layer": round(res["eval_streamed"]["seconds"] / a.layers, 2),
        "note": "sensitivity: the measured mean per-layer time without open candidates × 64 "
                "+ the measured cost of one open candidate through one layer × the 64-layer "
                "model's open-candidate passes (candidates_per_layer × 64·63/2); "
                "calibration: measured seconds per token step per layer × 127 steps × 64 "
                "layers, no layer resident (each step re-reads every layer)"}
    print(json.dumps(res["projection_64_layers"], indent=1))
    if a.tiny:
        return
    out = a.out or HERE / "results" / f"qwen38_one_box-{a.device.split(':')[0]}.json"
    out.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
