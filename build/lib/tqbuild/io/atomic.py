"""Temp-file + rename writes, so nothing at a final path is ever half-written."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any


def write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json(path: Path, obj: Any) -> None:
    write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def replace_dir(tmp: Path, final: Path) -> None:
    """Move a finished temp directory into place, replacing any old one."""
    old = final.with_name(f".{final.name}.old")
    if old.exists():
        shutil.rmtree(old)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    if old.exists():
        shutil.rmtree(old)
