"""Machine-readable build events (`--log-json FILE`): one JSON object per line."""

from __future__ import annotations

import json
import resource
import time
from pathlib import Path


class JsonLog:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "a", buffering=1)

    def __call__(self, event: str, **fields) -> None:
        rec = {"event": event, "time": round(time.time(), 3),
               "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
               **fields}
        self._f.write(json.dumps(rec, sort_keys=True) + "\n")

    def close(self) -> None:
        self._f.close()
