"""The tq-build CLI as a user runs it, for every test: `cli(d, *args)` runs
`tq-build ARGS` in directory d and returns a CompletedProcess (returncode,
stdout, stderr).

By default in-process through `tqbuild.cli.main` (the suite is CPU-bound and
every subprocess re-imports torch and transformers): stdout/stderr are
captured, an uncaught exception becomes a printed traceback and exit code 1,
as in a real process. `subprocess=True` (or TQBUILD_TEST_SUBPROCESS=1 for the
whole suite) runs a real `python -m tqbuild` — needed where a test changes
the environment a library reads at import time, or sends signals."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess as sp
import sys
import traceback
from pathlib import Path


def cli(d: Path, *args, timeout: int = 900, subprocess: bool = False,
        env: dict | None = None) -> sp.CompletedProcess:
    argv = [str(a) for a in args]
    if subprocess or env is not None or os.environ.get("TQBUILD_TEST_SUBPROCESS"):
        return sp.run([sys.executable, "-m", "tqbuild", *argv], cwd=d, capture_output=True,
                      text=True, timeout=timeout, env=env)
    return _in_process(Path(d), argv)


def _in_process(d: Path, argv: list[str]) -> sp.CompletedProcess:
    import torch

    from tqbuild.cli import main

    out, err = io.StringIO(), io.StringIO()
    cwd, threads, saved_argv = os.getcwd(), torch.get_num_threads(), sys.argv
    code = 0
    try:
        os.chdir(d)
        sys.argv = ["tq-build", *argv]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(argv)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except Exception:
                traceback.print_exc()
                code = 1
    finally:
        os.chdir(cwd)
        sys.argv = saved_argv
        torch.set_num_threads(threads)  # --threads must not leak into later tests
    return sp.CompletedProcess(["tq-build", *argv], code, out.getvalue(), err.getvalue())
