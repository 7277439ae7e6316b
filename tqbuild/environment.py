"""Every process-wide setting tq-build makes, in one place.

Applied when `tqbuild` is imported (before torch is), each only where the
user has not set it already:
- MKL_DYNAMIC=FALSE: MKL may otherwise use fewer threads than asked when the
  machine is busy, and CPU matmuls round by thread count, so a build's bits
  would depend on the load.
- HF_DATASETS_OFFLINE=1: calibration from a `datasets` dataset reads only its
  local cache; nothing is downloaded at run time.
On request (`fast_blas_reexec`, used by `tq-build kv eval`): re-execute the
command with Debian's OpenBLAS preloaded, since MLX's CPU build ships a
reference BLAS (~3 GFLOP/s; OpenBLAS ~30x faster).
`env_int` reads tq-build's whole-number settings (TQBUILD_LDLQ_ROW_PARTS, …)."""

from __future__ import annotations

import os
import sys

from .errors import BadInput

DEFAULTS = {"MKL_DYNAMIC": "FALSE", "HF_DATASETS_OFFLINE": "1"}
OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3"


def env_int(name: str, default: int, least: int = 0) -> int:
    """The environment variable `name` as a whole number ≥ `least` (unset or empty:
    `default`); anything else is the user's error, named."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = least - 1
    if value < least:
        raise BadInput(f"{raw!r} is not a whole number >= {least}", where=name,
                       fix=f"set {name} to such a number, or unset it for {default}")
    return value


def apply_defaults() -> None:
    for k, v in DEFAULTS.items():
        os.environ.setdefault(k, v)


def fast_blas_reexec(command: list[str] | None = None) -> None:
    """Re-exec once with OpenBLAS preloaded, when present: this tq-build command,
    or `command` (the arguments after the interpreter, e.g. a script's argv)."""
    if sys.platform == "linux" and os.path.exists(OPENBLAS) and \
            "openblas" not in os.environ.get("LD_PRELOAD", ""):
        env = dict(os.environ, LD_PRELOAD=OPENBLAS)
        args = command if command is not None else ["-m", "tqbuild", *sys.argv[1:]]
        os.execve(sys.executable, [sys.executable, *args], env)
