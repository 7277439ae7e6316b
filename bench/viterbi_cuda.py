"""The fused CUDA Viterbi vs the previous paths, in one run on one GPU.

    python bench/viterbi_cuda.py [--quick] [--code mul1] [--u-ab] [--ls 16] [--tag=-x]
    TQBUILD_VITERBI_FLAGS=-DTQ_VIT_REG=1 python bench/viterbi_cuda.py --ls 16 --tag=-reg1
        # a compile-time variant of the kernel (its flags are recorded)
    python bench/viterbi_cuda.py --ls 16 --skip-bare --budget-gb 14 --profile --profile-lk 16,3
        # another scratch budget a launch; where a down-like L = 16 k = 3 call's time goes

Bare tail-biting Viterbi (both passes) on N(0, 1) blocks of T = 256 — 4096 and
65536 sequences — at L = 12 and 16, k = 2, 3, 4: the CUDA kernel next to the
previous path (TQBUILD_VITERBI=triton: Triton forward + torch backtrack at
L = 12; torch at L = 16); then per-tensor LDLQ conversion of a gate-like
17408 × 5120 (axis 1) and a down-like 5120 × 17408 (axis 0) matrix with a
full-rank correlated Hessian. `--u-ab`: the inverse Cholesky factor U both ways
(CPU builds' Cholesky–inverse–Cholesky vs CUDA builds' reversed Cholesky +
triangular inverse), alone and inside L = 12, k = 3 conversions, same run.
Writes bench/results/viterbi_cuda-cuda{--tag}.json.

Ceiling: per weight and pass the encoder forms 2^L state costs, each
(code − x)² + best — a sub, a mul, an add — and a compare-select into the
class minimum: 4 float32 pipe ops, × 2 passes. At the H200's measured float32
rate (the add+min pair chain of bench/trellis_codec.py, counted as 2 ops a
pair) that gives the weights/s no implementation of this recurrence beats.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import torch  # noqa: E402
from hostinfo import host  # noqa: E402

from tqbuild.kernels import viterbi, viterbi_cuda  # noqa: E402

OPS_PER_STATE = 4
CODE = "mul1"
# per-tensor cases: name, out, in, coded axis, weight seed, Hessian seed
TENSORS = (("gate-like", 17408, 5120, 1, 10, 20), ("down-like", 5120, 17408, 0, 11, 21))


def ldlq_geometry(L: int, k: int, axis: int):
    """As the build: axis 1 steps one trellis block, axis 0 128 columns."""
    from tqbuild.stages.trellis import Geometry

    return Geometry(L=L, k=k, T=256, code=CODE, axis=axis, group=256 if axis == 1 else 128)


def tensor_case(out: int, inp: int, ws: int, hs: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Weights and a full-rank correlated Hessian of one per-tensor case."""
    g = torch.Generator(device="cuda").manual_seed(ws)
    w = 0.02 * torch.randn(out, inp, device="cuda", generator=g)
    return w, correlated_h(inp, 16384 if inp == 5120 else 34816, hs)


def timed(fn, reps: int = 1) -> float:
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / reps


def with_path(path: str, fn):
    old = os.environ.get("TQBUILD_VITERBI")
    os.environ["TQBUILD_VITERBI"] = path
    try:
        return fn()
    finally:
        if old is None:
            os.environ.pop("TQBUILD_VITERBI")
        else:
            os.environ["TQBUILD_VITERBI"] = old


LS = (12, 16)  # --ls
OLD = True  # --no-old: no timing of the previous paths (variant sweeps)


def bare(res: dict, quick: bool) -> None:
    from trellis_codec import add_compare_rate

    rate = add_compare_rate("float32") * 2  # float32 ops/s
    res["float32_ops_per_s"] = rate
    g = torch.Generator(device="cuda").manual_seed(0)
    for L in LS:
        for k in (2, 3, 4):
            # two passes, 2^L states a step of `per` weights (the pair code: 2)
            per = 2 if CODE == "pair" else 1
            ceiling = per * rate / (2 * 2**L * OPS_PER_STATE)
            for n in (4096, 65536):
                x = torch.randn(n, 256, device="cuda", generator=g)
                row = {"L": L, "k": k, "code": CODE, "sequences": n, "T": 256,
                       "ceiling_weights_per_s": ceiling}
                s = timed(lambda x=x, L=L, k=k: viterbi.quantize_blocks(x, L, k, CODE),
                          reps=1 if n > 4096 or L == 16 else 3)
                row["cuda_weights_per_s"] = x.numel() / s
                row["cuda_fraction_of_ceiling"] = row["cuda_weights_per_s"] / ceiling
                old = "triton" if L == 12 else "torch"
                if OLD and (n == 4096 or (L == 12 and not quick)):
                    s_old = with_path(old, lambda x=x, L=L, k=k: timed(
                        lambda: viterbi.quantize_blocks(x, L, k, CODE)))
                    row[f"{old}_weights_per_s"] = x.numel() / s_old
                    row["speedup"] = row["cuda_weights_per_s"] / row[f"{old}_weights_per_s"]
                    same = with_path(old, lambda x=x, L=L, k=k: viterbi.quantize_blocks(
                        x[:256], L, k, CODE))
                    row["states_equal_old_path"] = bool(torch.equal(
                        same, viterbi.quantize_blocks(x[:256], L, k, CODE)))
                print(json.dumps(row), flush=True)
                res["bare"].append(row)


def correlated_h(n: int, rows: int, seed: int) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(seed)
    mix = torch.eye(n, device="cuda") + 0.05 * torch.randn(n, n, device="cuda", generator=g)
    h = torch.zeros(n, n, device="cuda", dtype=torch.float64)
    for a in range(0, rows, 4096):
        x = torch.randn(min(4096, rows - a), n, device="cuda", generator=g) @ mix
        h += (x.T @ x).double()
    return h


def per_tensor(res: dict, quick: bool, ks: tuple[int, ...] = (2, 3, 4),
               names: tuple[str, ...] = ()) -> None:
    from tqbuild.stages.trellis import cuda_row_parts, trellis_guarded

    memory = torch.cuda.get_device_properties(0).total_memory
    for name, out, inp, axis, ws, hs in TENSORS:
        if names and name not in names:
            continue
        w, h = tensor_case(out, inp, ws, hs)
        for L in LS:
            for k in ((3,) if quick else ks):
                geo = ldlq_geometry(L, k, axis)
                # untimed: the Viterbi library's build (with --skip-bare the first conversion
                # paid it: gate-like L = 16 k = 2 timed 17.0 s, 5.2 M/s, -s23b-mul1) and
                # the first launches at this (L, k)
                trellis_guarded(w[:512, :1024].contiguous(), h[:1024, :1024].contiguous(),
                                geo, damp=0.01)
                torch.cuda.synchronize()
                t = time.perf_counter()
                r = trellis_guarded(w, h, geo, damp=0.01)
                torch.cuda.synchronize()
                s = time.perf_counter() - t
                row = {"tensor": name, "shape": [out, inp], "axis": axis, "L": L, "k": k,
                       "code": CODE, "ldlq_row_parts": cuda_row_parts(memory, CODE, L),
                       "seconds": s, "weights_per_s": w.numel() / s,
                       "proxy_loss": r.proxy_loss, "method": r.method}
                print(json.dumps(row), flush=True)
                res["per_tensor"].append(row)
        del h


def u_ab(res: dict) -> None:
    """U both ways on the same Hessians: alone (float64, 17408² and 5120²) and
    inside L = 12, k = 3 per-tensor conversions (seconds, proxy, equal states)."""
    from tqbuild.stages import guard
    from tqbuild.stages.trellis import trellis_guarded

    reversed_u = guard._inverse_cholesky_upper_reversed
    arms = {"direct": guard._inverse_cholesky_upper_direct, "reversed": reversed_u}
    rows = []
    try:
        for name, out, inp, axis, ws, hs in TENSORS:
            w, h = tensor_case(out, inp, ws, hs)
            geo = ldlq_geometry(12, 3, axis)
            got = {}
            for arm, fn in arms.items():
                guard._inverse_cholesky_upper_reversed = fn  # what CUDA calls
                u_s = timed(lambda h=h: guard.inverse_cholesky_upper(h, 0.01), reps=2)
                t_s = timed(lambda w=w, h=h, geo=geo: trellis_guarded(w, h, geo, damp=0.01),
                            reps=2)
                got[arm] = trellis_guarded(w, h, geo, damp=0.01)
                rows.append({"tensor": name, "n": inp, "arm": arm, "u_seconds": u_s,
                             "tensor_seconds": t_s, "weights_per_s": w.numel() / t_s,
                             "proxy_loss": got[arm].proxy_loss})
                print(json.dumps(rows[-1]), flush=True)
            rows[-1]["states_equal_fraction"] = float(
                (got["direct"].states == got["reversed"].states).float().mean())
            del h
    finally:
        guard._inverse_cholesky_upper_reversed = reversed_u
    res["u_ab"] = rows


def profile_down_like(res: dict, L: int = 12, k: int = 3) -> None:
    """Where a down-like conversion at (L, k) spends its time: torch.profiler's top
    operators and kernels by self CUDA time, and the wall time of the profiled call."""
    from torch.profiler import ProfilerActivity, profile

    from tqbuild.stages.trellis import trellis_guarded

    _, out, inp, axis, ws, hs = TENSORS[1]  # down-like
    w, h = tensor_case(out, inp, ws, hs)
    geo = ldlq_geometry(L, k, axis)
    trellis_guarded(w, h, geo, damp=0.01)
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        trellis_guarded(w, h, geo, damp=0.01)
        torch.cuda.synchronize()
    rows: list[dict] = [{"wall_seconds": time.perf_counter() - t0}]
    for e in sorted(prof.key_averages(), key=lambda e: -e.self_device_time_total)[:20]:
        rows.append({"op": e.key, "calls": e.count, "self_cuda_ms": e.self_device_time_total / 1e3,
                     "cpu_total_ms": e.cpu_time_total / 1e3})
        print(json.dumps(rows[-1]), flush=True)
    res[f"profile_down_like_L{L}_k{k}"] = rows


def main() -> None:
    global CODE, LS, OLD
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-bare", action="store_true")
    ap.add_argument("--profile", action="store_true", help="profile a down-like conversion")
    ap.add_argument("--profile-lk", default="12,3", help="the profiled conversion's L,k")
    ap.add_argument("--budget-gb", type=float, default=0,
                    help="scratch bytes a launch (viterbi_cuda.BP_BUDGET; 0: its default)")
    ap.add_argument("--u-ab", action="store_true", help="U both ways, same run")
    ap.add_argument("--code", default="mul1")
    ap.add_argument("--ls", default="12,16", help="trellis lengths L to run")
    ap.add_argument("--no-old", action="store_true", help="skip the previous paths")
    ap.add_argument("--tag", default="")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--ks", default="2,3,4", help="per-tensor bit widths k")
    ap.add_argument("--tensors", default="", help="per-tensor cases by name (all: empty)")
    args = ap.parse_args()
    CODE = args.code
    LS = tuple(int(v) for v in args.ls.split(","))
    OLD = not args.no_old
    if args.budget_gb:
        viterbi_cuda.BP_BUDGET = int(args.budget_gb * 2**30)
    res: dict = {"host": host(), "device": torch.cuda.get_device_name(), "bare": [],
                 "flags": viterbi_cuda.flags(),
                 "streams": os.environ.get("TQBUILD_VITERBI_STREAMS", "per k"),
                 "scratch_budget_bytes": viterbi_cuda.scratch_budget(torch.device("cuda")),
                 "per_tensor": [], "ops_per_state": OPS_PER_STATE}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    def save() -> None:  # after every part (a timed-out run keeps what it measured)
        (out / f"viterbi_cuda-cuda{args.tag}.json").write_text(json.dumps(res, indent=2) + "\n")

    for want, part in ((not args.skip_bare, lambda: bare(res, args.quick)),
                       (args.u_ab, lambda: u_ab(res)),
                       (True, lambda: per_tensor(
                           res, args.quick, tuple(int(k) for k in args.ks.split(",")),
                           tuple(n for n in args.tensors.split(",") if n))),
                       (args.profile, lambda: profile_down_like(
                           res, *(int(v) for v in args.profile_lk.split(","))))):
        if want:
            part()
            save()


if __name__ == "__main__":
    main()
