"""Static instruction mix of the int8 trellis decode loops, no GPU needed: compiles
runtime/trellis_gemv.cu for sm_90 with the nvcc on PATH (a local nvcc 13 from the
PyPI `nvidia-cuda-nvcc` wheels will do), then counts the SASS of each kernel's
decode loop, per weight and per pipe, and its registers.

    python bench/gemv_sass.py --variants="-DTQ_TC_WALK=1;-DTQ_TC_WALK=1 -DTQ_TC_CMUL=16"
        # k = 3, L = 12, mul1; one row per (variant, kernel) -> results/gemv_sass{TAG}.json

Pipes (Hopper, the issue model of bench/trellis_kernels-notes.md): ALU and FMA-heavy
are half rate (16 lanes a cycle a scheduler), so a loop's floor is max(ALU, FMA-heavy)
× 2 cycles a warp instruction; FFMA/FADD/FMUL also go to FMA-lite. Checked against
Nsight Compute's per-pipe counts of rows_tc<1> (results/ncu/ncu-pipes-tc-m1.txt): the
loop's ALU : FMA-heavy ratio 1.32 here, 1.23 over the whole kernel there."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from trellis_gemv import sass_loop  # noqa: E402

SOURCE = HERE.parent / "tqbuild" / "runtime" / "trellis_gemv.cu"
ALU = {"SHF", "LOP3", "PRMT", "IADD3", "LEA", "ISETP", "SEL", "VIMNMX", "VIADDMNMX", "MOV",
       "FSEL", "PLOP3", "CS2R", "IABS", "BMSK", "SGXT", "FMNMX", "VABSDIFF4", "P2R", "R2P"}
FMA_HEAVY = {"IMAD", "IDP", "I2FP", "VIADD", "IMUL", "IADD"}
FMA_ANY = {"FFMA", "FADD", "FMUL", "HFMA2", "HADD2", "HMUL2"}
MIO = {"LDG", "LDS", "STS", "STG", "SHFL", "LDC", "LDSM"}
TENSOR = {"IMMA", "HMMA"}
# kernel -> (mangled name fragment, the loop's marker op, marker counts a trip to try,
# weights a thread per marker); rows_tc: a trip is two rounds, a thread's 4 hashes feed
# NB = ⌈M/2⌉ MMAs; rows_fused, cols_kernel: one dp4a a weight and token; cols_tc: a
# thread's 4 hashes a k-step feed one MMA (all tokens)
KERNELS = {
    "rows_tc<1>": ("rows_tcILi1E", "IMMA", (64, 128, 32), 4),
    "rows_tc<2>": ("rows_tcILi2E", "IMMA", (64, 128, 32), 4),
    "rows_tc<4>": ("rows_tcILi4E", "IMMA", (64, 128, 256), 2),
    "rows_fused<1,2>": ("rows_fusedILi1ELi2E", "IDP", (128,), 1),
    "cols_kernel<1>": ("cols_kernelILi1E", "IDP", (32, 64, 128, 256), 1),
    "cols_tc<4>": ("cols_tcILi4E", "IMMA", (8, 16, 32, 64), 4),
}


def pipes(hist: dict[str, int]) -> dict[str, int]:
    out = {"alu": 0, "fma_heavy": 0, "fma_any": 0, "mio": 0, "tensor": 0, "other": 0}
    for op, n in hist.items():
        key = ("alu" if op in ALU else "fma_heavy" if op in FMA_HEAVY else
               "fma_any" if op in FMA_ANY else "mio" if op in MIO else
               "tensor" if op in TENSOR else "other")
        out[key] += n
    return out


def registers(ptxas_log: str) -> dict[str, str]:
    """registers (and spill stores, if any) per kernel from ptxas -v (mangled names
    shortened to KERNELS' keys)."""
    regs: dict[str, str] = {}
    cur, spill = None, 0
    for ln in ptxas_log.splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", ln)
        if m:
            cur = next((k for k, v in KERNELS.items() if v[0] in m.group(1)), None)
        m = re.search(r"(\d+) bytes spill stores", ln)
        if m:
            spill = int(m.group(1))
        m = re.search(r"Used (\d+) registers", ln)
        if m and cur:
            regs[cur] = m.group(1) + (f" (spills {spill} B)" if spill else "")
            cur = None
    return regs


def analyse(flags: list[str], k: int, L: int, code: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "g.cubin"
        p = subprocess.run(["nvcc", "-O3", "-arch=sm_90", f"-DTQ_K={k}", f"-DTQ_L={L}",
                            f"-DTQ_CODE={code}", *flags, "-cubin", "-Xptxas", "-v", "-o",
                            str(cubin), str(SOURCE)], capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"nvcc failed for {flags}: {p.stderr[-3000:]}")
        regs = registers(p.stderr)
        res = {}
        for name, (frag, op, counts, per_marker) in KERNELS.items():
            found = [(c, s) for c in counts if (s := sass_loop(cubin, frag, c, op))]
            if not found:
                res[name] = {"loop": None, "registers": regs.get(name)}
                continue
            count, (n, hist) = found[0]
            weights = count * per_marker
            pp = pipes(hist)
            res[name] = {"loop_instructions": n, "per_weight": round(n / weights, 3),
                         "pipes_per_weight": {q: round(v / weights, 3) for q, v in pp.items()},
                         "half_rate_floor_per_weight":
                             round(max(pp["alu"], pp["fma_heavy"]) / weights, 3),
                         "registers": regs.get(name), "histogram": hist}
        return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default="", help="';'-separated nvcc define sets")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--L", type=int, default=12)
    ap.add_argument("--code", type=int, default=2, help="0: 1MAD, 2: mul1")
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    out = {"k": a.k, "L": a.L, "code": a.code, "variants": {}}
    for v in ["", *[v for v in a.variants.split(";") if v.strip()]]:
        r = analyse(v.split(), a.k, a.L, a.code)
        out["variants"][v or "default"] = r
        for name, d in r.items():
            if d.get("loop_instructions"):
                print(f"{v or 'default':40s} {name:16s} {d['per_weight']:5.2f}/w "
                      f"floor {d['half_rate_floor_per_weight']:4.2f} "
                      f"{d['pipes_per_weight']} regs {d['registers']}", flush=True)
    path = HERE / "results" / f"gemv_sass{a.tag}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print("->", path)


if __name__ == "__main__":
    main()
