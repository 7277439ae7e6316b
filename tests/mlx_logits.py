"""Stock mlx-lm forward of an artifact in float32, run as a subprocess (no tq-build
import): `python mlx_logits.py ARTIFACT IDS.npy OUT.npy`."""

import sys

import mlx.core as mx
import numpy as np
from mlx_lm.utils import load_model

model, _ = load_model(__import__("pathlib").Path(sys.argv[1]))
model.set_dtype(mx.float32)
ids = mx.array(np.load(sys.argv[2]))[None]
logits = model(ids)[0].astype(mx.float32)
np.save(sys.argv[3], np.array(logits))
