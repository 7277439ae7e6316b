"""Triton decode-matvec kernels for packed trellis weights (CUDA).

A row's block of T weights is T/32 periods of 32 weights in k words. With
j = T−1−t (the stored reverse order, DESIGN §5), weight j of a block sits at
bit k·j: period p = j // 32 holds words k·p .. k·p+k−1 and weight v = j % 32 of
it starts at bit k·v of that run. So one program loads, per period, the k
words and the next one (wrapping at the block's end) as k+1 coalesced tiles —
"planes" — and decodes its 32 weights with compile-time shifts: no per-weight
index math, no per-weight table access. The code value is computed from the
state in registers (1MAD: multiply-add and a dp4a byte sum; 3INST:
multiply-add, one lop3, two fp16 halves added — inline PTX on CUDA) instead of
gathered from a table; its constant factor (1/147.8 or 1/RMS) is applied once
per output, with the row scale.

`rows` (axis 1, coded along the input dim): a program owns RB output rows,
unrolled, and walks the input periods, so each input it loads serves RB
weights (XV: a period's 32 inputs in 8 or 16 wide loads; PF: the next tile's
words prefetched). `cols` (axis 0, coded along the output dim, stored
transposed): a program owns NP output periods and a split of the input rows,
keeps one accumulator per weight of a period, reduces them once and writes its
slice of a buffer; the splits are summed afterwards in a fixed order
(deterministic, no atomics). Every input row (M ≤ 4) reuses each decoded
weight.
"""

from __future__ import annotations

import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - CPU-only installs
    triton = None

from ..kernels.trellis_codes import BYTESUM_DIV, BYTESUM_HASH, INST3_RMS

CODE_IDS = {"1mad": 0, "3inst": 1, "mul1": 2}
# the code's constant factor, applied after the sum (byte-sum codes: 1/147.80…; 3INST: 1/RMS)
CODE_FACTOR = {**{c: 1.0 / BYTESUM_DIV for c in BYTESUM_HASH}, "3inst": 1.0 / INST3_RMS}


if triton is not None:

    @triton.jit
    def _raw_code(s, CODE: tl.constexpr, ASM: tl.constexpr):
        """The code value of states s (uint32) before its constant factor. ASM:
        PTX for the byte sum (dp4a) and the fp16 halves (the interpreter takes
        the plain path)."""
        if CODE != 1:  # byte-sum codes: bytes of s·34038481 + 76625530 (1MAD) or
            # of s·0x83DCD12D (MUL1) summed, minus 510
            if CODE == 0:
                x = s * 34038481 + 76625530
            else:
                x = (s * 0x83DCD12D).to(tl.uint32)
            # int -> float without I2F: 2^23 + total has total in its mantissa
            if ASM:
                f = tl.inline_asm_elementwise(
                    "{.reg .u32 m, c; mov.u32 m, 16843009; mov.u32 c, 1258291200;"
                    " dp4a.u32.u32 $0, $1, m, c;}",
                    "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)
            else:
                t = (x & 0x00FF00FF) + ((x >> 8) & 0x00FF00FF)
                f = ((t & 0xFFFF) + (t >> 16) | 0x4B000000).to(tl.float32, bitcast=True)
            return f - 8389118.0
        else:  # 3INST: two fp16 halves summed in fp16
            x = s * 89226354 + 64248484
            if ASM:  # one lop3 for (x & m) ^ c (0x6A = (a & b) ^ c)
                return tl.inline_asm_elementwise(
                    "{.reg .b32 r, m, c; .reg .b16 l, h, s; mov.b32 m, 0x8FFF8FFF;"
                    " mov.b32 c, 0x3B603B60; lop3.b32 r, $1, m, c, 0x6A;"
                    " mov.b32 {l, h}, r; add.rn.f16 s, l, h; cvt.f32.f16 $0, s;}",
                    "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)
            r = (x & 0x8FFF8FFF) ^ 0x3B603B60
            lo = (r & 0xFFFF).to(tl.uint16).to(tl.float16, bitcast=True)
            hi = (r >> 16).to(tl.uint16).to(tl.float16, bitcast=True)
            return (lo + hi).to(tl.float32)

    @triton.jit
    def _pick(i: tl.constexpr, p0, p1, p2, p3, p4):
        if i == 0:
            return p0
        elif i == 1:
            return p1
        elif i == 2:
            return p2
        elif i == 3:
            return p3
        else:
            return p4

    @triton.jit
    def _state(v: tl.constexpr, p0, p1, p2, p3, p4, K: tl.constexpr, L: tl.constexpr):
        """State of weight v (0..31) of a period from its planes."""
        WI: tl.constexpr = (K * v) // 32
        SH: tl.constexpr = (K * v) % 32
        lo = _pick(WI, p0, p1, p2, p3, p4)
        if SH + L <= 32:
            s = lo >> SH
        else:
            s = (lo >> SH) | (_pick(WI + 1, p0, p1, p2, p3, p4) << (32 - SH))
        return s & ((1 << L) - 1)

    @triton.jit
    def _planes(base, wrap, K: tl.constexpr, WPB: tl.constexpr, mask):
        """The k words of each period and the next one (the block's first word
        after its last period), as uint32 tiles."""
        p0 = tl.load(base, mask=mask, other=0).to(tl.uint32, bitcast=True)
        p1 = p0
        p2 = p0
        p3 = p0
        p4 = p0
        nxt = tl.where(wrap, base + K - WPB, base + K)
        if K >= 2:
            p1 = tl.load(base + 1, mask=mask, other=0).to(tl.uint32, bitcast=True)
        if K >= 3:
            p2 = tl.load(base + 2, mask=mask, other=0).to(tl.uint32, bitcast=True)
        if K >= 4:
            p3 = tl.load(base + 3, mask=mask, other=0).to(tl.uint32, bitcast=True)
        last = tl.load(nxt, mask=mask, other=0).to(tl.uint32, bitcast=True)
        if K == 1:
            p1 = last
        elif K == 2:
            p2 = last
        elif K == 3:
            p3 = last
        else:
            p4 = last
        return p0, p1, p2, p3, p4

    @triton.jit
    def _acc(acc, v: tl.constexpr, add):
        """acc with its v-th tile increased by add (acc: a tuple of 32 tiles)."""
        return acc[:v] + (acc[v] + add,) + acc[v + 1:]

    @triton.jit
    def _x_vals(x64, col0, mask, XB: tl.constexpr):
        """The 32 inputs (bf16: XB = 2, float32: XB = 4) of each period as
        float32, a tuple: item j = x[col0 − 31 + j] (weight v meets item 31 − v).
        x64 views the row as int64: 8 (bf16) or 16 aligned loads per period."""
        PER64: tl.constexpr = 8 // XB
        base = x64.to(tl.pointer_type(tl.int64), bitcast=True) + (col0 - 31) // PER64
        vals = ()
        for q in tl.static_range(4 * XB):
            w = tl.load(base + q, mask=mask, other=0)
            lo = w.to(tl.int32)
            hi = (w >> 32).to(tl.int32)
            if XB == 2:
                vals = vals + ((lo << 16).to(tl.float32, bitcast=True),
                               (lo & -65536).to(tl.float32, bitcast=True),
                               (hi << 16).to(tl.float32, bitcast=True),
                               (hi & -65536).to(tl.float32, bitcast=True))
            else:
                vals = vals + (lo.to(tl.float32, bitcast=True), hi.to(tl.float32, bitcast=True))
        return vals

    @triton.jit
    def _row_planes(w_ptr, r0, rows, nw, gg, last, mask, RB: tl.constexpr, K: tl.constexpr,
                    WPB: tl.constexpr):
        planes = ()
        for ri in tl.static_range(RB):
            r = tl.minimum(r0 + ri, rows - 1)
            planes = planes + (_planes(w_ptr + r.to(tl.int64) * nw + K * gg, last, K, WPB,
                                       mask),)
        return planes

    @triton.jit
    def _rows_kernel(x_ptr, w_ptr, s_ptr, out_ptr, rows, nw, n_in, NG: tl.constexpr, factor,
                     M: tl.constexpr, T: tl.constexpr, K: tl.constexpr, L: tl.constexpr,
                     CODE: tl.constexpr, ASM: tl.constexpr, RB: tl.constexpr,
                     NP: tl.constexpr, PF: tl.constexpr, XV: tl.constexpr,
                     XB: tl.constexpr):
        PPB: tl.constexpr = T // 32
        WPB: tl.constexpr = T * K // 32
        r0 = tl.program_id(0) * RB
        # RB rows per program, unrolled: each x value loaded is used RB times
        zero = tl.zeros((NP,), dtype=tl.float32)
        acc = (zero,) * (4 * RB)  # [row ri, input row m] at 4·ri + m
        g = tl.arange(0, NP)
        gg = tl.where(g < NG, g, 0)
        nxt = _row_planes(w_ptr, r0, rows, nw, gg, gg % PPB == PPB - 1, g < NG, RB, K, WPB)
        for g0 in range(0, NG, NP):
            g = g0 + tl.arange(0, NP)
            gmask = g < NG
            gg = tl.where(gmask, g, 0)
            p = gg % PPB
            planes = nxt
            if PF:  # the next tile's words load while this one decodes
                g2 = g + NP
                g2 = tl.where(g2 < NG, g2, 0)
                nxt = _row_planes(w_ptr, r0, rows, nw, g2, g2 % PPB == PPB - 1, g + NP < NG,
                                  RB, K, WPB)
            else:
                planes = _row_planes(w_ptr, r0, rows, nw, gg, p == PPB - 1, gmask, RB, K, WPB)
            col0 = (gg // PPB) * T + (T - 1) - 32 * p  # column of weight v = col0 − v
            # XV: a period's 32 inputs in 8 or 16 wide loads up front; else one
            # load per weight position (fewer live registers)
            x0s = ()
            x1s = ()
            x2s = ()
            x3s = ()
            if XV:
                x0s = _x_vals(x_ptr, col0, gmask, XB)
                if M > 1:
                    x1s = _x_vals(x_ptr + n_in, col0, gmask, XB)
                if M > 2:
                    x2s = _x_vals(x_ptr + 2 * n_in, col0, gmask, XB)
                if M > 3:
                    x3s = _x_vals(x_ptr + 3 * n_in, col0, gmask, XB)
            for v in tl.static_range(32):
                c = col0 - v
                if XV:
                    x0 = x0s[31 - v]
                else:
                    x0 = tl.load(x_ptr + c, mask=gmask, other=0.0).to(tl.float32)
                x1 = x0
                x2 = x0
                x3 = x0
                if M > 1:
                    x1 = x1s[31 - v] if XV else tl.load(x_ptr + n_in + c, mask=gmask,
                                                         other=0.0).to(tl.float32)
                if M > 2:
                    x2 = x2s[31 - v] if XV else tl.load(x_ptr + 2 * n_in + c, mask=gmask,
                                                         other=0.0).to(tl.float32)
                if M > 3:
                    x3 = x3s[31 - v] if XV else tl.load(x_ptr + 3 * n_in + c, mask=gmask,
                                                         other=0.0).to(tl.float32)
                for ri in tl.static_range(RB):
                    q = planes[ri]
                    val = _raw_code(_state(v, q[0], q[1], q[2], q[3], q[4], K, L), CODE, ASM)
                    acc = _acc(acc, 4 * ri, val * x0)
                    if M > 1:
                        acc = _acc(acc, 4 * ri + 1, val * x1)
                    if M > 2:
                        acc = _acc(acc, 4 * ri + 2, val * x2)
                    if M > 3:
                        acc = _acc(acc, 4 * ri + 3, val * x3)
        for ri in tl.static_range(RB):
            r = r0 + ri
            ok = r < rows
            sc = tl.load(s_ptr + r, mask=ok, other=0.0).to(tl.float32) * factor
            for m in tl.static_range(M):
                tl.store(out_ptr + m * rows + r, tl.sum(acc[4 * ri + m], axis=0) * sc, mask=ok)

    @triton.jit
    def _cols_out(part, acc, col0, mask):
        for v in tl.static_range(32):
            tl.store(part + col0 - v, tl.sum(acc[v], axis=0), mask=mask)

    @triton.jit
    def _cols_load(x_ptr, w_ptr, s_ptr, i, rows, nw, gg, last, gmask, factor, M: tl.constexpr,
                   K: tl.constexpr, WPB: tl.constexpr):
        """Planes of input rows i and their inputs times the row scales."""
        imask = i < rows
        ii = tl.where(imask, i, 0)
        p0, p1, p2, p3, p4 = _planes(w_ptr + ii.to(tl.int64) * nw + K * gg, last, K, WPB,
                                     imask & gmask)
        sc = tl.load(s_ptr + ii, mask=imask, other=0.0).to(tl.float32) * factor
        xs0 = tl.load(x_ptr + ii, mask=imask, other=0.0).to(tl.float32) * sc
        xs1 = xs0
        xs2 = xs0
        xs3 = xs0
        if M > 1:
            xs1 = tl.load(x_ptr + rows + ii, mask=imask, other=0.0).to(tl.float32) * sc
        if M > 2:
            xs2 = tl.load(x_ptr + 2 * rows + ii, mask=imask, other=0.0).to(tl.float32) * sc
        if M > 3:
            xs3 = tl.load(x_ptr + 3 * rows + ii, mask=imask, other=0.0).to(tl.float32) * sc
        return p0, p1, p2, p3, p4, xs0, xs1, xs2, xs3

    @triton.jit
    def _cols_kernel(x_ptr, w_ptr, s_ptr, part_ptr, rows, nw, NG, n_out, factor,
                     PER: tl.constexpr, M: tl.constexpr, T: tl.constexpr, K: tl.constexpr,
                     L: tl.constexpr, CODE: tl.constexpr, ASM: tl.constexpr,
                     BI: tl.constexpr, NP: tl.constexpr, PF: tl.constexpr):
        PPB: tl.constexpr = T // 32
        WPB: tl.constexpr = T * K // 32
        pg = tl.program_id(0)
        ps = tl.program_id(1)
        g = pg * NP + tl.arange(0, NP)[None, :]
        gmask = g < NG
        gg = tl.where(gmask, g, 0)
        p = gg % PPB
        col0 = tl.reshape((gg // PPB) * T + (T - 1) - 32 * p, (NP,))
        gm1 = tl.reshape(gmask, (NP,))
        # one accumulator tile per weight of a period (and input row): the
        # reduction over the input rows happens once, after the loop
        zero = tl.zeros((BI, NP), dtype=tl.float32)
        a0 = (zero,) * 32
        a1 = a0
        a2 = a0
        a3 = a0
        i0 = ps * PER + tl.arange(0, BI)[:, None]
        nxt = _cols_load(x_ptr, w_ptr, s_ptr, i0, rows, nw, gg, p == PPB - 1, gmask, factor,
                         M, K, WPB)
        for j in range(0, PER, BI):
            cur = nxt
            if PF:  # the next rows' words load while these decode
                nxt = _cols_load(x_ptr, w_ptr, s_ptr, i0 + j + BI, rows, nw, gg, p == PPB - 1,
                                 gmask, factor, M, K, WPB)
            else:
                cur = _cols_load(x_ptr, w_ptr, s_ptr, i0 + j, rows, nw, gg, p == PPB - 1,
                                 gmask, factor, M, K, WPB)
            p0, p1, p2, p3, p4, xs0, xs1, xs2, xs3 = cur
            for v in tl.static_range(32):
                val = _raw_code(_state(v, p0, p1, p2, p3, p4, K, L), CODE, ASM)
                a0 = _acc(a0, v, val * xs0)
                if M > 1:
                    a1 = _acc(a1, v, val * xs1)
                if M > 2:
                    a2 = _acc(a2, v, val * xs2)
                if M > 3:
                    a3 = _acc(a3, v, val * xs3)
        part = part_ptr + ps * M * n_out
        _cols_out(part, a0, col0, gm1)
        if M > 1:
            _cols_out(part + n_out, a1, col0, gm1)
        if M > 2:
            _cols_out(part + 2 * n_out, a2, col0, gm1)
        if M > 3:
            _cols_out(part + 3 * n_out, a3, col0, gm1)


MAX_M = 4
LAST: dict = {}  # the last launched compiled kernel (benchmarks read its SASS)
# block shapes (bench/trellis_matvec.py sweeps them on the H200). M = 1: 4 rows
# per one-warp program, wide x loads, prefetch (the sweep's best on both
# shapes); M > 1: 8 rows, per-weight x loads, no prefetch (registers), the
# tile as wide as divides the period count
ROWS_CFG_M1 = {"RB": 4, "NP": 32, "num_warps": 1, "XV": True, "PF": True}
ROWS_CFG = {"RB": 8, "XV": False, "PF": False}
COLS_CFG = {"BI": 4, "NP": 32, "num_warps": 4}
TARGET_PROGRAMS = 528  # cols programs: ≈ 4 per SM of an H200


def rows_cfg(ng: int, m: int = 1, cfg: dict | None = None) -> dict:
    if m == 1:
        return {**ROWS_CFG_M1, **(cfg or {})}
    np_ = 64 if ng % 64 == 0 else 32
    return {**ROWS_CFG, "NP": np_, "num_warps": np_ // 32, **(cfg or {})}


def cols_cfg(rows: int, ng: int, m: int = 1, cfg: dict | None = None) -> dict:
    """Enough input-row splits that the grid fills the GPU."""
    c = {**COLS_CFG, "PF": m == 1, **(cfg or {})}
    if "splits" not in c:
        col_programs = -(-ng // c["NP"])
        c["splits"] = max(1, min(-(-rows // c["BI"]), -(-TARGET_PROGRAMS // col_programs)))
    return c


def _asm() -> bool:
    """Inline PTX unless Triton's interpreter runs the kernels."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("1", "true", "True")


def fast_ok(T: int, k: int, L: int) -> bool:
    """Shapes the period kernels handle (others use the generic path)."""
    return triton is not None and T % 32 == 0 and 1 <= k <= 4 and L <= 32


def matvec(x: torch.Tensor, words: torch.Tensor, scales: torch.Tensor, *, code: str, k: int,
           T: int, L: int, axis: int, out_features: int, in_features: int,
           cfg: dict | None = None) -> torch.Tensor:
    """x [M ≤ 4, in] (any float dtype) -> float32 [M, out]; words int32 [rows, nw]
    (plain layout), scales fp16 [rows]."""
    M = x.shape[0]
    x = x.contiguous()
    rows, nw = words.shape
    ng = (nw // k)  # periods per stored row
    cid, factor = CODE_IDS[code], CODE_FACTOR[code]
    if axis == 1:
        c = rows_cfg(ng, M, cfg)
        if x.dtype not in (torch.bfloat16, torch.float32):
            x = x.float()
        out = torch.empty(M, out_features, device=x.device, dtype=torch.float32)
        LAST["kernel"] = _rows_kernel[(triton.cdiv(rows, c["RB"]),)](
            x, words, scales, out, rows, nw, in_features, ng, factor, M=M, T=T, K=k, L=L,
            CODE=cid, ASM=_asm(), RB=c["RB"], NP=c["NP"], PF=c["PF"], XV=c["XV"],
            XB=x.element_size(), num_warps=c["num_warps"])
        return out
    c = cols_cfg(rows, ng, M, cfg)
    splits = max(1, min(c["splits"], triton.cdiv(rows, c["BI"])))
    per = triton.cdiv(triton.cdiv(rows, splits), c["BI"]) * c["BI"]
    splits = triton.cdiv(rows, per)
    part = torch.empty(splits, M, out_features, device=x.device, dtype=torch.float32)
    LAST["kernel"] = _cols_kernel[(triton.cdiv(ng, c["NP"]), splits)](
        x, words, scales, part, rows, nw, ng, out_features, factor, PER=per, M=M, T=T, K=k,
        L=L, CODE=cid, ASM=_asm(), BI=c["BI"], NP=c["NP"], PF=c["PF"],
        num_warps=c["num_warps"])
    return part[0] if splits == 1 else part.sum(0)
