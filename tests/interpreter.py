"""Run a test module's kernel cases in Triton's interpreter on CPU tensors: a
subprocess, since the interpreter is chosen when Triton is imported."""

from __future__ import annotations

import os
import subprocess
import sys


def run_cases(module: str, timeout: int) -> None:
    """`module._kernel_cases('cpu')` under TRITON_INTERPRET=1; fails with its stderr."""
    code = (f"import sys; sys.path.insert(0, 'tests');"
            f"from {module} import _kernel_cases; _kernel_cases('cpu')")
    p = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TRITON_INTERPRET": "1"},
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
