"""Each CUDA source builds one library per configuration ((k, L, code) for the trellis
decode), and a process loads several. A static that the host compiler gives GNU-unique
binding (nm's `u`: e.g. a variable template) is made one variable for all of them by the
dynamic linker, RTLD_LOCAL or not — session 22's `cols_allowed<M>` did that, and one
library's shared-memory raise stopped another's (cudaError 1 at launch, H100). Built here
where nvcc is (PTX only, no GPU needed); skipped without nvcc."""

from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "tqbuild"
SOURCES = {  # source -> the defines one of its libraries is built with
    "runtime/trellis_gemv.cu": ["-DTQ_K=3", "-DTQ_L=12", "-DTQ_CODE=0"],
    "runtime/pair_gemv.cu": ["-DTQ_K=3", "-DTQ_L=16"],
    "runtime/affine_gemv.cu": [],
    "kernels/viterbi_cuda.cu": ["-fmad=false"],
    "kernels/pair_viterbi.cu": ["-fmad=false"],
}
NVCC = shutil.which("nvcc")


def unique_symbols(source: str, defines: list[str], out: Path) -> list[str]:
    lib = out / (Path(source).stem + ".so")
    subprocess.run([NVCC, "-O1", "-gencode", "arch=compute_90,code=compute_90", *defines,
                    "-shared", "-Xcompiler", "-fPIC", "-o", str(lib), str(ROOT / source)],
                   check=True, capture_output=True)
    nm = subprocess.run(["nm", "-C", str(lib)], check=True, capture_output=True, text=True)
    return [ln for ln in nm.stdout.splitlines() if " u " in ln]


@pytest.mark.skipif(NVCC is None or shutil.which("nm") is None, reason="needs nvcc and nm")
def test_no_cuda_library_has_process_wide_statics(tmp_path):
    with ThreadPoolExecutor(len(SOURCES)) as ex:
        jobs = {s: ex.submit(unique_symbols, s, d, tmp_path) for s, d in SOURCES.items()}
    found = {s: job.result() for s, job in jobs.items()}
    assert not any(found.values()), {s: u[:4] for s, u in found.items() if u}
