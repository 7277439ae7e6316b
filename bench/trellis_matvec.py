"""M = 1 decode-matvec of packed trellis weights on CUDA (Triton), next to a
bf16 cuBLAS matvec of the same shape.

    python bench/trellis_matvec.py      # -> bench/results/trellis_matvec-cuda.json

Shapes: 8192×8192 and 17408×5120 (gate/up, coded along the input dim: the
`rows` period kernel) and 5120×17408 (down_proj, coded along its output dim:
the `cols` kernel), k = 2, 3, 4, L = 12, T = 256, both codes. The block shapes
are swept first on one shape per kernel at k = 3 and the best kept. Every
timing replays a CUDA graph over enough distinct weight copies that the
working set exceeds twice the L2. Ceilings: the measured copy bandwidth
(read + write bytes of a 2 GiB copy) for the packed bytes, and the integer
ceiling = the measured int32 op rate (bench/trellis_codec.py's add+min
kernel, 2 ops per pair) ÷ the kernel's instructions per weight, counted in
its SASS main loop (every instruction: loads, index math, decode, FMA). The
generic kernels (per-weight index math and table gathers) are timed beside.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import torch

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from hostinfo import host  # noqa: E402
from trellis_codec import add_compare_rate  # noqa: E402

from tqbuild.kernels.trellis_codes import code_table  # noqa: E402
from tqbuild.runtime import trellis_triton as tk  # noqa: E402
from tqbuild.runtime.trellis_torch import matvec_triton  # noqa: E402

SHAPES = [("8192x8192", 8192, 8192, 1), ("gate 17408x5120", 17408, 5120, 1),
          ("down 5120x17408", 5120, 17408, 0)]
ROWS_SWEEP = [dict(RB=rb, NP=np_, num_warps=w, XV=xv, PF=pf) for rb, np_, w, xv, pf in
              ((8, 64, 2, True, False), (8, 64, 2, False, False), (8, 64, 2, True, True),
               (8, 32, 1, True, False), (8, 32, 1, False, False), (4, 64, 2, True, False),
               (16, 64, 2, False, False), (8, 128, 4, True, False), (4, 32, 1, True, True))]
COLS_SWEEP = [dict(BI=bi, NP=np_, num_warps=w, splits=sp, PF=pf) for bi, np_, w, sp, pf in
              ((4, 32, 4, 128, True), (4, 32, 4, 128, False), (4, 32, 4, 64, True),
               (8, 32, 8, 64, True), (8, 32, 8, 64, False), (2, 32, 2, 128, True),
               (4, 32, 4, 256, True))]

def loop_instructions(sass: str) -> int | None:
    """Instructions (NOPs aside) in the longest backward-branch span of a SASS
    listing as triton.tools.disasm.get_sass prints it (labels `LBB0:`)."""
    labels, instrs = {}, []
    for ln in sass.splitlines():
        t = ln.strip()
        m = re.match(r"^([.\w]+):$", t)
        if m:
            labels[m.group(1)] = len(instrs)
        elif "\t" in t:
            op = t.split("\t", 1)[1].strip()
            if op and not op.startswith("NOP"):
                instrs.append(op)
    best = 0
    for i, op in enumerate(instrs):
        m = re.search(r"BRA\s+`?\(?([.\w]+)", op)
        if m and labels.get(m.group(1), i + 1) <= i:
            best = max(best, i + 1 - labels[m.group(1)])
    return best or None


def sass_ops_per_weight(kernel, weights_per_thread_iter: int) -> float | None:
    """Instructions in the kernel's main loop ÷ weights one thread decodes per
    trip (None when the SASS cannot be read)."""
    try:
        from triton.tools.disasm import get_sass

        n = loop_instructions(get_sass(kernel.asm["cubin"]))
    except Exception as e:  # noqa: BLE001 - cuobjdump missing etc.
        print(f"no SASS: {e}", file=sys.stderr)
        return None
    return n / weights_per_thread_iter if n else None


def copy_bandwidth() -> float:
    a = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    b.copy_(a)
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(10):
        b.copy_(a)
    e.record()
    torch.cuda.synchronize()
    return 2 * a.numel() * 10 / (s.elapsed_time(e) / 1000)


def graph_time(fn, n_iter: int = 20) -> float:
    """Seconds per call of fn(), replayed from a CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    g.replay()
    torch.cuda.synchronize()
    st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    st.record()
    for _ in range(n_iter):
        g.replay()
    en.record()
    torch.cuda.synchronize()
    return st.elapsed_time(en) / 1000 / n_iter


def copies_for(nbytes: int, l2: int) -> int:
    return max(2, -(-3 * l2 // nbytes))


def bf16_times(out_f: int, in_f: int, ms, l2: int, g) -> dict[int, float]:
    """Seconds of bf16 cuBLAS x [M, in_f] @ W.T for each M in ms, replayed from a CUDA
    graph over copies of one random weight (> 3× L2); x and W drawn from g."""
    wb = torch.randn(out_f, in_f, device="cuda", dtype=torch.bfloat16, generator=g)
    bfs = [wb.clone() for _ in range(copies_for(wb.numel() * 2, l2))]
    del wb
    t_bf = {}
    for m in ms:
        xm = torch.randn(m, in_f, device="cuda", dtype=torch.bfloat16, generator=g)
        t_bf[m] = graph_time(lambda xm=xm: [torch.nn.functional.linear(xm, w)
                                            for w in bfs]) / len(bfs)
    return t_bf


def time_packed(x, copies, **kw) -> float:
    def run():
        return [tk.matvec(x, w, sc, **kw) for w, sc in copies]
    return graph_time(run) / len(copies)


def packed_case(x, k, rows, cols, l2, g):
    words = torch.randint(-2**31, 2**31 - 1, (rows, cols * k // 32), device="cuda",
                          dtype=torch.int32, generator=g)  # any bits are valid states
    scales = torch.rand(rows, device="cuda", generator=g).half() + 0.5
    nbytes = words.numel() * 4 + scales.numel() * 2
    n = copies_for(nbytes, l2)
    return [(words.clone(), scales.clone()) for _ in range(n)], nbytes


def sweep(x, copies, axis, out_f, in_f) -> tuple[dict, list]:
    tried = []
    for cfg in (ROWS_SWEEP if axis == 1 else COLS_SWEEP):
        try:
            t = time_packed(x, copies, code="1mad", k=3, T=256, L=12, axis=axis,
                            out_features=out_f, in_features=in_f, cfg=cfg)
        except Exception as e:  # noqa: BLE001 - a config that does not compile
            tried.append({"cfg": cfg, "error": str(e)[:200]})
            continue
        tried.append({"cfg": cfg, "seconds": t})
        print(json.dumps(tried[-1]), flush=True)
    best = min((c for c in tried if "seconds" in c), key=lambda c: c["seconds"])
    return best["cfg"], tried


def ops_per_weight(x, words, scales, axis, k, code, out_f, in_f, cfg) -> float | None:
    """The SASS instructions per weight of the kernel this call launches."""
    tk.matvec(x, words, scales, code=code, k=k, T=256, L=12, axis=axis, out_features=out_f,
              in_features=in_f, cfg=cfg)
    ng = (in_f if axis == 1 else out_f) // 32
    c = tk.rows_cfg(ng, 1, cfg) if axis == 1 else tk.cols_cfg(in_f, ng, 1, cfg)
    per_trip = (c["RB"] if axis == 1 else c["BI"]) * c["NP"] * 32 // (32 * c["num_warps"])
    return sass_ops_per_weight(tk.LAST["kernel"], per_trip)


def main() -> None:
    dev = "cuda"
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    bw = copy_bandwidth()
    int_ops = 2 * add_compare_rate("int32")
    res = {"host": host(), "l2_bytes": l2, "copy_bytes_per_s": bw, "int32_ops_per_s": int_ops,
           "sweeps": {}, "cases": []}
    g = torch.Generator(device=dev).manual_seed(0)
    best = {}
    for name, out_f, in_f, axis in SHAPES:
        rows, cols = (out_f, in_f) if axis == 1 else (in_f, out_f)
        x = torch.randn(1, in_f, device=dev, dtype=torch.bfloat16, generator=g)
        copies, _ = packed_case(x, 3, rows, cols, l2, g)
        best[name], res["sweeps"][name] = sweep(x, copies, axis, out_f, in_f)
        del copies
    res["chosen"] = best
    for name, out_f, in_f, axis in SHAPES:
        rows, cols = (out_f, in_f) if axis == 1 else (in_f, out_f)
        x = torch.randn(1, in_f, device=dev, dtype=torch.bfloat16, generator=g)
        wb = torch.randn(out_f, in_f, device=dev, dtype=torch.bfloat16, generator=g)
        bfs = [wb.clone() for _ in range(copies_for(wb.numel() * 2, l2))]

        def dense(x=x, bfs=bfs):
            return [torch.nn.functional.linear(x, w) for w in bfs]

        t_bf = graph_time(dense) / len(bfs)
        del bfs, dense
        for k in (2, 3, 4):
            copies, nbytes = packed_case(x, k, rows, cols, l2, g)
            for code in ("1mad", "3inst"):
                kw = dict(code=code, k=k, T=256, L=12, axis=axis, out_features=out_f,
                          in_features=in_f, cfg=best[name])
                t = time_packed(x, copies, **kw)
                opw = ops_per_weight(x, *copies[0], axis, k, code, out_f, in_f, best[name])
                weights = out_f * in_f
                case = {"shape": name, "axis": axis, "k": k, "code": code, "seconds": t,
                        "packed_GB_per_s": nbytes / t / 1e9, "weights_per_s": weights / t,
                        "fraction_of_copy_bw": nbytes / t / bw, "sass_ops_per_weight": opw,
                        "bf16_cublas_seconds": t_bf,
                        "bf16_GB_per_s": out_f * in_f * 2 / t_bf / 1e9,
                        "speedup_vs_bf16": t_bf / t, "copies": len(copies)}
                if opw:
                    case["int_ceiling_weights_per_s"] = int_ops / opw
                    case["fraction_of_int_ceiling"] = (weights / t) / (int_ops / opw)
                    case["fraction_of_tighter_ceiling"] = max(case["fraction_of_copy_bw"],
                                                              case["fraction_of_int_ceiling"])
                if code == "1mad":  # the generic kernels, for the record
                    tab = torch.from_numpy(code_table("1mad", 12).copy()).to(dev)

                    def generic(copies=copies, k=k, axis=axis, out_f=out_f, in_f=in_f, x=x,
                                tab=tab):
                        return [matvec_triton(x, w, s, tab, k=k, T=256, L=12, axis=axis,
                                              out_features=out_f, in_features=in_f)
                                for w, s in copies]
                    case["generic_kernel_seconds"] = graph_time(generic) / len(copies)
                print(json.dumps(case), flush=True)
                res["cases"].append(case)
                save(res)
            del copies


def save(res: dict) -> None:
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "trellis_matvec-cuda.json").write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
