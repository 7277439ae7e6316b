"""Build a CUDA source into a cached shared library with nvcc, on first use; the
stream handle its ctypes calls launch on, and the device they run on.

Never at install time: tq-build stays pure Python on CPU and Mac. The library is
keyed by the source bytes, the flags and the GPU architecture, written to a temp
name and renamed (a concurrent build finds a whole file)."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch


def cache_dir() -> Path:
    root = os.environ.get("TQBUILD_KERNEL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "tqbuild", "kernels")
    return Path(root)


def arch() -> str:
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def local_includes(source: Path, text: bytes | None = None) -> list[Path]:
    """The files a source (its bytes `text`, read if not given) names with
    #include "…" beside it (one level: the headers here include no local files)."""
    text = source.read_bytes() if text is None else text
    names = re.findall(rb'^\s*#include\s+"([^"]+)"', text, re.M)
    return [source.parent / n.decode() for n in names]


def library_path(source: Path, flags: list[str]) -> Path:
    text = source.read_bytes()
    text += b"".join(h.read_bytes() for h in local_includes(source, text))
    key = hashlib.sha256(text + " ".join(flags).encode()).hexdigest()[:16]
    return cache_dir() / f"{source.stem}-{arch()}-{key}.so"


def _full_flags(flags: list[str]) -> list[str]:
    return ["-O3", f"-arch={arch()}", *flags, "-shared", "-Xcompiler", "-fPIC"]


def built_path(source: Path, flags: list[str]) -> Path:
    """Where build(source, flags) puts (or put) its library: for reading its SASS."""
    return library_path(source, _full_flags(flags))


def build(source: Path, flags: list[str]) -> ctypes.CDLL:
    """nvcc -O3 -arch=<this GPU> -shared FLAGS SOURCE, cached; raises on failure."""
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not os.path.exists(nvcc):
        raise RuntimeError("nvcc not found")
    flags = _full_flags(flags)
    lib = library_path(source, flags)
    if not lib.is_file():
        lib.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=lib.parent) as tmp:
            out = Path(tmp) / lib.name
            p = subprocess.run([nvcc, *flags, "-o", str(out), str(source)],
                               capture_output=True, text=True)
            if p.returncode != 0:
                raise RuntimeError(f"nvcc failed: {p.stderr[-2000:]}")
            os.replace(out, lib)
    return ctypes.CDLL(str(lib))


def stream_of(t: torch.Tensor) -> ctypes.c_void_p:
    """torch's current CUDA stream on t's device, as a ctypes handle (launches on it are
    ordered with torch's work and captured by CUDA graphs)."""
    return ctypes.c_void_p(torch.cuda.current_stream(t.device).cuda_stream)


def on_tensor_device(fn):
    """fn(x, ...) with x's CUDA device current. A library's runtime launches on, counts the
    SMs of and raises kernels' shared memory on the calling thread's current device, which
    otherwise stays torch's (cuda:0) for a tensor on another GPU."""

    @functools.wraps(fn)
    def on_device(x: torch.Tensor, *args, **kwargs):
        if x.device.type != "cuda":  # fn's own checks (and fallbacks) meet it
            return fn(x, *args, **kwargs)
        with torch.cuda.device(x.device):
            return fn(x, *args, **kwargs)

    on_device.on_tensor_device = True  # type: ignore[attr-defined]
    return on_device
