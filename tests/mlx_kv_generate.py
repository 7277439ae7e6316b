"""Greedy generation with a TurboQuant KV cache in stock mlx-lm (subprocess):
`python mlx_kv_generate.py MODEL SCHEME PROMPT MAX_TOKENS` prints JSON."""

import json
import sys

import mlx.core as mx
from mlx_lm import load

from tqbuild.kv import generate

model, tok = load(sys.argv[1])
model.set_dtype(mx.float32)
prompt = tok.apply_chat_template([{"role": "user", "content": sys.argv[3]}],
                                 add_generation_prompt=True)
print(json.dumps({"text": generate(model, tok, prompt, scheme=sys.argv[2],
                                   max_tokens=int(sys.argv[4]))}))
