"""Triton decode-matvec kernels for packed trellis weights (CUDA).

A row's block of T weights is T/32 periods of 32 weights in k words. With
j = T−1−t (the stored reverse order, DESIGN §5), weight j of a block sits at
bit k·j: period p = j // 32 holds words k·p .. k·p+k−1 and weight v = j % 32 of
it starts at bit k·v of that run. So one program loads, per period, the k
words and the next one (wrapping at the block's end) as k+1 coalesced tiles —
"planes" — and decodes its 32 weights with compile-time shifts: no per-weight
index math, no per-weight memory access. The code value is computed from the
state in registers (1MAD: multiply-add and a byte sum; 3INST: multiply-add,
mask, two fp16 halves added) instead of gathered from a table; its constant
factor (1/147.8 or 1/RMS) is applied once per output, with the row scale.

`rows` (axis 1, coded along the input dim): a program owns BR output rows
and walks the input periods. `cols` (axis 0, coded along the output dim,
stored transposed): a program owns NP output periods and a split of the input
rows, adds its 32·NP partial sums into its own slice of a buffer, and the
splits are summed afterwards in a fixed order (deterministic, no atomics).
Every input row (M ≤ 4) reuses each decoded weight.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - CPU-only installs
    triton = None

CODE_IDS = {"1mad": 0, "3inst": 1}
# the code's constant factor, applied after the sum (1MAD: 1/147.80…; 3INST: 1/RMS)
CODE_FACTOR = {"1mad": 1.0 / 147.800537109375, "3inst": 1.0 / 1.24371088}


if triton is not None:

    @triton.jit
    def _raw_code(s, CODE: tl.constexpr):
        """The code value of states s (uint32) before its constant factor."""
        if CODE == 0:  # 1MAD: bytes of s·34038481 + 76625530 summed, minus 510
            x = s * 34038481 + 76625530
            t = (x & 0x00FF00FF) + ((x >> 8) & 0x00FF00FF)
            total = (t & 0xFFFF) + (t >> 16)
            # int -> float without I2F: 2^23 + total has total in its mantissa
            return (total | 0x4B000000).to(tl.float32, bitcast=True) - 8389118.0
        else:  # 3INST
            x = s * 89226354 + 64248484
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
    def _rows_kernel(x_ptr, w_ptr, s_ptr, out_ptr, rows, nw, n_in, NG: tl.constexpr, factor,
                     M: tl.constexpr, T: tl.constexpr, K: tl.constexpr, L: tl.constexpr,
                     CODE: tl.constexpr, BR: tl.constexpr, NP: tl.constexpr):
        PPB: tl.constexpr = T // 32
        WPB: tl.constexpr = T * K // 32
        pid = tl.program_id(0)
        r = pid * BR + tl.arange(0, BR)[:, None]
        rmask = r < rows
        rr = tl.where(rmask, r, 0)
        acc0 = tl.zeros((BR, NP), dtype=tl.float32)
        acc1 = acc0
        acc2 = acc0
        acc3 = acc0
        for g0 in range(0, NG, NP):
            g = g0 + tl.arange(0, NP)[None, :]
            gmask = g < NG
            gg = tl.where(gmask, g, 0)
            p = gg % PPB
            base = w_ptr + rr.to(tl.int64) * nw + K * gg
            p0, p1, p2, p3, p4 = _planes(base, p == PPB - 1, K, WPB, rmask & gmask)
            col0 = (gg // PPB) * T + (T - 1) - 32 * p  # column of weight v = col0 − v
            for v in tl.static_range(32):
                val = _raw_code(_state(v, p0, p1, p2, p3, p4, K, L), CODE)
                c = col0 - v
                acc0 += val * tl.load(x_ptr + c, mask=gmask, other=0.0).to(tl.float32)
                if M > 1:
                    acc1 += val * tl.load(x_ptr + n_in + c, mask=gmask,
                                          other=0.0).to(tl.float32)
                if M > 2:
                    acc2 += val * tl.load(x_ptr + 2 * n_in + c, mask=gmask,
                                          other=0.0).to(tl.float32)
                if M > 3:
                    acc3 += val * tl.load(x_ptr + 3 * n_in + c, mask=gmask,
                                          other=0.0).to(tl.float32)
        r1 = tl.reshape(rr, (BR,))
        om = tl.reshape(rmask, (BR,))
        sc = tl.load(s_ptr + r1).to(tl.float32) * factor
        tl.store(out_ptr + r1, tl.sum(acc0, axis=1) * sc, mask=om)
        if M > 1:
            tl.store(out_ptr + rows + r1, tl.sum(acc1, axis=1) * sc, mask=om)
        if M > 2:
            tl.store(out_ptr + 2 * rows + r1, tl.sum(acc2, axis=1) * sc, mask=om)
        if M > 3:
            tl.store(out_ptr + 3 * rows + r1, tl.sum(acc3, axis=1) * sc, mask=om)

    @triton.jit
    def _add_out(ptr, c, contrib, mask):
        tl.store(ptr + c, tl.load(ptr + c, mask=mask, other=0.0) + contrib, mask=mask)

    @triton.jit
    def _cols_kernel(x_ptr, w_ptr, s_ptr, part_ptr, rows, nw, NG, n_out, PER: tl.constexpr,
                     M: tl.constexpr, T: tl.constexpr, K: tl.constexpr, L: tl.constexpr,
                     CODE: tl.constexpr, BI: tl.constexpr, NP: tl.constexpr):
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
        part = part_ptr + ps * M * n_out
        for j in range(0, PER, BI):
            i = ps * PER + j + tl.arange(0, BI)[:, None]
            imask = i < rows
            ii = tl.where(imask, i, 0)
            base = w_ptr + ii.to(tl.int64) * nw + K * gg
            p0, p1, p2, p3, p4 = _planes(base, p == PPB - 1, K, WPB, imask & gmask)
            sc = tl.load(s_ptr + ii, mask=imask, other=0.0).to(tl.float32)
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
            for v in tl.static_range(32):
                val = _raw_code(_state(v, p0, p1, p2, p3, p4, K, L), CODE)
                c = col0 - v
                _add_out(part, c, tl.sum(val * xs0, axis=0), gm1)
                if M > 1:
                    _add_out(part + n_out, c, tl.sum(val * xs1, axis=0), gm1)
                if M > 2:
                    _add_out(part + 2 * n_out, c, tl.sum(val * xs2, axis=0), gm1)
                if M > 3:
                    _add_out(part + 3 * n_out, c, tl.sum(val * xs3, axis=0), gm1)


MAX_M = 4
LAST: dict = {}  # the last launched compiled kernel (benchmarks read its SASS)
ROWS_CFG = {"BR": 16, "NP": 32, "num_warps": 4}
COLS_CFG = {"BI": 32, "NP": 32, "num_warps": 4, "splits": 16}


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
        c = dict(ROWS_CFG, **(cfg or {}))
        out = torch.empty(M, out_features, device=x.device, dtype=torch.float32)
        LAST["kernel"] = _rows_kernel[(triton.cdiv(rows, c["BR"]),)](
            x, words, scales, out, rows, nw, in_features, ng, factor, M=M, T=T, K=k, L=L,
            CODE=cid, BR=c["BR"], NP=c["NP"], num_warps=c["num_warps"])
        return out
    c = dict(COLS_CFG, **(cfg or {}))
    splits = max(1, min(c["splits"], triton.cdiv(rows, c["BI"])))
    per = triton.cdiv(triton.cdiv(rows, splits), c["BI"]) * c["BI"]
    splits = triton.cdiv(rows, per)
    part = torch.zeros(splits, M, out_features, device=x.device, dtype=torch.float32)
    LAST["kernel"] = _cols_kernel[(triton.cdiv(ng, c["NP"]), splits)](
        x, words, scales, part, rows, nw, ng, out_features, PER=per, M=M, T=T, K=k, L=L,
        CODE=cid, BI=c["BI"], NP=c["NP"], num_warps=c["num_warps"])
    return part.sum(0) * factor
