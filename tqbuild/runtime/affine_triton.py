"""Triton decode-matmul of MLX affine weights held packed (CUDA, M ≤ MAX_M rows of x).

Without it `AffineLinear` unpacks its whole weight on every call. Here a program
takes BN (64, 32 or 16) output rows and one split of the inputs, and walks that
split in tiles of BK inputs (128, 64 or 32, the largest dividing in_features): it
loads each packed word once and splits it by shifts (element i of a row sits at bit
i·bits, little-endian — `formats.mlx_affine.unpack`; 3, 5 and 6 bits read the
window over two words), each group's scale and bias once, and forms q·scale + bias
in float32. At M ≤ 2 those float32 values multiply x in float32, the products kept
a tile wide and summed once at the end; at M = 3–8 the values are rounded to x's
dtype (as `AffineLinear.values().to(x.dtype)`) for the tensor cores, float32 sums,
x padded to 16 rows. One split writes x's dtype itself; a small N splits the
inputs, whose float32 partial sums torch adds in split order (deterministic, no
atomics). TQBUILD_AFFINE_KERNEL=0 keeps the unpacking path; the CUDA kernel of
runtime/affine_cuda.py takes what it serves first (TQBUILD_AFFINE_KERNEL=triton:
this kernel for all)."""

from __future__ import annotations

import os
import warnings

import torch

from . import gpu_info

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - CPU-only installs
    triton = None

MAX_M = 8
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
BNS = (64, 32, 16)  # output rows a program tile (`plan`)
BKS = (128, 64, 32)  # inputs a tile: the largest that divides in_features
VEC_TILE = 4096  # M ≤ 2: weights a tile (their float32 products stay in registers)

_failed: list[str] = []


def enabled() -> bool:
    return os.environ.get("TQBUILD_AFFINE_KERNEL", "1") != "0"


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") in ("1", "true", "True")


def _bk(K: int, bn: int = 16, m: int = MAX_M) -> int:
    """Inputs a tile: the largest of BKS dividing K (at M ≤ 2, within VEC_TILE
    elements a tile: its float32 sums stay in registers); 0 where none does."""
    return next((b for b in BKS if K % b == 0 and (m > 2 or bn * b <= VEC_TILE)), 0)


def serves(x: torch.Tensor, bits: int, in_features: int) -> bool:
    """This kernel takes the call: Triton on x's device (CUDA, or the interpreter),
    M ≤ MAX_M, a float x, 1–8 bits, in_features a multiple of 32."""
    M = x.numel() // max(1, x.shape[-1])
    return (triton is not None and not _failed and enabled() and (x.is_cuda or _interpreting())
            and 1 <= M <= MAX_M and x.dtype in DTYPES and 1 <= bits <= 8
            and _bk(in_features) > 0)


if triton is not None:

    @triton.jit
    def _codes(w_ptr, rows, rmask, NW, k0, BITS: tl.constexpr, BN_: tl.constexpr,
               BK_: tl.constexpr):
        """q of inputs k0 … k0 + BK − 1 of the rows, int32 [BN, BK]."""
        if 32 % BITS == 0:  # whole words: one load each, its PER fields by shifts
            PER: tl.constexpr = 32 // BITS
            wi = k0 // PER + tl.arange(0, BK_ // PER)
            wt = tl.load(w_ptr + rows[:, None] * NW + wi[None, :], mask=rmask[:, None], other=0)
            sh = tl.arange(0, PER) * BITS  # an arithmetic shift: the mask drops the sign
            q = tl.reshape((wt[:, :, None] >> sh[None, None, :]) & ((1 << BITS) - 1), (BN_, BK_))
        else:  # element i: the window over words i·bits // 32 and the next (zero past the end)
            start = (k0 + tl.arange(0, BK_)) * BITS
            i0 = start // 32
            w0 = tl.load(w_ptr + rows[:, None] * NW + i0[None, :], mask=rmask[:, None],
                         other=0).to(tl.int64) & 0xFFFFFFFF
            w1 = tl.load(w_ptr + rows[:, None] * NW + i0[None, :] + 1,
                         mask=rmask[:, None] & (i0 + 1 < NW)[None, :], other=0).to(tl.int64)
            q = ((((w1 & 0xFFFFFFFF) << 32 | w0) >> (start % 32)[None, :])
                 & ((1 << BITS) - 1)).to(tl.int32)
        return q

    @triton.jit
    def _groups(p, rows, rmask, G, k0, GS: tl.constexpr, BN_: tl.constexpr,
                BK_: tl.constexpr):
        """A group parameter (scale or bias) of every input k0 … k0 + BK − 1, float32."""
        if GS % BK_ == 0:  # the tile lies in one group
            v = tl.load(p + rows * G + k0 // GS, mask=rmask, other=0).to(tl.float32)
            return tl.broadcast_to(v[:, None], (BN_, BK_))
        elif BK_ % GS == 0:  # whole groups: one load each, repeated GS times
            gi = k0 // GS + tl.arange(0, BK_ // GS)
            v = tl.load(p + rows[:, None] * G + gi[None, :], mask=rmask[:, None],
                        other=0).to(tl.float32)
            return tl.reshape(tl.broadcast_to(v[:, :, None], (BN_, BK_ // GS, GS)), (BN_, BK_))
        else:
            g = (k0 + tl.arange(0, BK_)) // GS
            return tl.load(p + rows[:, None] * G + g[None, :], mask=rmask[:, None],
                           other=0).to(tl.float32)

    @triton.jit
    def _values(w_ptr, s_ptr, b_ptr, rows, rmask, NW, G, k0, BITS: tl.constexpr,
                GS: tl.constexpr, BN_: tl.constexpr, BK_: tl.constexpr):
        """q·scale + bias of inputs k0 … k0 + BK − 1 of the rows, float32 [BN, BK]."""
        q = _codes(w_ptr, rows, rmask, NW, k0, BITS, BN_, BK_)
        s = _groups(s_ptr, rows, rmask, G, k0, GS, BN_, BK_)
        b = _groups(b_ptr, rows, rmask, G, k0, GS, BN_, BK_)
        return q.to(tl.float32) * s + b

    @triton.jit
    def _affine_vec(x_ptr, w_ptr, s_ptr, b_ptr, out_ptr, M, N, K, NW, G,
                    K_PER: tl.constexpr, BITS: tl.constexpr, GS: tl.constexpr,
                    BN_: tl.constexpr, BK_: tl.constexpr, MP: tl.constexpr):
        """M ≤ 2 at whole-word widths: a tile held as [rows, words, fields] (no
        reshape: ~11 instructions a weight against ~22 in _affine_mm's M ≤ 2 branch,
        sm_90 SASS), float32 values times x, the products summed once at the end."""
        PER: tl.constexpr = 32 // BITS
        BW: tl.constexpr = BK_ // PER
        pid_n = tl.program_id(0)
        split = tl.program_id(1)
        rows = pid_n * BN_ + tl.arange(0, BN_)
        rmask = rows < N
        j = tl.arange(0, BW)
        e = tl.arange(0, PER)
        k_lo = split * K_PER
        a0 = tl.zeros((BN_, BW, PER), dtype=tl.float32)
        a1 = tl.zeros((BN_, BW, PER), dtype=tl.float32)
        for kk in range(0, K_PER, BK_):
            k0 = k_lo + kk
            wt = tl.load(w_ptr + rows[:, None] * NW + (k0 // PER + j)[None, :],
                         mask=rmask[:, None], other=0)
            q = (wt[:, :, None] >> (e * BITS)[None, None, :]) & ((1 << BITS) - 1)
            g = (k0 + j * PER) // GS
            sc = tl.load(s_ptr + rows[:, None] * G + g[None, :], mask=rmask[:, None],
                         other=0).to(tl.float32)
            bi = tl.load(b_ptr + rows[:, None] * G + g[None, :], mask=rmask[:, None],
                         other=0).to(tl.float32)
            w = q.to(tl.float32) * sc[:, :, None] + bi[:, :, None]
            xk = k0 + j[:, None] * PER + e[None, :]
            a0 += w * tl.load(x_ptr + xk).to(tl.float32)[None, :, :]
            if MP == 2:
                a1 += w * tl.load(x_ptr + K + xk, mask=M > 1, other=0).to(tl.float32)[None, :, :]
        o = out_ptr + split * M * N + rows
        tl.store(o, tl.sum(tl.sum(a0, axis=2), axis=1).to(out_ptr.dtype.element_ty), mask=rmask)
        if MP == 2:
            tl.store(o + N, tl.sum(tl.sum(a1, axis=2), axis=1).to(out_ptr.dtype.element_ty),
                     mask=rmask & (M > 1))

    @triton.jit
    def _affine_mm(x_ptr, w_ptr, s_ptr, b_ptr, out_ptr, M, N, K, NW, G,
                   K_PER: tl.constexpr, BITS: tl.constexpr, GS: tl.constexpr, BN_: tl.constexpr,
                   BK_: tl.constexpr, MP: tl.constexpr, F32: tl.constexpr):
        pid_n = tl.program_id(0)
        split = tl.program_id(1)
        rows = pid_n * BN_ + tl.arange(0, BN_)
        rmask = rows < N
        k_lo = split * K_PER
        o = out_ptr + split * M * N + rows
        if MP <= 2:  # one or two rows of x: float32 products kept a tile wide, summed once
            a0 = tl.zeros((BN_, BK_), dtype=tl.float32)
            a1 = tl.zeros((BN_, BK_), dtype=tl.float32)
            for kk in range(0, K_PER, BK_):
                k0 = k_lo + kk
                w = _values(w_ptr, s_ptr, b_ptr, rows, rmask, NW, G, k0, BITS, GS, BN_, BK_)
                ks = k0 + tl.arange(0, BK_)
                a0 += w * tl.load(x_ptr + ks).to(tl.float32)[None, :]
                if MP == 2:
                    a1 += w * tl.load(x_ptr + K + ks, mask=M > 1, other=0).to(tl.float32)[None, :]
            tl.store(o, tl.sum(a0, axis=1).to(out_ptr.dtype.element_ty), mask=rmask)
            if MP == 2:
                tl.store(o + N, tl.sum(a1, axis=1).to(out_ptr.dtype.element_ty),
                         mask=rmask & (M > 1))
        else:  # the tensor cores: the values rounded to x's dtype, x padded to MP rows
            ms = tl.arange(0, MP)
            acc = tl.zeros((BN_, MP), dtype=tl.float32)
            for kk in range(0, K_PER, BK_):
                k0 = k_lo + kk
                w = _values(w_ptr, s_ptr, b_ptr, rows, rmask, NW, G, k0, BITS, GS, BN_,
                            BK_).to(x_ptr.dtype.element_ty)
                ks = k0 + tl.arange(0, BK_)
                xt = tl.load(x_ptr + ms[None, :] * K + ks[:, None], mask=(ms < M)[None, :],
                             other=0)
                if F32:  # float32 x, or the interpreter (its 16-bit dot is wrong)
                    acc += tl.dot(w.to(tl.float32), xt.to(tl.float32), input_precision="ieee")
                else:
                    acc += tl.dot(w, xt)
            tl.store(o[:, None] + ms[None, :] * N, acc.to(out_ptr.dtype.element_ty),
                     mask=rmask[:, None] & (ms < M)[None, :])



def plan(N: int, K: int, M: int, device: torch.device) -> tuple[int, int, int]:
    """(output rows a program, inputs a tile, input splits). M ≤ 2: the widest row
    tile that still gives every streaming multiprocessor a program, else 16 rows;
    M > 2: 64 rows (the tensor-core path needs them: sm_90 SASS 13.3 instructions a
    weight at 64 rows, 32.7 at 16; bench/results/affine_sass.json). Inputs split
    (whole tiles) where half the SMs would idle. One program a row tile, no split,
    on the interpreter. A split call adds a kernel (the fixed-order sum)."""
    if device.type != "cuda":
        return BNS[-1], _bk(K, BNS[-1], M), 1
    sms = gpu_info.sm_count(device)
    bn = BNS[0] if M > 2 else next((b for b in BNS if -(-N // b) >= sms), BNS[-1])
    bk = _bk(K, bn, M)
    progs, tiles = -(-N // bn), K // bk
    s = max(1, min(tiles, sms // progs)) if 2 * progs < sms else 1
    while tiles % s:
        s -= 1
    return bn, bk, s


def _kernel_for(M: int, bits: int, group_size: int, f32: bool):
    """The kernel for M rows of x and its M-dependent constants: `_affine_vec` at M ≤ 2
    where whole words hold whole fields of one group, else `_affine_mm`."""
    if M <= 2 and 32 % bits == 0 and group_size % (32 // bits) == 0:
        return _affine_vec, {"MP": M}
    return _affine_mm, {"MP": M if M <= 2 else 16, "F32": f32 or _interpreting()}


def matmul(x: torch.Tensor, words: torch.Tensor, scales: torch.Tensor, biases: torch.Tensor,
           bits: int, group_size: int, out_features: int,
           splits: int | None = None) -> torch.Tensor | None:
    """x [..., K] @ the affine weight's values .T -> [..., N] in x's dtype (`serves`
    first); None where the kernel failed to build or run (warned once; the caller
    unpacks instead). `splits` of the inputs (a divisor of K's tiles): by default
    `plan`'s."""
    K = x.shape[-1]
    x2 = x.reshape(-1, K).contiguous()
    M, N = x2.shape[0], out_features
    bn, bk, auto = plan(N, K, M, x.device)
    splits = splits or auto
    assert (K // bk) % splits == 0, (K, bk, splits)
    # one split writes x's dtype itself; several write float32 partial sums
    out = torch.empty((splits, M, N) if splits > 1 else (M, N), device=x.device,
                      dtype=torch.float32 if splits > 1 else x.dtype)
    args = (x2, words, scales, biases, out, M, N, K, words.shape[-1], scales.shape[-1])
    kernel, consts = _kernel_for(M, bits, group_size, x2.dtype == torch.float32)
    try:
        kernel[(triton.cdiv(N, bn), splits)](*args, K_PER=K // splits, BITS=bits,
                                             GS=group_size, BN_=bn, BK_=bk, **consts)
    except Exception as e:  # noqa: BLE001 - a Triton compile or launch failure
        _failed.append(f"{type(e).__name__}: {e}")
        warnings.warn(f"affine Triton kernel unavailable ({_failed[-1][:300]}); "
                      "unpacking the weight instead", stacklevel=3)
        return None
    y = out if splits == 1 else out.sum(0).to(x.dtype)
    return y.reshape(*x.shape[:-1], N)


def compile_ahead(x_dtype: str, s_dtype: str, M: int, bits: int, group_size: int, bn: int,
                  bk: int, k_per: int, arch: int = 90):
    """The kernel `matmul` launches for M rows, compiled for CUDA sm_<arch> without a
    GPU (Triton ships ptxas): a build check, and its SASS for counting
    (`.asm["cubin"]`). Dtypes as Triton spells them (bf16, fp16, fp32)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel, consts = _kernel_for(M, bits, group_size, x_dtype == "fp32")
    sig = {"x_ptr": f"*{x_dtype}", "w_ptr": "*i32", "s_ptr": f"*{s_dtype}",
           "b_ptr": f"*{s_dtype}", "out_ptr": f"*{x_dtype}", **dict.fromkeys(
               ("M", "N", "K", "NW", "G"), "i32")}
    const = {"K_PER": k_per, "BITS": bits, "GS": group_size, "BN_": bn, "BK_": bk, **consts}
    sig.update(dict.fromkeys(const, "constexpr"))
    names = kernel.arg_names
    src = ASTSource(fn=kernel, signature=sig,
                    constexprs={(names.index(k),): v for k, v in const.items()})
    return triton.compile(src, target=GPUTarget("cuda", arch, 32))
