"""Build and run a tests/simt harness: a CUDA kernel's source compiled for the host
with the SIMT emulator (tests/simt/simt_host.h), run as a subprocess (a kernel bug
that deadlocks its barriers times out instead of hanging the suite)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def build(name: str, kernel_dir: str, out_dir: Path, defines: tuple[str, ...] = ()) -> Path:
    """g++ -std=c++20 tests/simt/<name>.cpp (the kernel's folder on the include path,
    `defines` as -D flags); skips without a C++ compiler."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    exe = out_dir / name
    p = subprocess.run([cxx, "-std=c++20", "-O2", "-ffp-contract=off", "-pthread",
                        *(f"-D{d}" for d in defines),
                        "-I", str(ROOT / "tests/simt"), "-I", str(ROOT / kernel_dir),
                        "-o", str(exe), str(ROOT / "tests/simt" / f"{name}.cpp")],
                       capture_output=True, text=True)
    if p.returncode != 0:
        pytest.fail(p.stderr[-3000:])
    return exe


def run(exe: Path, inp: Path, out: Path, timeout: int = 300) -> None:
    subprocess.run([str(exe), str(inp), str(out)], check=True, timeout=timeout)
