"""The pair code's decode-matvec kernels (runtime/pair_gemv.cu) against the shipped mul1
kernels and bf16 cuBLAS, on the GPU, one run.

    python bench/pair_gemv.py [--ks 2,3,4] [--ms 1,4] [--shapes 8192x8192,gate,down] [--tag=-x]
        # -> bench/results/pair_gemv-cuda{tag}.json

Per shape, k and M: µs of bf16 cuBLAS, of the mul1 kernel the runtime picks (L = 12, as
bench/trellis_gemv.py), and of the pair kernels (L = 16; rows: every block shape
instance at that M, cols: walkers of 1 and 2 warps, int8 or fp16 (fp16: up to 4 rows a
launch pair sharing the decode, also timed a row a call at M > 1); all
recorded, the best reported; --quick: the default instance only, and no mul1) —
CUDA graphs over copies whose working set exceeds 3× the L2; SASS instructions a weight
of the pair decode loops; the packed bytes as a fraction of the measured copy rate.
Correctness is tests/test_pair_cuda.py's (run it first on the same machine).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from hostinfo import host  # noqa: E402
from trellis_gemv import sass_loop  # noqa: E402
from trellis_matvec import bf16_times, copy_bandwidth, graph_time, packed_case  # noqa: E402

from tqbuild.kernels import nvcc  # noqa: E402
from tqbuild.runtime import gpu_info, pair_cuda  # noqa: E402
from tqbuild.runtime import trellis_cuda as tc  # noqa: E402

L_PAIR, L_MUL1, T = 16, 12, 256
# name: (out_features, in_features, axis)
SHAPES = {"8192x8192": (8192, 8192, 1), "gate": (17408, 5120, 1), "down": (5120, 17408, 0),
          "q8b": (4096, 4096, 1), "gate8b": (14336, 4096, 1), "down8b": (4096, 14336, 0),
          "gateup8b": (28672, 4096, 1)}  # the 8B model's gate and up in one call
ROWS_CFGS: dict[int, list[tuple[int, int, int]]] = {}  # M: the library's (rb, wpr, threads)
for _M, _rb, _wpr, _nth in pair_cuda.ROWS_INSTANCES:
    ROWS_CFGS.setdefault(_M, []).append((_rb, _wpr, _nth))


@contextlib.contextmanager
def pdl_off():
    """Kernels launched without programmatic dependent launch (TQBUILD_PDL is read at
    each launch) inside the block, as before it after."""
    old = os.environ.get("TQBUILD_PDL")
    os.environ["TQBUILD_PDL"] = "0"
    try:
        yield
    finally:
        if old is None:
            del os.environ["TQBUILD_PDL"]
        else:
            os.environ["TQBUILD_PDL"] = old


@contextlib.contextmanager
def pair_source(path: str):
    """pair_cuda's libraries built from another source inside the block (same C entries)."""
    old, libs = pair_cuda.SOURCE, dict(pair_cuda._libs)
    pair_cuda.SOURCE, pair_cuda._libs = Path(path).resolve(), {}
    try:
        yield
    finally:
        pair_cuda.SOURCE, pair_cuda._libs = old, libs


def kernel_times(run, calls: int) -> dict[str, float]:
    """Mean seconds a call by kernel (torch's profiler over eager calls, PDL off so that
    a kernel's time excludes its wait for the one before): how a cols call's time splits
    between its decode kernel and the split sum."""
    from torch.profiler import ProfilerActivity, profile

    with pdl_off():
        run()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run()
            torch.cuda.synchronize()
    per: dict[str, float] = {}
    for ev in prof.key_averages():
        t = getattr(ev, "device_time_total", 0.0) or getattr(ev, "cuda_time_total", 0.0)
        if t > 0 and ev.key:
            per[ev.key[:60]] = per.get(ev.key[:60], 0.0) + t / calls / 1e6
    return per


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ks", default="2,3,4")
    ap.add_argument("--ms", default="1,4")
    ap.add_argument("--shapes", default="8192x8192,gate,down")
    ap.add_argument("--tag", default="")
    ap.add_argument("--quick", action="store_true",
                    help="no mul1; pair rows at their default instance only")
    ap.add_argument("--no-mul1", action="store_true", help="every pair instance, but no mul1")
    ap.add_argument("--no-sass", action="store_true", help="no SASS counts of the decode loops")
    ap.add_argument("--mma-only", action="store_true",
                    help="rows shapes: the tensor-core kernel only (a library built with "
                         "TQBUILD_PAIR_FLAGS=-DTQ_PAIR_MMA_ONLY and its knobs)")
    ap.add_argument("--ab-all", action="store_true",
                    help="time every instance tried with --ab-source, not the best only")
    ap.add_argument("--ab-source", default="",
                    help="also time the best cfg with the pair library built from this "
                         "source (an earlier pair_gemv.cu beside it, the same C entries), in "
                         "the same run")
    a = ap.parse_args()
    ks = [int(v) for v in a.ks.split(",")]
    ms = [int(v) for v in a.ms.split(",")]
    # the kernels wait for the one before them under PDL (built so where inductor's kernels
    # trigger early): then the best pair instance is timed both ways, back to back
    pdl = gpu_info.inductor_pdl() and tc.pdl(0)
    res: dict = {"host": host(), "L_pair": L_PAIR, "L_mul1": L_MUL1, "T": T, "pdl": pdl,
                 "cases": [], "sass": {}}
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    bw = copy_bandwidth()
    res["copy_bytes_per_s"] = bw
    for k in [] if a.no_sass else ks:
        pair_cuda.library(k, L_PAIR)
        lib = nvcc.built_path(pair_cuda.SOURCE, pair_cuda._flags(k, L_PAIR))  # as built
        for M, cfgs in ROWS_CFGS.items():
            for rb, wpr, nth in cfgs:  # the loop decodes two periods a trip
                s = sass_loop(lib, f"pair_rowsILi{M}ELi{rb}ELi{wpr}ELi{nth}E", M * rb * 32, "IDP")
                if s:
                    res["sass"][f"k{k} rows M{M} RB{rb} WPR{wpr} T{nth}"] = {
                        "loop_instructions": s[0], "per_weight": s[0] / (rb * 64), "ops": s[1]}
        # the tensor-core rows kernel at each run pp: a trip decodes TQ_PAIR_MMA_D = 2 items
        # (8·pp mma, 64·pp weights a lane each); the loop holds its tile-end code, branched
        # over mostly
        for pp in (1, 2, 4):
            s = sass_loop(lib, f"pair_rows_mmaILi0ELi{pp}E", 16 * pp, "HMMA")
            if s:
                res["sass"][f"k{k} rows mma pp{pp} (any M)"] = {
                    "loop_instructions": s[0], "per_weight": s[0] / (128 * pp), "ops": s[1],
                    "default": pp == pair_cuda.rows_mma(k, T)[1]}
        d = 4  # TQ_PAIR_COLS_D: inputs a trip
        # warps a walker (each decodes 32 / sub weights of d / sub inputs a trip), and the walk
        # on int8 inputs (two IDP2A a step) or in packed fp16 (one HFMA2 a step)
        for sub, half in ((1, 0), (2, 0), (1, 1), (2, 1)):
            per = 32 * (d // sub) // sub
            s = sass_loop(lib, f"pair_colsILi{sub}ELi{512 * sub}ELb{half}ELi1E",
                          per // (1 + half), "HFMA2" if half else "IDP")
            if s:
                flush_ops = ("HADD2", "FFMA", "UMOV") if half else ("I2FP", "FFMA", "CS2R")
                flush = sum(s[1].get(o, 0) for o in flush_ops)
                res["sass"][f"k{k} cols M1 sub{sub}{' fp16' if half else ''}"] = {
                    "loop_instructions": s[0], "per_weight": s[0] / per,
                    "per_weight_without_flush": (s[0] - flush) / per, "ops": s[1],
                    "note": "the trip holds D copies of the once-a-32-inputs group flush "
                            f"({', '.join(flush_ops)}), branched over on the other inputs"}
        for sub in (1, 2):  # the fp16 walk at M > 1: one decode, M rows' HFMA2
            per = 32 * (d // sub) // sub
            for M in range(2, pair_cuda.COLS_M + 1):
                s = sass_loop(lib, f"pair_colsILi{sub}ELi{512 * sub}ELb1ELi{M}E", M * per // 2,
                              "HFMA2")
                if s:
                    res["sass"][f"k{k} cols M{M} sub{sub} fp16"] = {
                        "loop_instructions": s[0], "per_weight": s[0] / per,
                        "per_weight_and_row": s[0] / per / M, "ops": s[1]}
    print(json.dumps(res["sass"]), flush=True)
    g = torch.Generator(device="cuda").manual_seed(0)
    out = HERE / "results" / f"pair_gemv-cuda{a.tag}.json"
    for sname in a.shapes.split(","):
        out_f, in_f, axis = SHAPES[sname]
        t_bf = bf16_times(out_f, in_f, ms, l2, g)
        rows, cols = (out_f, in_f) if axis == 1 else (in_f, out_f)
        for k in ks:
            copies, nbytes = packed_case(None, k, rows, cols, l2, g)
            for M in ms:
                xm = torch.randn(M, in_f, device="cuda", dtype=torch.bfloat16, generator=g)
                dims = dict(k=k, T=T, axis=axis, out_features=out_f, in_features=in_f)
                no_mul1 = a.quick or a.no_mul1
                t_mul1 = None if no_mul1 else graph_time(lambda xm=xm, d=dims, cs=copies: [
                    tc.matvec(xm, w, sc, code="mul1", L=L_MUL1, **d) for w, sc in cs]
                ) / len(copies)

                def calls(cf, xm=xm, d=dims, cs=copies):  # the pair kernel over every copy
                    return lambda: [pair_cuda.matvec(xm, w, sc, L=L_PAIR, cfg=cf, **d)
                                    for w, sc in cs]

                def seconds(cf, calls=calls, n=len(copies)):  # a call, from a CUDA graph
                    return graph_time(calls(cf)) / n

                tried = {}
                cfgs = ([*ROWS_CFGS.get(M, []), *pair_cuda.ROWS_MMA_CFGS] if axis == 1 else
                        [(1, 0), (2, 0), (1, 1), (2, 1)])
                if a.quick:
                    cfgs = [pair_cuda.ROWS_CFG[M], *pair_cuda.ROWS_MMA_CFGS] if axis == 1 else \
                        [pair_cuda.COLS_CFG]
                if a.mma_only and axis == 1:
                    cfgs = list(pair_cuda.ROWS_MMA_CFGS)
                for cfg in cfgs:
                    tried[str(cfg)] = seconds(cfg)
                best = min(tried, key=tried.get)
                cfg_of = {str(c): c for c in cfgs}
                t_nopdl = None
                if pdl:
                    with pdl_off():
                        t_nopdl = seconds(cfg_of[best])
                c = {"shape": sname, "out_features": out_f, "in_features": in_f, "axis": axis,
                     "k": k, "M": M, "bf16_seconds": t_bf[M], "mul1_seconds": t_mul1,
                     "mul1_speedup_vs_bf16": t_mul1 and t_bf[M] / t_mul1,
                     "pair_seconds": tried[best],
                     "pair_cfg": best, "pair_tried": tried,
                     "pair_speedup_vs_bf16": t_bf[M] / tried[best],
                     "pair_seconds_without_pdl": t_nopdl,
                     "pair_speedup_vs_bf16_without_pdl": t_nopdl and t_bf[M] / t_nopdl,
                     "pair_vs_mul1": t_mul1 and t_mul1 / tried[best],
                     "pair_fraction_of_copy_bw": nbytes / tried[best] / bw,
                     "copies": len(copies)}
                if axis == 0 and M > 1:  # the rows' decode shared against a row a call
                    c["pair_seconds_rows_apart"] = graph_time(
                        lambda xm=xm, d=dims, cs=copies, cf=cfg_of[best]: [
                            pair_cuda.matvec(xm[m:m + 1], w, sc, L=L_PAIR, cfg=cf, **d)
                            for w, sc in cs for m in range(xm.shape[0])]) / len(copies)
                if a.ab_source:  # the best cfg (--ab-all: every cfg) built from that source
                    with pair_source(a.ab_source):
                        ab = {str(cf): seconds(cf) for cf in (cfgs if a.ab_all else [cfg_of[best]])}
                    c["pair_seconds_ab_source"] = ab[best]
                    c["ab_source"] = a.ab_source
                    if a.ab_all:
                        c["pair_tried_ab_source"] = ab
                if axis == 0 and not no_mul1:  # the split sum's share of a cols call
                    c["kernel_seconds"] = {
                        "mul1": kernel_times(lambda xm=xm, d=dims, cs=copies: [
                            tc.matvec(xm, w, sc, code="mul1", L=L_MUL1, **d) for w, sc in cs],
                            len(copies)),
                        "pair": kernel_times(calls(cfg_of[best]), len(copies))}
                res["cases"].append(c)
                print(json.dumps(c), flush=True)
                out.write_text(json.dumps(res, indent=2) + "\n")
            del copies
    out.write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
