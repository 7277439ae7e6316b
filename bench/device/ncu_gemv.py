"""A few plain launches of the int8 decode kernels for Nsight Compute:
    ncu --clock-control none -k regex:"rows_fused|cols_kernel" --launch-skip 2 \
        --launch-count 2 --section SpeedOfLight --section WarpStateStats ... \
        python bench/device/ncu_gemv.py [M] [rows|cols|both] [cfg JSON]
8192×8192 rows and 5120×17408 cols, k = 3, L = 12, mul1, M = 1 by default."""

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tqbuild.runtime import trellis_cuda as tc  # noqa: E402

M = int(sys.argv[1]) if len(sys.argv) > 1 else 1
which = sys.argv[2] if len(sys.argv) > 2 else "both"
cfg = json.loads(sys.argv[3]) if len(sys.argv) > 3 else None  # e.g. '{"tc": true}'
g = torch.Generator(device="cuda").manual_seed(0)
for out_f, in_f, axis in ((8192, 8192, 1), (5120, 17408, 0)):
    if which != "both" and which != ("rows" if axis == 1 else "cols"):
        continue
    rows, cols = (out_f, in_f) if axis == 1 else (in_f, out_f)
    words = torch.randint(-2**31, 2**31 - 1, (rows, cols * 3 // 32), device="cuda",
                          dtype=torch.int32, generator=g)
    scales = torch.rand(rows, device="cuda", generator=g).half() + 0.5
    x = torch.randn(M, in_f, device="cuda", dtype=torch.bfloat16, generator=g)
    for _ in range(4):
        tc.matvec(x, words, scales, code="mul1", k=3, T=256, L=12, axis=axis, cfg=cfg,
                  out_features=out_f, in_features=in_f)
    torch.cuda.synchronize()
print("ok")
