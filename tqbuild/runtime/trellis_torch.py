"""Trellis modules in PyTorch: a reference decode in torch ops (CPU and any
device) and Triton decode-matvec kernels on CUDA.

Every path computes a weight as f32(code(state)) · f32(scale), the state read
in O(1) from two packed words (DESIGN §5). Kernels, by the number of input
rows M: M ≤ 4 and T a multiple of 32 (every recipe's geometry): the period
kernels of runtime/trellis_triton.py; otherwise these generic ones —
  M ≤ 4, axis 1 (coded along the input dim): `reduce` — a program owns a
      block of output rows and walks the input dim, decoding each weight once
      for all M rows;
  M ≤ 4, axis 0 (coded along the output dim, stored transposed): `scatter` —
      a program owns a block of outputs and one split of the inputs, the splits'
      partial sums added afterwards in a fixed order (deterministic);
  larger M: the whole weight is expanded to the activation dtype once per call
      and multiplied by cuBLAS.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - CPU-only installs
    triton = None

from ..formats.trellis import TrellisEntry
from ..kernels.trellis_codes import PAIR_CODES
from ..kernels.viterbi import lookup, value_table
from . import act_int8, pair_cuda, trellis_cuda, trellis_triton

SMALL_M = trellis_triton.MAX_M


def _windows(words: torch.Tensor, k: int, T: int, L: int) -> torch.Tensor:
    """int64 states [rows, cols] from packed words [rows, cols·k/32] (torch ops)."""
    rows, nw = words.shape
    wpb = T * k // 32
    nb = nw // wpb
    w = (words.view(torch.int32).long() & 0xFFFFFFFF).reshape(rows, nb, wpb)
    off = (T - 1 - torch.arange(T, device=words.device)) * k
    i0 = off // 32
    i1 = (i0 + 1) % wpb
    pair = w[..., i0] | (w[..., i1] << 32)
    return ((pair >> (off % 32)) & ((1 << L) - 1)).reshape(rows, nb * T)


def decode_torch(words: torch.Tensor, scales: torch.Tensor, table: torch.Tensor, *, k: int,
                 T: int, L: int, axis: int, interleave: bool) -> torch.Tensor:
    """float32 [out, in]."""
    if interleave:
        g, rows, pair = words.shape
        words = words.permute(1, 0, 2).reshape(rows, g * pair)
    w = lookup(table, _windows(words, k, T, L)) * scales.float()[:, None]
    return w if axis == 1 else w.t()


if triton is not None:
    @triton.jit
    def _state(w_ptr, row, col, nw, T: tl.constexpr, K: tl.constexpr, L: tl.constexpr):
        """States of stored positions (row, col) — row [R,1], col [1,C] tensors."""
        WPB: tl.constexpr = T * K // 32
        b = col // T
        t = col % T
        off = (T - 1 - t) * K
        i0 = off // 32
        i1 = (i0 + 1) % WPB
        base = w_ptr + row * nw + b * WPB
        lo = tl.load(base + i0).to(tl.uint32, bitcast=True)
        hi = tl.load(base + i1).to(tl.uint32, bitcast=True)
        sh = (off % 32).to(tl.uint32)
        s = (lo >> sh) | ((hi << (31 - sh)) << 1)
        return (s & ((1 << L) - 1)).to(tl.int32)

    @triton.jit
    def _reduce_kernel(x_ptr, w_ptr, s_ptr, tab_ptr, out_ptr, rows, cols: tl.constexpr, nw,
                       M: tl.constexpr, T: tl.constexpr, K: tl.constexpr, L: tl.constexpr,
                       BR: tl.constexpr, BC: tl.constexpr):
        pid = tl.program_id(0)
        r = pid * BR + tl.arange(0, BR)[:, None]
        rmask = r < rows
        rr = tl.where(rmask, r, 0)
        for m in tl.static_range(M):
            acc = tl.zeros((BR,), dtype=tl.float32)
            for c0 in range(0, cols, BC):
                c = c0 + tl.arange(0, BC)[None, :]
                st = _state(w_ptr, rr, c, nw, T, K, L)
                val = tl.load(tab_ptr + st)
                xv = tl.load(x_ptr + m * cols + c).to(tl.float32)
                acc += tl.sum(val * xv, axis=1)
            sc = tl.load(s_ptr + tl.reshape(rr, (BR,))).to(tl.float32)
            tl.store(out_ptr + m * rows + tl.reshape(r, (BR,)), acc * sc,
                     mask=tl.reshape(rmask, (BR,)))

    @triton.jit
    def _scatter_kernel(x_ptr, w_ptr, s_ptr, tab_ptr, part_ptr, n_in, n_out, nw,
                        PER_SPLIT: tl.constexpr, M: tl.constexpr, T: tl.constexpr,
                        K: tl.constexpr, L: tl.constexpr, BO: tl.constexpr, BI: tl.constexpr):
        po = tl.program_id(0)
        ps = tl.program_id(1)
        o = po * BO + tl.arange(0, BO)[None, :]
        omask = o < n_out
        oo = tl.where(omask, o, 0)
        start = ps * PER_SPLIT
        for m in tl.static_range(M):
            acc = tl.zeros((BO,), dtype=tl.float32)
            for j in range(0, PER_SPLIT, BI):
                i = start + j + tl.arange(0, BI)[:, None]
                imask = i < n_in
                ii = tl.where(imask, i, 0)
                st = _state(w_ptr, ii, oo, nw, T, K, L)
                val = tl.load(tab_ptr + st)
                xs = tl.load(x_ptr + m * n_in + ii, mask=imask, other=0.0).to(tl.float32) * \
                    tl.load(s_ptr + ii, mask=imask, other=0.0).to(tl.float32)
                acc += tl.sum(val * xs, axis=0)
            tl.store(part_ptr + (ps * M + m) * n_out + tl.reshape(o, (BO,)), acc,
                     mask=tl.reshape(omask, (BO,)))


def matvec_triton(x: torch.Tensor, words: torch.Tensor, scales: torch.Tensor,
                  table: torch.Tensor, *, k: int, T: int, L: int, axis: int,
                  out_features: int, in_features: int) -> torch.Tensor:
    """x [M ≤ 4, in] -> float32 [M, out] (non-interleaved words)."""
    M = x.shape[0]
    x = x.contiguous()
    rows, nw = words.shape
    if axis == 1:
        out = torch.empty(M, out_features, device=x.device, dtype=torch.float32)
        BR, BC = 16, 128 if in_features % 128 == 0 else T
        _reduce_kernel[(triton.cdiv(rows, BR),)](x, words, scales, table, out, rows,
                                                 in_features, nw, M=M, T=T, K=k, L=L,
                                                 BR=BR, BC=BC)
        return out
    splits = 16 if in_features >= 2048 else 1
    per_split = triton.cdiv(triton.cdiv(in_features, splits), 32) * 32
    splits = triton.cdiv(in_features, per_split)
    part = torch.empty(splits, M, out_features, device=x.device, dtype=torch.float32)
    BO, BI = 64, 32
    _scatter_kernel[(triton.cdiv(out_features, BO), splits)](
        x, words, scales, table, part, in_features, out_features, nw, PER_SPLIT=per_split,
        M=M, T=T, K=k, L=L, BO=BO, BI=BI)
    return part.sum(0)


class TrellisLinear(nn.Module):
    """A packed trellis linear for transformers models."""

    words: torch.Tensor  # buffers
    scales: torch.Tensor
    table: torch.Tensor

    def __init__(self, words: torch.Tensor, scales: torch.Tensor, entry: dict,
                 bias: torch.Tensor | None = None):
        super().__init__()

        te = TrellisEntry.from_config(entry)
        self.k, self.T, self.L, self.code, self.axis = te.k, te.T, te.L, te.code, te.axis
        words = te.plain_words(words).contiguous()  # the kernels read the plain layout
        self.register_buffer("words", words.view(torch.int32))
        self.register_buffer("scales", scales)
        self.register_buffer("table", value_table(te.code, self.L, "cpu"))
        self.bias = nn.Parameter(bias) if bias is not None else None
        rows, nw = words.shape
        cols = nw * 32 // self.k
        self.out_features, self.in_features = (rows, cols) if self.axis == 1 else (cols, rows)

    def weight_f32(self) -> torch.Tensor:
        return decode_torch(self.words, self.scales, self.table, k=self.k, T=self.T, L=self.L,
                            axis=self.axis, interleave=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, x.shape[-1])
        args = (x2, self.words, self.scales, self.table, self.k, self.T, self.L, self.axis,
                self.code, self.out_features, self.in_features)
        # under torch.compile one opaque op (no graph break at the ctypes/Triton
        # calls); eager calls skip the custom-op dispatch (µs a module a token)
        y = torch.ops.tqbuild.trellis_matmul(*args) if torch.compiler.is_compiling() \
            else trellis_matmul_impl(*args)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features)


def int8_emulated(x2, words, scales, table, *, k: int, T: int, L: int, axis: int
                  ) -> torch.Tensor:
    """What the int8 kernels compute, in float32 torch ops (any device): the
    activations each weight meets, quantized in groups of 32."""
    if axis == 1:
        return act_int8.fake_quantize(x2) @ decode_torch(words, scales, table, k=k, T=T, L=L,
                                                         axis=1, interleave=False).t()
    vals = decode_torch(words, torch.ones_like(scales), table, k=k, T=T, L=L, axis=0,
                        interleave=False)
    return act_int8.fake_quantize(x2.float() * scales.float()) @ vals.t()


def trellis_matmul_impl(x2: torch.Tensor, words: torch.Tensor, scales: torch.Tensor,
                        table: torch.Tensor, k: int, T: int, L: int, axis: int, code: str,
                        out_features: int, in_features: int) -> torch.Tensor:
    """x2 [M, in] -> [M, out] in x2's dtype: int8-activation CUDA kernels (M ≤ 8),
    else the float Triton kernels (M ≤ 4), else the expanded weight (cuBLAS / CPU)."""
    dims: dict[str, Any] = {"k": k, "T": T, "L": L, "axis": axis, "out_features": out_features,
                            "in_features": in_features}
    coded = in_features if axis == 1 else out_features
    M = x2.shape[0]
    if code in PAIR_CODES:  # its CUDA kernels where they serve, else the expanded weight
        if pair_cuda.available(x2, code, k, L, T, axis, out_features, in_features):
            return pair_cuda.matvec(x2, words, scales, out_dtype=x2.dtype, **dims)
        return (x2 @ decode_torch(words, scales, table, k=k, T=T, L=L, axis=axis,
                                  interleave=False).to(x2.dtype).t()).to(x2.dtype)
    on_triton = x2.is_cuda and triton is not None
    small = on_triton and M <= SMALL_M
    fast_geometry = on_triton and trellis_triton.fast_ok(T, k, L)
    fast = small and fast_geometry
    # axis 0 from M = 3 on: the tensor-core cols kernel where it serves that M (H200,
    # 5120 × 17408 k = 3, M = 4: 52 µs), else the float kernel, SMALL_M rows a call
    # (100 µs; the dp4a cols kernel 127 µs, M = 8 509 µs; trellis_gemv-cuda-colstc.json)
    int8 = trellis_cuda.available(x2, code, k, L, T, coded, in_features, axis)
    cols_tc = axis == 0 and int8 and trellis_cuda.cols_tc_serves(M, k=k, L=L)
    if axis == 0 and SMALL_M < M <= trellis_cuda.MAX_M and fast_geometry and not cols_tc:
        return torch.cat([trellis_matmul_impl(x2[a:a + SMALL_M], words, scales, table, k, T,
                                              L, axis, code, out_features, in_features)
                          for a in range(0, M, SMALL_M)])
    cols_float = fast and axis == 0 and M >= 3 and not cols_tc
    if not cols_float and int8:  # the kernel writes x's dtype itself (no extra cast)
        y = trellis_cuda.matvec(x2, words, scales, code=code, out_dtype=trellis_cuda.out_dtype(x2),
                                **dims)
    elif fast:
        y = trellis_triton.matvec(x2, words, scales, code=code, **dims)
    elif small:
        y = matvec_triton(x2, words, scales, table, **dims)
    elif trellis_cuda.mode() == "int8" and act_int8.supported(code, in_features):
        y = int8_emulated(x2, words, scales, table, k=k, T=T, L=L, axis=axis)
    else:
        y = x2 @ decode_torch(words, scales, table, k=k, T=T, L=L, axis=axis,
                              interleave=False).to(x2.dtype).t()
    return y.to(x2.dtype)


@torch.library.custom_op("tqbuild::trellis_matmul", mutates_args=())
def _trellis_matmul_op(x2: torch.Tensor, words: torch.Tensor, scales: torch.Tensor,
                       table: torch.Tensor, k: int, T: int, L: int, axis: int, code: str,
                       out_features: int, in_features: int) -> torch.Tensor:
    return trellis_matmul_impl(x2, words, scales, table, k, T, L, axis, code, out_features,
                               in_features)


@_trellis_matmul_op.register_fake
def _(x2, words, scales, table, k, T, L, axis, code, out_features, in_features):
    return x2.new_empty(x2.shape[0], out_features)
