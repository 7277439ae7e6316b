"""Stock mlx-lm check of an artifact, run as a subprocess; imports no tq-build code.

Loads ARTIFACT with `mlx_lm.load`, recomputes `mx.dequantize` of every
quantized module and hashes its raw bytes against optiq_metadata.json, then
generates greedily. Prints one JSON object.
"""

import hashlib
import json
import sys
import time
from pathlib import Path

import mlx.core as mx
from mlx_lm import generate, load


def main(path: str, prompt: str, max_tokens: int) -> None:
    model, tok = load(path)
    meta = json.loads((Path(path) / "optiq_metadata.json").read_text())["modules"]
    checked, mismatched = 0, []
    for name, m in model.named_modules():
        if not hasattr(m, "scales"):
            continue
        w = mx.dequantize(m.weight, m.scales, m.biases, group_size=m.group_size, bits=m.bits)
        raw = bytes(memoryview(w.view(mx.uint16 if w.dtype.size == 2 else mx.uint32)))
        checked += 1
        if hashlib.sha256(raw).hexdigest() != meta[name]["dequant_sha256"]:
            mismatched.append(name)
    messages = [{"role": "user", "content": prompt}]
    text = tok.apply_chat_template(messages, add_generation_prompt=True)
    t = time.perf_counter()
    out = generate(model, tok, text, max_tokens=max_tokens)
    print(json.dumps({"quantized_modules": checked, "mismatched": mismatched, "text": out,
                      "seconds": time.perf_counter() - t}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
