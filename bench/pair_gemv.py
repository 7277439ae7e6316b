"""The pair-code decode-matvec prototype (bench/pair_gemv.cu) against the shipped
mul1 kernels and bf16 cuBLAS, on the GPU, one run.

    python bench/pair_gemv.py [--ks 2,3,4] [--ms 1,4] [--shapes 8192x8192,gate] [--tag=-x]
        # -> bench/results/pair_gemv-cuda{tag}.json

First the kernel is checked against a float64 reference of the same decode on fresh
random words, tables and inputs (every (M, RB, WPR) it is timed with; a mismatch
stops the run). Then, per shape, k and M: µs of bf16 cuBLAS, of the mul1 kernel
the runtime picks (L = 12, T = 256, as bench/trellis_gemv.py), and of the pair
kernel (the best of its block shapes, all recorded) — CUDA graphs over copies
whose working set exceeds 3× the L2; SASS instructions a weight of each pair
kernel's decode loop; the packed bytes as a fraction of the measured copy rate.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from hostinfo import host  # noqa: E402
from trellis_gemv import sass_loop  # noqa: E402
from trellis_matvec import copies_for, copy_bandwidth, graph_time  # noqa: E402

from tqbuild.kernels import nvcc  # noqa: E402
from tqbuild.runtime import trellis_cuda as tc  # noqa: E402

SOURCE = HERE / "pair_gemv.cu"
L, Q, T = 12, 9, 256
HASH = 0x83DCD12D
SHAPES = {"8192x8192": (8192, 8192), "gate": (17408, 5120), "q8b": (4096, 4096),
          "gate8b": (14336, 4096)}
SHAPES_M = {1: [(2, 1), (2, 2), (2, 4), (4, 1), (4, 2), (4, 4)],
            4: [(1, 1), (1, 2), (2, 1), (2, 2)]}


def flags(k: int) -> list[str]:
    return [f"-DPK={k}", f"-DPL={L}", f"-DPQ={Q}"]


def library(k: int) -> ctypes.CDLL:
    lib = nvcc.build(SOURCE, flags(k))
    P, I, F = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
    lib.pair_gemv.argtypes = [P, P, P, P, P, I, I, I, I, I, F, P]
    lib.pair_gemv.restype = I
    return lib


def run(lib, words, scales, table, x, rb, wpr, factor=1.0) -> torch.Tensor:
    M, n = x.shape
    rows = words.shape[0]
    out = torch.empty(M, rows, device=x.device, dtype=torch.float32)
    rc = lib.pair_gemv(words.data_ptr(), scales.data_ptr(), table.data_ptr(), x.data_ptr(),
                       out.data_ptr(), M, rows, n, rb, wpr, factor, nvcc.stream_of(x))
    if rc:
        raise RuntimeError(f"pair_gemv returned {rc} (M={M}, rb={rb}, wpr={wpr})")
    return out


def reference(words, scales, table, x, k: int) -> np.ndarray:
    """float64 [M, rows]: the same decode and int8 quantization, summed exactly."""
    w = words.cpu().numpy().view(np.uint32).astype(np.uint64)
    rows, nw = w.shape
    ng = nw // k
    tab = table.cpu().numpy().view(np.uint32)
    lo = (tab & 0xFFFF).astype(np.uint16).view(np.int16).astype(np.int64)
    hi = (tab >> 16).astype(np.uint16).view(np.int16).astype(np.int64)
    xf = x.float().cpu().numpy()
    M, n = xf.shape
    g = xf.reshape(M, ng, 32)
    a = np.abs(g).max(axis=2, keepdims=True).astype(np.float32)
    inv = np.where(a > 0, np.float32(127) / np.where(a > 0, a, 1), 0).astype(np.float32)
    q = np.clip(np.rint((g * inv).astype(np.float32)), -127, 127).astype(np.int64)
    gs = (a[..., 0] / np.float32(127)).astype(np.float64)  # [M, ng]
    wv = np.zeros((rows, ng, 32), np.int64)  # the decoded int16 weights
    per = w.reshape(rows, ng, k)
    p = np.arange(ng)
    nxt = np.where(p % (T // 32) == T // 32 - 1, p - (T // 32 - 1), p + 1)
    words_k1 = np.concatenate([per, per[:, nxt, :1]], axis=2)  # [rows, ng, k + 1]
    for v in range(16):
        b = 2 * k * v
        wi, sh = b >> 5, b & 31
        two = words_k1[..., wi] | (words_k1[..., wi + 1] << np.uint64(32))
        s = (two >> np.uint64(sh)) & np.uint64((1 << L) - 1)
        e = ((s * np.uint64(HASH)) & np.uint64(0xFFFFFFFF)) >> np.uint64(L - Q)
        e = (e & np.uint64((1 << Q) - 1)).astype(np.int64)
        wv[..., 2 * v] = lo[e]
        wv[..., 2 * v + 1] = hi[e]
    acc = np.einsum("rpj,mpj->mrp", wv, q)  # exact int64 [M, rows, ng]
    out = (acc.astype(np.float64) * gs[:, None, :]).sum(axis=2)
    return out * scales.float().cpu().numpy().astype(np.float64)[None, :]


def case(rows, n, k, M, g, dev="cuda"):
    words = torch.randint(-2**31, 2**31 - 1, (rows, n * k // 32), device=dev, dtype=torch.int32,
                          generator=g)
    scales = (torch.rand(rows, device=dev, generator=g) + 0.5).half()
    vals = torch.randint(-32000, 32000, (2 << Q,), device=dev, dtype=torch.int32,
                         generator=g).to(torch.int16)
    table = vals.view(torch.int32)  # 2^Q entries of two int16
    x = torch.randn(M, n, device=dev, dtype=torch.bfloat16, generator=g)
    return words, scales, table, x


def check(ks, ms) -> list:
    out = []
    g = torch.Generator(device="cuda").manual_seed(1)
    for k in ks:
        lib = library(k)
        for M in ms:
            for rb, wpr in SHAPES_M[M]:
                for rows, n in ((72, 512), (33, 1024)):
                    words, scales, table, x = case(rows, n, k, M, g)
                    y = run(lib, words, scales, table, x, rb, wpr).double().cpu().numpy()
                    ref = reference(words, scales, table, x, k)
                    err = float(np.abs(y - ref).max() / np.abs(ref).max())
                    ok = err < 1e-5
                    out.append({"k": k, "M": M, "rb": rb, "wpr": wpr, "rows": rows, "n": n,
                                "max_rel_err": err, "ok": ok})
                    print(json.dumps(out[-1]), flush=True)
                    if not ok:
                        raise SystemExit(f"pair kernel wrong: {out[-1]}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ks", default="2,3,4")
    ap.add_argument("--ms", default="1,4")
    ap.add_argument("--shapes", default="8192x8192,gate")
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    ks = [int(v) for v in a.ks.split(",")]
    ms = [int(v) for v in a.ms.split(",")]
    res: dict = {"host": host(), "L": L, "Q": Q, "T": T, "checks": check(ks, ms), "cases": [],
                 "sass": {}}
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    bw = copy_bandwidth()
    res["copy_bytes_per_s"] = bw
    for k in ks:
        lib_path = nvcc.library_path(SOURCE, ["-O3", f"-arch={nvcc.arch()}", *flags(k),
                                              "-shared", "-Xcompiler", "-fPIC"])
        for M in ms:
            for rb, wpr in SHAPES_M[M]:
                name = f"pair_rowsILi{M}ELi{rb}ELi{wpr}E"
                s = sass_loop(lib_path, name, M * rb * 16, "IDP")
                if s:
                    res["sass"][f"k{k} M{M} RB{rb} WPR{wpr}"] = {
                        "loop_instructions": s[0], "per_weight": s[0] / (rb * 32), "ops": s[1]}
    print(json.dumps(res["sass"]), flush=True)
    g = torch.Generator(device="cuda").manual_seed(0)
    out = HERE / "results" / f"pair_gemv-cuda{a.tag}.json"
    for sname in a.shapes.split(","):
        rows, n = SHAPES[sname]
        wb = torch.randn(rows, n, device="cuda", dtype=torch.bfloat16, generator=g)
        bfs = [wb.clone() for _ in range(copies_for(wb.numel() * 2, l2))]
        del wb
        t_bf = {}
        for M in ms:
            xm = torch.randn(M, n, device="cuda", dtype=torch.bfloat16, generator=g)
            t_bf[M] = graph_time(lambda xm=xm, bfs=bfs: [torch.nn.functional.linear(xm, w)
                                                          for w in bfs]) / len(bfs)
        del bfs
        for k in ks:
            lib = library(k)
            words, scales, table, _ = case(rows, n, k, 1, g)
            nbytes = words.numel() * 4 + scales.numel() * 2
            copies = [(words.clone(), scales.clone()) for _ in range(copies_for(nbytes, l2))]
            del words, scales
            for M in ms:
                xm = torch.randn(M, n, device="cuda", dtype=torch.bfloat16, generator=g)
                kw = dict(code="mul1", k=k, T=T, L=L, axis=1, out_features=rows, in_features=n)
                t_mul1 = graph_time(lambda xm=xm, kw=kw, cs=copies: [
                    tc.matvec(xm, w, sc, **kw) for w, sc in cs]) / len(copies)
                tried = {}
                for rb, wpr in SHAPES_M[M]:
                    tried[f"RB{rb} WPR{wpr}"] = graph_time(
                        lambda rb=rb, wpr=wpr, lib=lib, t=table, xm=xm, cs=copies: [
                            run(lib, w, sc, t, xm, rb, wpr) for w, sc in cs]) / len(copies)
                best = min(tried, key=tried.get)
                c = {"shape": sname, "rows": rows, "n": n, "k": k, "M": M,
                     "bf16_seconds": t_bf[M], "mul1_seconds": t_mul1,
                     "mul1_speedup_vs_bf16": t_bf[M] / t_mul1,
                     "pair_seconds": tried[best], "pair_best": best, "pair_tried": tried,
                     "pair_speedup_vs_bf16": t_bf[M] / tried[best],
                     "pair_vs_mul1": t_mul1 / tried[best],
                     "pair_fraction_of_copy_bw": nbytes / tried[best] / bw,
                     "copies": len(copies)}
                res["cases"].append(c)
                print(json.dumps(c), flush=True)
                out.write_text(json.dumps(res, indent=2) + "\n")
            del copies
    out.write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
