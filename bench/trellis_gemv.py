"""Decode-matvec of packed trellis weights with int8 activations (the CUDA
kernels of runtime/trellis_gemv.cu) next to bf16 cuBLAS and the float-activation
Triton kernels, on the H200.

    python bench/trellis_gemv.py      # -> bench/results/trellis_gemv-cuda.json
    python bench/trellis_gemv.py --shapes down,gate --ms 1,4 --ks 3 --tag=-x   # a part
    python bench/trellis_gemv.py --variants "-DTQ_COLS_DEPTH=2;-DTQ_COLS_MINB=1" --tag=-v
        # compile-time variants (TQBUILD_GEMV_FLAGS), k = 3, M = 1, every shape, first

Shapes: 8192×8192 and 17408×5120 (gate/up: the `rows` kernel) and 5120×17408
(down_proj, coded along its output dim: the `cols` kernel); k = 2, 3, 4, L = 12,
T = 256, mul1 (the shipped code); M = 1, 2, 4, 8. Every timing replays a CUDA
graph over enough distinct weight copies that the working set exceeds 3× the
L2; the kernels quantize x themselves (no separate launch). Ceilings: the
packed bytes at the measured copy bandwidth; instructions
per weight counted in the kernel's SASS main loop (cuobjdump), every instruction
of the loop (loads, index math, decode, dp4a) ÷ the weights one thread decodes
per trip.
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import torch

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from hostinfo import host  # noqa: E402
from trellis_matvec import bf16_times, copy_bandwidth, graph_time, packed_case  # noqa: E402

from tqbuild.kernels import nvcc  # noqa: E402
from tqbuild.runtime import trellis_cuda as tc  # noqa: E402
from tqbuild.runtime import trellis_triton as tk  # noqa: E402

SHAPES = [("8192x8192", 8192, 8192, 1), ("gate 17408x5120", 17408, 5120, 1),
          ("down 5120x17408", 5120, 17408, 0)]
# Llama-3-8B's decoder shapes (bench/decode_8b.py), only when named in --shapes;
# gateup8b = gate and up stacked, one call (what a fused MLP would launch)
SHAPES_8B = [("q8b 4096x4096", 4096, 4096, 1), ("gate8b 14336x4096", 14336, 4096, 1),
             ("gateup8b 28672x4096", 28672, 4096, 1), ("down8b 4096x14336", 4096, 14336, 0)]
CODE, L, T = "mul1", 12, 256
TAG = ""
ROWS_SWEEP = [None, {"RB": 1}, {"RB": 4}, {"rgb": 8}, {"RB": 4, "rgb": 8},
              {"warps": 8, "rgb": 2}, {"RB": 4, "warps": 8, "rgb": 2}]
COLS_SWEEP = [None, {"splits": 33}, {"splits": 66}, {"splits": 132}, {"splits": 264}]


def sass_loop(lib_path: Path, kernel: str, count: int, op: str = "IDP"
              ) -> tuple[int, dict] | None:
    """(instructions, opcode histogram) of the decode loop of the first SASS
    function whose mangled name contains `kernel`: the smallest backward-branch
    loop holding `count` `op` instructions (dp4a: one trip's weights × M)."""
    try:
        out = subprocess.run(["cuobjdump", "-sass", str(lib_path)], capture_output=True,
                             text=True, timeout=300).stdout
    except Exception as e:  # noqa: BLE001 - no cuobjdump
        print(f"no SASS: {e}", file=sys.stderr)
        return None
    funcs = re.split(r"\n\s*Function : ", out)
    body = next((f for f in funcs[1:] if kernel in f.split("\n", 1)[0]), None)
    if body is None:
        return None
    ins = []
    for ln in body.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", ln)
        if m and not m.group(2).strip().startswith("NOP"):
            ins.append((int(m.group(1), 16), m.group(2).strip()))
    loops = []
    for i, (addr, text) in enumerate(ins):
        b = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", text)
        if b and int(b.group(1), 16) <= addr:
            j = next(j for j, (a, _) in enumerate(ins) if a >= int(b.group(1), 16))
            n = sum(o.split()[0].startswith(op) for _, o in ins[j:i + 1])
            if n == count:
                loops.append((i + 1 - j, j, i + 1))
    if not loops:
        return None
    best = min(loops)
    hist = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", t).split()[0].split(".")[0]
                               for _, t in ins[best[1]:best[2]])
    return best[0], dict(hist.most_common())


def time_int8(x, copies, cfg=None, **kw) -> float:
    def run():
        return [tc.matvec(x, w, sc, cfg=cfg, **kw) for w, sc in copies]
    return graph_time(run) / len(copies)


def time_triton(x, copies, **kw) -> float:
    def run():
        return [tk.matvec(x, w, sc, **kw) for w, sc in copies]
    return graph_time(run) / len(copies)


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="", help="name prefixes, e.g. down,gate (default all)")
    ap.add_argument("--ms", default="1,2,4,8")
    ap.add_argument("--ks", default="2,3,4")
    ap.add_argument("--tag", default="")
    ap.add_argument("--variants", default="", help="';'-separated nvcc define sets")
    ap.add_argument("--no-sweep", action="store_true", help="default block shapes at M = 1")
    ap.add_argument("--variant-cfg", default="",
                    help="the variant runs' kernel cfg (JSON), e.g. {\"tc\": true}")
    ap.add_argument("--only-variants", action="store_true", help="the variant sweep alone")
    a = ap.parse_args()
    shapes = [s for s in SHAPES if not a.shapes or s[0].split()[0] in a.shapes.split(",")]
    shapes += [s for s in SHAPES_8B if s[0].split()[0] in a.shapes.split(",")]
    ms = [int(m) for m in a.ms.split(",")]
    ks = [int(k) for k in a.ks.split(",")]
    global TAG
    TAG = a.tag
    dev = "cuda"
    if a.variants:
        variant_sweep(a.variants.split(";"), shapes, ms,
                      json.loads(a.variant_cfg) if a.variant_cfg else None)
        if a.only_variants:
            return
    tc.prebuild([(k, L, CODE) for k in ks])
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    bw = copy_bandwidth()
    res = {"host": host(), "l2_bytes": l2, "copy_bytes_per_s": bw, "code": CODE, "L": L, "T": T,
           "sweeps": {}, "cases": [], "sass": {}}
    for k in ks:
        lib = nvcc.built_path(tc.SOURCE, tc._flags(k, L, CODE))
        for name, tmpl, m, per_trip in (("rows M1 RB2", "rows_fusedILi1ELi2E", 1, 2 * 2 * 32),
                                        ("rows M1 RB4", "rows_fusedILi1ELi4E", 1, 2 * 4 * 32),
                                        ("rows M4 RB1", "rows_fusedILi4ELi1E", 4, 2 * 1 * 32),
                                        ("cols M1", "cols_kernelILi1E", 1, 8 * 32),
                                        ("cols M4", "cols_kernelILi4E", 4, 8 * 8),
                                        ("cols M8", "cols_kernelILi8E", 8, 8 * 4),
                                        ("rows mma M4", "rows_mmaILi4E", 0, 32),
                                        ("rows mma M8", "rows_mmaILi8E", 0, 32),
                                        ("rows tc M1", "rows_tcILi1E", -64, 256),
                                        ("rows tc M4", "rows_tcILi4E", -128, 256)):
            # the mma loop: 8 IMMA a trip, 32 weights a thread (2 tiles × 2 rows × 8);
            # tc: two rounds a trip, 4 rows × 32 weights each, ⌈M/2⌉ IMMA per 4 weights
            s = (sass_loop(lib, tmpl, m * per_trip) if m > 0 else
                 sass_loop(lib, tmpl, -m, "IMMA") if m < 0 else sass_loop(lib, tmpl, 8, "IMMA"))
            if s:
                res["sass"][f"k{k} {name}"] = {"loop_instructions": s[0],
                                               "per_weight": s[0] / per_trip, "ops": s[1]}
                print(f"k{k} {name}: {s[0]} instr / {per_trip} weights = "
                      f"{s[0] / per_trip:.2f}; {s[1]}", flush=True)
    g = torch.Generator(device=dev).manual_seed(0)
    best = {}
    for name, out_f, in_f, axis in shapes if not a.no_sweep else []:  # k = 3, M = 1 shapes
        rows, cols = (out_f, in_f) if axis == 1 else (in_f, out_f)
        x = torch.randn(1, in_f, device=dev, dtype=torch.bfloat16, generator=g)
        copies, _ = packed_case(x, 3, rows, cols, l2, g)
        kw = dict(code=CODE, k=3, T=T, L=L, axis=axis, out_features=out_f, in_features=in_f)
        tried = []
        for cfg in (ROWS_SWEEP if axis == 1 else COLS_SWEEP):
            tried.append({"cfg": cfg, "seconds": time_int8(x, copies, cfg, **kw)})
            print(name, json.dumps(tried[-1]), flush=True)
        res["sweeps"][name] = tried
        best[name] = min(tried, key=lambda c: c["seconds"])["cfg"]
        if axis == 0 and 4 in ms:  # cols at M = 4: the auto split left SMs at 12 % occupancy
            x4 = torch.randn(4, in_f, device=dev, dtype=torch.bfloat16, generator=g)
            res["sweeps"][name + " M4"] = [{"cfg": cfg, "seconds": time_int8(x4, copies, cfg, **kw)}
                                           for cfg in COLS_SWEEP]
            print(name, "M4", json.dumps(res["sweeps"][name + " M4"]), flush=True)
        del copies
    res["chosen"] = best
    for name, out_f, in_f, axis in shapes:
        rows, cols = (out_f, in_f) if axis == 1 else (in_f, out_f)
        t_bf = bf16_times(out_f, in_f, ms, l2, g)
        for k in ks:
            copies, nbytes = packed_case(None, k, rows, cols, l2, g)
            kw = dict(code=CODE, k=k, T=T, L=L, axis=axis, out_features=out_f, in_features=in_f)
            for m in ms:
                xm = torch.randn(m, in_f, device=dev, dtype=torch.bfloat16, generator=g)
                cfg = best.get(name) if m == 1 else None
                t = time_int8(xm, copies, cfg, **kw)
                case = {"shape": name, "axis": axis, "k": k, "M": m, "seconds": t,
                        "packed_GB_per_s": nbytes / t / 1e9, "fraction_of_copy_bw": nbytes / t / bw,
                        "weights_per_s": out_f * in_f / t, "bf16_cublas_seconds": t_bf[m],
                        "speedup_vs_bf16": t_bf[m] / t, "cfg": cfg, "copies": len(copies)}
                dc = cfg or {}
                if axis == 1:  # every rows kernel (the default picks by M), same call
                    case["kernel"] = tc.rows_kernel(tc.library(k, L, CODE), m, in_f, T, cfg,
                                                    out_f)
                    kinds = [("tc", {"tc": True}), ("tc_nopdl", {"tc": True, "pdl": 0}),
                             *([("mma", {"mma": True})] if m > 1 else []),
                             ("dp4a", {**dc, "prequant": True}),
                             ("dp4a_nopdl", {**dc, "prequant": True, "pdl": 0}),
                             ("dp4a_blockq", {**dc, "prequant": False})]
                else:  # both cols kernels, cols_tc's splits of the inputs, same call
                    case["kernel"] = "cols_tc" if tc.cols_tc_serves(m, cfg, k=k, L=L) else "cols"
                    kinds = [("cols_dp4a", {**dc, "tc": False}), ("cols_tc", {"tc": True}),
                             *((f"cols_tc_s{sp}", {"tc": True, "splits": sp})
                               for sp in (1, 3, 5, 8))]
                for kind, c in kinds:
                    case[f"{kind}_seconds"] = time_int8(xm, copies, c, **kw)
                    case[f"{kind}_speedup_vs_bf16"] = t_bf[m] / case[f"{kind}_seconds"]
                if m <= tk.MAX_M:  # the float-activation Triton kernels, same call
                    case["triton_float_seconds"] = time_triton(xm, copies, **kw)
                    case["speedup_vs_triton_float"] = case["triton_float_seconds"] / t
                print(json.dumps(case), flush=True)
                res["cases"].append(case)
                save(res)
            del copies


def variant_sweep(variants: list[str], shapes: list, ms: list[int], cfg=None) -> None:
    """k = 3, M in ms on every shape for each set of compile-time defines (and the
    default build), one library each, the kernel the default picks or cfg's;
    -> trellis_gemv-cuda{TAG}-variants.json."""
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    g = torch.Generator(device="cuda").manual_seed(0)
    out = {"host": host(), "code": CODE, "L": L, "T": T, "k": 3, "cfg": cfg, "runs": []}
    for flags in ["", *variants]:
        os.environ["TQBUILD_GEMV_FLAGS"] = flags
        tc._libs.clear()
        for name, out_f, in_f, axis in shapes:
            rows, cols = (out_f, in_f) if axis == 1 else (in_f, out_f)
            copies, _ = packed_case(None, 3, rows, cols, l2, g)
            for m in ms:
                x = torch.randn(m, in_f, device="cuda", dtype=torch.bfloat16, generator=g)
                t = time_int8(x, copies, cfg, code=CODE, k=3, T=T, L=L, axis=axis,
                              out_features=out_f, in_features=in_f)
                out["runs"].append({"flags": flags, "shape": name, "M": m, "seconds": t})
                print(json.dumps(out["runs"][-1]), flush=True)
                (HERE / "results" / f"trellis_gemv-cuda{TAG}-variants.json").write_text(
                    json.dumps(out, indent=2) + "\n")
            del copies
    os.environ["TQBUILD_GEMV_FLAGS"] = ""
    tc._libs.clear()


def save(res: dict) -> None:
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / f"trellis_gemv-cuda{TAG}.json").write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
