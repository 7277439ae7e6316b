"""Decode-matmul of packed MLX affine weights on the GPU: tq-build's tensor-core CUDA
kernel (runtime/affine_cuda.py, what `AffineLinear` runs on CUDA where it serves)
and its Triton kernel (runtime/affine_triton.py, the fallback) next to the unpacking
path they replace, torch's tinygemm int4 kernel and bf16 cuBLAS, same shapes.

    python bench/affine_gemv.py [--ms 1,4,8] [--cuda-splits 2,4] [--tag=-x]
        # -> results/affine_gemv-cuda{tag}.json
    python bench/affine_gemv.py --variants "-DTQ_AFF_MINB=3;-DTQ_AFF_PDL=1" --shapes qkv,q
        # the CUDA kernel under nvcc define sets beside its default -> …-variants.json
    python bench/affine_gemv.py --sass     # no GPU: the kernels' sm_90 SASS a weight
                                           # -> results/affine_sass.json (the CUDA
                                           # kernel's with the nvcc on PATH)

Shapes: Llama-3-8B's (4096², 1024 × 4096 k/v, 14336 × 4096 gate/up, 4096 × 14336
down), 4-bit group 64 (and 8-bit group 64 at 4096²), bf16 x, bf16 scales and
biases. Each timing replays a CUDA graph over enough weight copies that the working
set exceeds 3× the L2. Ceiling: the packed bytes (words, scales, biases) at the
measured copy bandwidth.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from decode_8b import affine_tq  # noqa: E402
from hostinfo import host  # noqa: E402
from trellis_matvec import copies_for, copy_bandwidth, graph_time  # noqa: E402

from tqbuild.runtime import affine_cuda, affine_torch, affine_triton, gpu_info  # noqa: E402

SHAPES = [("q 4096x4096", 4096, 4096, 4), ("qkv 6144x4096", 6144, 4096, 4),
          ("kv 1024x4096", 1024, 4096, 4),
          ("gate 14336x4096", 14336, 4096, 4), ("down 4096x14336", 4096, 14336, 4),
          ("q8bit 4096x4096", 4096, 4096, 8), ("lm_head8 128256x4096", 128256, 4096, 8)]
GROUP = 64


def affine_copies(out_f: int, in_f: int, bits: int, l2: int, g: torch.Generator):
    """(words, scales, biases) copies of one random affine module (decode_8b's), enough
    to exceed the L2 three times; and the bytes of one."""
    m = affine_tq(out_f, in_f, g, bits, GROUP)
    nbytes = m.weight.numel() * 4 + 2 * m.scales.numel() * 2
    n = copies_for(nbytes, l2)
    return [(m.weight.clone(), m.scales.clone(), m.biases.clone()) for _ in range(n)], nbytes


def tinygemm_copies(out_f: int, in_f: int, l2: int, g: torch.Generator):
    q = torch.randint(0, 16, (out_f, in_f), device="cuda", dtype=torch.int32, generator=g)
    w = torch.ops.aten._convert_weight_to_int4pack((q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8),
                                                   8)
    sz = torch.zeros(in_f // GROUP, out_f, 2, device="cuda", dtype=torch.bfloat16)
    sz[..., 0] = 0.004
    n = copies_for(w.numel() * w.element_size() + sz.numel() * 2, l2)
    return [(w.clone(), sz.clone()) for _ in range(n)]


CUDA_SPLITS: tuple[int, ...] = ()  # --cuda-splits: the CUDA kernel also at these input splits


def time_case(x, copies, dense, tiny, bits: int, out_f: int) -> dict:
    """Seconds a call of each path at one x (CUDA graphs over the copies); the CUDA
    kernel at its planned splits and at each of CUDA_SPLITS."""
    t = {"triton_seconds": graph_time(lambda: [
        affine_triton.matmul(x, w, s, b, bits, GROUP, out_f) for w, s, b in copies]) / len(copies)}
    if affine_cuda.handles(*x.shape, x.dtype, copies[0][1].dtype, bits, GROUP):
        t["cuda_seconds"] = graph_time(lambda: [
            affine_cuda.matmul(x, w, s, b, bits, GROUP, out_f) for w, s, b in copies]) / len(
                copies)
        for n in CUDA_SPLITS:
            t[f"cuda_splits{n}_seconds"] = graph_time(lambda n=n: [
                affine_cuda.matmul(x, w, s, b, bits, GROUP, out_f, splits=n)
                for w, s, b in copies]) / len(copies)
    t["unpack_seconds"] = graph_time(lambda: [
        x @ affine_torch.affine_values(w, s, b, bits, GROUP).to(x.dtype).t()
        for w, s, b in copies[:2]], n_iter=3) / 2
    t["bf16_cublas_seconds"] = graph_time(lambda: [x @ w.t() for w in dense]) / len(dense)
    if tiny is not None:
        t["tinygemm_seconds"] = graph_time(lambda: [
            torch.ops.aten._weight_int4pack_mm(x, w, GROUP, sz) for w, sz in tiny]) / len(tiny)
    return t


def largest_loop(cubin: bytes, function: str | None = None) -> tuple[int, dict]:
    """(instructions, opcode histogram) of the largest backward-branch loop (of one
    function, by its mangled name)."""
    import collections
    import re
    import subprocess
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        fun = ["-fun", function] if function else []
        out = subprocess.run(["cuobjdump", "-sass", *fun, f.name], capture_output=True,
                             text=True).stdout
    ins = [(int(m.group(1), 16), m.group(2).strip()) for ln in out.splitlines()
           if (m := re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", ln))
           and not m.group(2).strip().startswith("NOP")]
    best: list = []
    for i, (addr, text) in enumerate(ins):
        b = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", text)
        if b and int(b.group(1), 16) <= addr:
            j = next(j for j, (a, _) in enumerate(ins) if a >= int(b.group(1), 16))
            if i + 1 - j > len(best):
                best = ins[j:i + 1]
    hist = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", t).split()[0].split(".")[0]
                               for _, t in best)
    return len(best), dict(hist.most_common())


def sass(ms: list[int]) -> None:
    """Every planned kernel of the 8B shapes compiled for sm_90 (Triton's ptxas; a
    local cuobjdump reads it): the K loop's instructions a weight a thread (one trip
    = one tile of BN × BK weights over 128 threads), by pipe."""
    from gemv_sass import pipes

    cuda = torch.device("cuda")
    gpu_info.sm_count = lambda device: 132  # the H200
    res: dict = {"arch": "sm_90", "cases": []}
    for name, out_f, in_f, bits in SHAPES:
        for m in ms:
            bn, bk, splits = affine_triton.plan(out_f, in_f, m, cuda)
            c = affine_triton.compile_ahead("bf16", "bf16", m, bits, GROUP, bn, bk,
                                            in_f // splits)
            n, hist = largest_loop(c.asm["cubin"])
            per = bn * bk / (32 * c.metadata.num_warps)
            case = {"shape": name, "M": m, "bits": bits, "plan": [bn, bk, splits],
                    "loop_instructions": n, "per_weight": round(n / per, 2),
                    "pipes_per_weight": {k: round(v / per, 2) for k, v in pipes(hist).items()},
                    "histogram": hist}
            res["cases"].append(case)
            print(name, m, case["plan"], case["per_weight"], case["pipes_per_weight"], flush=True)
    res["cuda_kernel"] = cuda_sass()
    (HERE / "results" / "affine_sass.json").write_text(json.dumps(res, indent=1) + "\n")


def cuda_sass() -> list[dict] | str:
    """runtime/affine_gemv.cu compiled for sm_90 by the nvcc on PATH: its loop's
    instructions a weight a lane (one trip: AFF_DEPTH chunks × 4 words × 2 rows ×
    32 / bits fields) and registers, per (bits, dtype)."""
    import re
    import shutil
    import subprocess
    import tempfile

    from gemv_sass import pipes

    if shutil.which("nvcc") is None:
        return "no nvcc on PATH"
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "a.cubin"
        p = subprocess.run(["nvcc", "-O3", "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-o",
                            str(cubin), str(affine_cuda.SOURCE)], capture_output=True,
                           text=True, check=True)
        regs = re.findall(r"Compiling entry function '(\w+)'.*?Used (\d+) registers",
                          p.stdout + p.stderr, re.S)
        out = []
        for name, nregs in regs:
            bits, dt = (int(v) for v in re.match(r"_Z10affine_mmaILi(\d)ELi(\d)", name).groups())
            n, hist = largest_loop(cubin.read_bytes(), name)
            per = 4 * 4 * 2 * (32 // bits)
            out.append({"bits": bits, "x_dtype": ["bf16", "fp16"][dt], "registers": int(nregs),
                        "loop_instructions": n, "per_weight": round(n / per, 2),
                        "pipes_per_weight": {k: round(v / per, 2)
                                             for k, v in pipes(hist).items()},
                        "histogram": hist})
            print("cuda", out[-1]["bits"], out[-1]["x_dtype"], out[-1]["per_weight"],
                  out[-1]["pipes_per_weight"], flush=True)
    return out


def variant_sweep(variants: list[str], names: list[str], ms: list[int], tag: str) -> None:
    """The CUDA kernel under each ';'-separated nvcc define set (TQBUILD_AFFINE_FLAGS)
    beside the default, same process and weights: µs a call and the fraction of the
    copy bandwidth -> results/affine_gemv-cuda{tag}-variants.json."""
    import os

    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    bw = copy_bandwidth()
    g = torch.Generator(device="cuda").manual_seed(0)
    res: dict = {"host": host(), "copy_bandwidth_Bps": bw, "cases": []}
    for name, out_f, in_f, bits in SHAPES:
        if names and name.split()[0] not in names:
            continue
        copies, nbytes = affine_copies(out_f, in_f, bits, l2, g)
        for m in ms:
            x = torch.randn(m, in_f, device="cuda", dtype=torch.bfloat16, generator=g)
            case: dict = {"shape": name, "M": m, "bits": bits, "packed_bytes": nbytes}
            for flags in ["", *variants]:
                os.environ["TQBUILD_AFFINE_FLAGS"] = flags
                affine_cuda._library.cache_clear()
                t = graph_time(lambda x=x, c=copies, n=out_f, k=bits: [
                    affine_cuda.matmul(x, w, s, b, k, GROUP, n) for w, s, b in c]) / len(copies)
                case[flags or "default"] = {"us": t * 1e6, "fraction_of_copy_bandwidth":
                                            nbytes / t / bw}
            res["cases"].append(case)
            print(json.dumps(case), flush=True)
    os.environ["TQBUILD_AFFINE_FLAGS"] = ""
    affine_cuda._library.cache_clear()
    assert not affine_cuda._failed, affine_cuda._failed
    (HERE / "results" / f"affine_gemv-cuda{tag}-variants.json").write_text(
        json.dumps(res, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default="",
                    help="';'-separated nvcc define sets: the CUDA kernel under each, alone")
    ap.add_argument("--shapes", default="", help="with --variants: shape names, e.g. qkv,q")
    ap.add_argument("--ms", default="1,4,8")
    ap.add_argument("--tag", default="")
    ap.add_argument("--sass", action="store_true", help="no GPU: the kernels' SASS counts")
    ap.add_argument("--cuda-splits", default="",
                    help="also time the CUDA kernel at these input splits, e.g. 2,4")
    a = ap.parse_args()
    ms = [int(m) for m in a.ms.split(",")]
    global CUDA_SPLITS
    CUDA_SPLITS = tuple(int(v) for v in a.cuda_splits.split(",") if v)
    if a.sass:
        sass(ms)
        return
    if a.variants:
        variant_sweep(a.variants.split(";"), [n for n in a.shapes.split(",") if n], ms, a.tag)
        return
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    bw = copy_bandwidth()
    g = torch.Generator(device="cuda").manual_seed(0)
    res = {"host": host(), "copy_bandwidth_Bps": bw, "group_size": GROUP, "cases": []}
    out = HERE / "results" / f"affine_gemv-cuda{a.tag}.json"
    for name, out_f, in_f, bits in SHAPES:
        copies, nbytes = affine_copies(out_f, in_f, bits, l2, g)
        dense = [torch.randn(out_f, in_f, device="cuda", dtype=torch.bfloat16, generator=g)
                 for _ in range(copies_for(out_f * in_f * 2, l2))]
        tiny = tinygemm_copies(out_f, in_f, l2, g) if bits == 4 else None
        for m in ms:
            x = torch.randn(m, in_f, device="cuda", dtype=torch.bfloat16, generator=g)
            case = {"shape": name, "M": m, "bits": bits, "packed_bytes": nbytes,
                    "plan": affine_triton.plan(out_f, in_f, m, x.device),
                    **time_case(x, copies, dense, tiny, bits, out_f)}
            t = case["triton_seconds"]
            case["triton_GBps"] = nbytes / t / 1e9
            case["fraction_of_copy_bandwidth"] = nbytes / t / bw
            case["speedup_vs_bf16"] = case["bf16_cublas_seconds"] / t
            if tiny is not None:
                case["speedup_vs_tinygemm"] = case["tinygemm_seconds"] / t
            if "cuda_seconds" in case:
                c = case["cuda_seconds"]
                case["cuda_fraction_of_copy_bandwidth"] = nbytes / c / bw
                case["cuda_speedup_vs_bf16"] = case["bf16_cublas_seconds"] / c
                if tiny is not None:
                    case["cuda_speedup_vs_tinygemm"] = case["tinygemm_seconds"] / c
            res["cases"].append(case)
            print(json.dumps(case), flush=True)
            out.write_text(json.dumps(res, indent=1) + "\n")
    assert not affine_triton._failed, affine_triton._failed
    assert not affine_cuda._failed, affine_cuda._failed
    print("->", out)


if __name__ == "__main__":
    main()
