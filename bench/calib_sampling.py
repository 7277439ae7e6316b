"""Self-generated calibration sampling cost on SmolLM2: 256 token steps with a
batch of 16 and of 128 sequences (DynamicCache and StaticCache), the share of
the float64 softmax + torch.multinomial draw, and the projection to 128
sequences. The numbers in the README ("378 s in batches of 16 vs 193 s as one
batch, 59 s of it multinomial") are from this script on the 2-core dev box.

    python bench/calib_sampling.py   # -> bench/results/calib_sampling-cpu.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import torch  # noqa: E402
from hostinfo import host  # noqa: E402
from kv_cache import smollm2_dir  # noqa: E402

from tqbuild.stages.hf_cache import cache_kwargs  # noqa: E402


def main() -> None:
    from transformers import AutoModelForCausalLM, DynamicCache, StaticCache

    m = AutoModelForCausalLM.from_pretrained(smollm2_dir(), dtype=torch.float32).eval()
    torch.set_grad_enabled(False)
    rows = []
    steps = 256
    for bs in (16, 128):
        for kind in ("dynamic", "static"):
            cache = (DynamicCache(config=m.config) if kind == "dynamic"
                     else StaticCache(config=m.config, max_cache_len=steps))
            ids, draw = torch.full((bs, 1), 1), 0.0
            t = time.perf_counter()
            for s in range(steps):
                o = m(input_ids=ids, use_cache=True, **cache_kwargs(m, cache),
                      position_ids=torch.full((bs, 1), s))
                t1 = time.perf_counter()
                ids = torch.multinomial(torch.softmax(o.logits[:, -1].double(), -1), 1)
                draw += time.perf_counter() - t1
            dt = time.perf_counter() - t
            rows.append({"batch": bs, "cache": kind, "seconds": round(dt, 1),
                         "draw_seconds": round(draw, 1),
                         "projected_128_sequences_seconds": round(dt * 128 / bs)})
            print(json.dumps(rows[-1]), flush=True)
    (HERE / "results" / "calib_sampling-cpu.json").write_text(
        json.dumps({"host": host(), "steps": steps, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
