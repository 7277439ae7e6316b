"""Run a test module's kernel cases in Triton's interpreter on CPU tensors: a
subprocess, since the interpreter is chosen when Triton is imported."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch


def run_cases(module: str, timeout: int) -> None:
    """`module._kernel_cases('cpu')` under TRITON_INTERPRET=1; fails with its stderr.
    Skips where CUDA is available: the module's CUDA test runs the same cases."""
    if torch.cuda.is_available():
        pytest.skip("the CUDA test covers the kernels")
    code = (f"import sys; sys.path.insert(0, 'tests');"
            f"from {module} import _kernel_cases; _kernel_cases('cpu')")
    p = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TRITON_INTERPRET": "1"},
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
