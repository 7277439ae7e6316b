"""The tq-build CLI as a user runs it: a subprocess in a directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def cli(d: Path, *args, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tqbuild", *map(str, args)], cwd=d,
                          capture_output=True, text=True, timeout=timeout)
