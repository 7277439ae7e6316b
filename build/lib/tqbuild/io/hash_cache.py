"""sha256 of files, remembered by (path, size, mtime, inode) so a multi-GB
shard is hashed once until it changes. The cache is a JSON file written
atomically; a stale or corrupt cache only costs a re-hash."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .atomic import write_json
from .hashing import sha256_file


class HashCache:
    def __init__(self, path: Path | None):
        self.path = path
        self.entries: dict[str, dict] = {}
        self.dirty = False
        if path is not None and path.is_file():
            try:
                self.entries = json.loads(path.read_text())
            except (OSError, ValueError):
                self.entries = {}

    def sha256(self, f: Path) -> str:
        st = os.stat(f)
        key = str(Path(f).resolve())
        stamp = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino}
        hit = self.entries.get(key)
        if hit and all(hit.get(k) == v for k, v in stamp.items()):
            return hit["sha256"]
        digest = sha256_file(f)
        self.entries[key] = {**stamp, "sha256": digest}
        self.dirty = True
        return digest

    def save(self) -> None:
        if self.path is not None and self.dirty:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_json(self.path, self.entries)
            self.dirty = False
