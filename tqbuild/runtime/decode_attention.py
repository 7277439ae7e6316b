"""One-token attention of grouped-query models as split-KV flash decoding (Triton: CUDA,
or the interpreter on CPU tensors).

tq_sdpa (runtime/gqa_attention.py) gives one query token's attention on the key/value
heads: q [B, Hkv, G, D] (a kv head's G query heads as rows), k [B, Hkv, S, D],
v [B, Hkv, S, Dv]. Here a program takes one (batch, kv head) and one split of the S
positions: its G rows' scores by one tensor-core product a tile of BS positions (rows
padded to 16), an online softmax in float32 (base 2), p rounded to v's dtype for the
second product as flash attention does. With one split the program writes the output;
with several each writes its unnormalised sums and running max, and a second kernel
adds the splits in split order (deterministic). The splits fill the GPU about twice
(B·Hkv programs alone use 8 of 132 SMs at B = 1 on Llama-3-8B). Positions that every
row of a tile masks out (a static cache's unused slots) are never loaded.
The mask is sdpa's: None, boolean (True attends) or additive, broadcast to
[B, Hkv, G, S]. Launched with programmatic dependent launch where inductor's kernels
are (it waits for its inputs first). On by default in tq_sdpa (+5 % decode of the
8B-shaped Q3 model on an H100, session 25); TQBUILD_DECODE_ATTN=0 keeps cuDNN's sdpa."""

from __future__ import annotations

import os

import torch

from ..environment import env_int
from . import gpu_info

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - CPU-only installs
    triton = None

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
LOG2E = 1.4426950408889634  # scores in base 2


def enabled() -> bool:
    return os.environ.get("TQBUILD_DECODE_ATTN", "1") != "0"


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") in ("1", "true", "True")


def _pow2(n: int) -> bool:
    return n >= 16 and n & (n - 1) == 0


def serves(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           mask: torch.Tensor | None) -> bool:
    """The kernel takes q [B, Hkv, G, D], k [B, Hkv, S, D], v [B, Hkv, S, Dv]: Triton on
    their device (CUDA, or the interpreter), one float dtype, D and Dv powers of two
    16–256, G ≤ 64, a mask that broadcasts to [B, Hkv, G, S]."""
    if triton is None or not (q.is_cuda or _interpreting()) or q.dim() != 4:
        return False
    B, H, G, D = q.shape
    if k.shape[:2] != (B, H) or v.shape[:3] != k.shape[:3] or k.shape[-1] != D:
        return False
    if q.dtype not in DTYPES or k.dtype != q.dtype or v.dtype != q.dtype or G > 64:
        return False
    if not (_pow2(D) and _pow2(v.shape[-1]) and max(D, v.shape[-1]) <= 256):
        return False
    if mask is not None:
        try:
            fits = torch.broadcast_shapes(mask.shape, (B, H, G, k.shape[2])) == (B, H, G,
                                                                                  k.shape[2])
        except RuntimeError:
            return False
        return fits and mask.dim() == 4 and (mask.dtype == torch.bool or
                                             mask.dtype.is_floating_point)
    return True


def plan(S: int, programs: int, sms: int, bs: int, splits: int = 0) -> tuple[int, int]:
    """(positions a split, splits) for S ≥ 1 positions: `splits` asked, else about two
    programs an SM; whole tiles of bs positions a split, at least one tile."""
    tiles = -(-S // bs)
    splits = max(1, min(tiles, splits or -(-2 * sms // max(1, programs))))
    per = -(-tiles // splits) * bs
    return per, -(-S // per)


if triton is not None:
    _LOG2E = tl.constexpr(LOG2E)  # the kernels read globals only as constexpr

    @triton.jit
    def _mm(a, b, DOT: tl.constexpr):
        """a @ b in float32: 0 the tensor cores at the inputs' dtype; 1 float32 inputs,
        IEEE; 2 inputs widened to float32 first (the interpreter's bfloat16 dot is wrong)."""
        if DOT == 0:
            return tl.dot(a, b)
        elif DOT == 1:
            return tl.dot(a, b, input_precision="ieee")
        else:
            return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")

    @triton.jit
    def _attend(q, k, v, m, out, po, pm, pl, S, H, scale2,
                sqb, sqh, sqg, skb, skh, sks, svb, svh, svs, smb, smh, smg, sms,
                PER: tl.constexpr, G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr,
                DV: tl.constexpr, BS: tl.constexpr, MASK: tl.constexpr, ONE: tl.constexpr,
                DOT: tl.constexpr, PDL: tl.constexpr):
        """Program (b·H + h, split): rows [GP] of kv head h over positions of the split."""
        bh = tl.program_id(0)
        sp = tl.program_id(1)
        b = bh // H
        h = bh % H
        if PDL:
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()
        rows = tl.arange(0, GP)
        dq = tl.arange(0, D)
        dv = tl.arange(0, DV)
        live = rows < G
        qv = tl.load(q + b * sqb + h * sqh + rows[:, None] * sqg + dq[None, :],
                     mask=live[:, None], other=0.0)
        m_i = tl.full([GP], -1e30, tl.float32)
        l_i = tl.zeros([GP], tl.float32)
        acc = tl.zeros([GP, DV], tl.float32)
        start = sp * PER  # PER: whole tiles (constexpr: the interpreter loops only to one)
        for t in range(0, PER, BS):
            pos = start + t + tl.arange(0, BS)
            inside = pos < S
            held = live[:, None] & inside[None, :]  # real rows, positions of the cache
            mp = m + b * smb + h * smh + rows[:, None] * smg + pos[None, :] * sms
            if MASK == 1:  # boolean: True attends
                keep = (tl.load(mp, mask=held, other=0) != 0) & held
            elif MASK == 2:  # additive; transformers' dtype minimum (≤ -1e30) drops
                mk = tl.load(mp, mask=held, other=-1e30).to(tl.float32)
                keep = (mk > -1e30) & held
            else:
                keep = held
            col = (tl.max(keep.to(tl.int32), axis=0) > 0) & inside  # some row attends
            kt = tl.load(k + b * skb + h * skh + pos[None, :] * sks + dq[:, None],
                         mask=col[None, :], other=0.0)
            sc = _mm(qv, kt, DOT) * scale2
            if MASK == 2:
                sc = sc + mk * _LOG2E
            sc = tl.where(keep & col[None, :], sc, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(sc, axis=1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(sc - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            vt = tl.load(v + b * svb + h * svh + pos[:, None] * svs + dv[None, :],
                         mask=col[:, None], other=0.0)
            acc = acc * alpha[:, None] + _mm(p.to(vt.dtype), vt, DOT)
            m_i = m_new
        if ONE:
            o = acc / tl.where(live, l_i, 1.0)[:, None]  # padding rows: no 0 / 0
            tl.store(out + (bh * G + rows[:, None]) * DV + dv[None, :],
                     o.to(out.dtype.element_ty), mask=live[:, None])
        else:
            nsp = tl.num_programs(1)
            base = (bh * nsp + sp) * GP
            tl.store(po + (base + rows[:, None]) * DV + dv[None, :], acc)
            tl.store(pm + base + rows, m_i)
            tl.store(pl + base + rows, l_i)

    @triton.jit
    def _combine(out, po, pm, pl, SPLITS: tl.constexpr, G: tl.constexpr, GP: tl.constexpr,
                 DV: tl.constexpr, PDL: tl.constexpr):
        """Program b·H + h: its splits' sums added in split order, then normalised."""
        bh = tl.program_id(0)
        if PDL:
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()
        rows = tl.arange(0, GP)
        dv = tl.arange(0, DV)
        m_i = tl.full([GP], -1e30, tl.float32)
        l_i = tl.zeros([GP], tl.float32)
        acc = tl.zeros([GP, DV], tl.float32)
        for s in range(0, SPLITS):
            base = (bh * SPLITS + s) * GP
            ms = tl.load(pm + base + rows)
            m_new = tl.maximum(m_i, ms)
            alpha = tl.exp2(m_i - m_new)
            beta = tl.exp2(ms - m_new)
            l_i = l_i * alpha + tl.load(pl + base + rows) * beta
            acc = acc * alpha[:, None] + \
                tl.load(po + (base + rows[:, None]) * DV + dv[None, :]) * beta[:, None]
            m_i = m_new
        live = rows < G
        tl.store(out + (bh * G + rows[:, None]) * DV + dv[None, :],
                 (acc / tl.where(live, l_i, 1.0)[:, None]).to(out.dtype.element_ty),
                 mask=live[:, None])


def _dot_mode(q: torch.Tensor) -> int:
    if q.dtype == torch.float32:
        return 1
    return 2 if _interpreting() and not q.is_cuda else 0


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
              scale: float, splits: int = 0) -> torch.Tensor:
    """softmax(q kᵀ·scale + mask) v per (batch, kv head) -> [B, Hkv, G, Dv] in q's dtype
    (`serves` must hold; splits 0: TQBUILD_DECODE_ATTN_SPLITS, else `plan`'s)."""
    B, H, G, D = q.shape
    S, DV = k.shape[2], v.shape[-1]
    q = q if q.stride(-1) == 1 else q.contiguous()
    k = k if k.stride(-1) == 1 else k.contiguous()
    v = v if v.stride(-1) == 1 else v.contiguous()
    GP = max(16, triton.next_power_of_2(G))
    bs = 64 if max(D, DV) <= 128 else 32
    sms = gpu_info.sm_count(q.device) if q.is_cuda else 8
    out = torch.empty(B, H, G, DV, device=q.device, dtype=q.dtype)
    if S == 0:
        return out.zero_()
    per, n = plan(S, B * H, sms, bs, splits or env_int("TQBUILD_DECODE_ATTN_SPLITS", 0))
    kind, mt = 0, q
    mstr: tuple[int, ...] = (0, 0, 0, 0)
    if mask is not None:
        mt = mask.expand(B, H, G, S)
        kind, mstr = (1 if mask.dtype == torch.bool else 2), mt.stride()
    pdl = q.is_cuda and gpu_info.inductor_pdl() and gpu_info.has_pdl(q.device)
    po = pm = pl = out
    if n > 1:
        po = torch.empty(B * H * n * GP * DV, device=q.device, dtype=torch.float32)
        pm = torch.empty(B * H * n * GP, device=q.device, dtype=torch.float32)
        pl = torch.empty_like(pm)
    launch = {"launch_pdl": True} if pdl else {}
    _attend[(B * H, n)](q, k, v, mt, out, po, pm, pl, S, H, scale * LOG2E,
                        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *mstr,
                        PER=per, G=G, GP=GP, D=D, DV=DV, BS=bs, MASK=kind, ONE=n == 1,
                        DOT=_dot_mode(q), PDL=pdl, num_warps=4, **launch)
    if n > 1:
        _combine[(B * H,)](out, po, pm, pl, SPLITS=n, G=G, GP=GP, DV=DV, PDL=pdl, num_warps=4,
                           **launch)
    return out


@torch.library.custom_op("tqbuild::gqa_decode_attention", mutates_args=())
def _decode_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    return attention(q, k, v, mask, scale)


@_decode_attention_op.register_fake
def _(q, k, v, mask, scale):
    return q.new_empty(*q.shape[:3], v.shape[-1])


def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    """`attention` as one custom op (opaque to torch.compile, capturable in a graph)."""
    return _decode_attention_op(q, k, v, mask, float(scale))
