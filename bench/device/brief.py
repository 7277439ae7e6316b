"""A device call's compact view of bench/pair_gemv.py's output (stdin): each case as shape,
k, M, bf16 µs, every instance tried in µs, and the best × bf16; other lines (errors, notes)
as they are, cut to 200 characters."""

import json
import sys

for line in sys.stdin:
    if line.startswith('{"shape'):
        c = json.loads(line)
        print(c["shape"], c["k"], c["M"], "bf16", round(c["bf16_seconds"] * 1e6, 2),
              {k: round(v * 1e6, 2) for k, v in c["pair_tried"].items()},
              round(c["pair_speedup_vs_bf16"], 2), flush=True)
    elif line.strip() != "{}":
        print(line.rstrip()[:200], flush=True)
