"""Trellis quantization of one weight matrix along its rotated axis, plain or
with LDLQ (block LDL error feedback under the module's input Hessian).

W is [out, in]. axis 1 codes each row (input dim) in T-blocks; axis 0 codes
each column (output dim — down_proj's rotated axis) and is stored as Wᵀ. The
per-sequence scale is the sequence's RMS in the original W (× `alpha`),
rounded to fp16 and fixed before any feedback (DESIGN §8), so the Viterbi sees
~N(0, 1); with `refit` the scales are refit to the coded states afterwards
(stages/trellis_refit) and the reconstruction is recomputed from them.

LDLQ walks the input dim in groups G (the trellis block for axis 1; a group
of columns whose output-dim sequences are coded whole for axis 0). With
(H + δI)⁻¹ = UᵀU, U upper, the group's coding error E feeds the later
columns as W[:, >G] −= E · U_GG⁻¹ · U_G,>G — GPTQ's lazy-batch update with
the group quantized jointly by the Viterbi. Guard as GPTQ: a failed Cholesky
or a feedback target whose peak exceeds `scale_ratio` × the original peak
escalates δ ×10 up to `max_damp`, then falls back to the plain trellis;
with `compare_plain` the plain code is also run and the lower proxy loss
tr((W−Ŵ) H (W−Ŵ)ᵀ) under the undamped H is kept.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field
from typing import Any

import torch

from ..environment import env_int
from ..formats import trellis as fmt
from ..kernels import viterbi
from ..kernels.viterbi import lookup, quantize_blocks, values
from .guard import (
    damping_ladder,
    inverse_cholesky_upper,
    mask_dead_columns,
    proxy_loss,
    relative_error,
)
from .trellis_refit import refit_scales


@dataclass
class TrellisResult:
    states: torch.Tensor  # int64, stored orientation [rows, cols]
    scales: torch.Tensor  # fp16 [rows]
    recon: torch.Tensor  # float32 [out, in]: f32(code) · f32(scale)
    method: str  # "ldlq" | "plain"
    damp: float | None = None
    events: list[dict] = field(default_factory=list)
    proxy_loss: float | None = None
    plain_proxy_loss: float | None = None


@dataclass(frozen=True)
class Geometry:
    L: int
    k: int
    T: int
    code: str
    axis: int
    group: int  # LDLQ group along the input dim
    alpha: float = 1.0  # sequence scale multiplier
    refit: bool = False  # Hessian-weighted scale refit after coding


def sequence_scales(w: torch.Tensor, axis: int, alpha: float = 1.0) -> torch.Tensor:
    """fp16 RMS (× alpha) of every coded sequence (rows for axis 1, columns for axis 0)."""
    rms = w.float().pow(2).mean(dim=1 if axis == 1 else 0).sqrt()
    return (rms if alpha == 1.0 else rms * alpha).to(torch.float16)


def _code(x: torch.Tensor, scale: torch.Tensor, g: Geometry, table: torch.Tensor
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences x [n, len] with scales [n] -> (states [n, len], values [n, len] f32)."""
    s = scale.float().to(x.device)
    div = torch.where(s == 0, torch.ones_like(s), s)
    xn = (x.float() / div[:, None]).reshape(-1, g.T)
    if xn.is_cuda:  # no per-call host sync for finiteness: non-finite values (a
        # diverging LDLQ pass, which ldlq_core then discards) are coded as 0
        xn = torch.nan_to_num(xn, nan=0.0, posinf=0.0, neginf=0.0)
    states = quantize_blocks(xn, g.L, g.k, g.code, finite=xn.is_cuda).reshape(x.shape)
    return states, lookup(table, states) * s[:, None]


def _code_columns(w: torch.Tensor, cols: slice, scales: torch.Tensor, g: Geometry,
                  table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Code W[:, cols] -> (states in stored orientation, values [out, |cols|])."""
    if g.axis == 1:
        return _code(w[:, cols], scales, g, table)
    st, val = _code(w[:, cols].t(), scales[cols], g, table)
    return st, val.t()


def trellis_plain(w: torch.Tensor, g: Geometry) -> TrellisResult:
    scales = sequence_scales(w, g.axis, g.alpha)
    table = viterbi.value_table(g.code, g.L, w.device)
    seqs = w.float() if g.axis == 1 else w.float().t()
    states, val = _code(seqs, scales, g, table)
    recon = val if g.axis == 1 else val.t()
    return TrellisResult(states=states, scales=scales, recon=recon.contiguous(), method="plain")


LAZY_COLUMNS = 1024  # CUDA builds: columns a span of LDLQ's deferred feedback


def lazy_span(group: int, cuda: bool) -> int:
    """Columns whose feedback past them is applied as one product (GPTQ's lazy
    batch): whole groups, about LAZY_COLUMNS of them on CUDA (one large GEMM
    instead of a pass over the rest of W per group); one group on CPU, the order
    its locked artifacts were built with (a different order rounds differently:
    CUDA builds are reproducible on their own, README)."""
    return max(1, LAZY_COLUMNS // group) * group if cuda else group


ROW_PARTS = 4  # H100, mul1 L = 16 per tensor: 1 / 2 / 3 / 4 parts → down-like k = 2
# 27.8 / 29.2 / 29.6 / 30.4 M weights/s (session 25)
ROW_PARTS_CODES = {("mul1", 16)}  # (code, L) they were measured for; the others (L = 12's
# short calls, the pair code's own kernel) keep one part until measured
ROW_PARTS_MEMORY = 64 << 30  # the cards they run on by default: each part's Viterbi calls
# hold their own scratch (viterbi_cuda.scratch_budget, an eighth of the card), so 4 parts
# may hold half of it; measured on 80 GB, where the budget is 10.6 GB


def cuda_row_parts(total_memory: int, code: str, L: int) -> int:
    """Row parts on a CUDA card of `total_memory` bytes: TQBUILD_LDLQ_ROW_PARTS, else
    ROW_PARTS for ROW_PARTS_CODES on cards of at least ROW_PARTS_MEMORY, else 1."""
    measured = (code, L) in ROW_PARTS_CODES and total_memory >= ROW_PARTS_MEMORY
    return env_int("TQBUILD_LDLQ_ROW_PARTS", ROW_PARTS if measured else 1, least=1)


def row_parts(out: int, g: Geometry, total_memory: int | None,
              parts: int | None = None) -> list[slice]:
    """The output rows LDLQ runs as independent passes, each on its own CUDA stream
    (`cuda_row_parts` of the card's `total_memory`; None: CPU, one part): rows never share
    feedback, so one part's Viterbi tails and backtracks can overlap another's. Cut at
    whole sequences (axis 0: T rows; axis 1: any row)."""
    n = parts if parts is not None else 1 if total_memory is None \
        else cuda_row_parts(total_memory, g.code, g.L)
    unit = g.T if g.axis == 0 else 1
    units = -(-out // unit)
    n = max(1, n)  # more parts than sequences: the empty ones dropped below
    cuts = [min(out, (units * i // n) * unit) for i in range(n + 1)]
    return [slice(a, b) for a, b in itertools.pairwise(cuts) if b > a]


def _ldlq_steps(W: torch.Tensor, U: torch.Tensor, scales: torch.Tensor, table: torch.Tensor,
                g: Geometry, span: int, states: torch.Tensor, recon: torch.Tensor,
                peaks: list):
    """LDLQ over the columns of W (some output rows, a view written in place), its states
    and values into the matching views; a step (yield) a group. `peaks`: each group's
    target peak."""
    cols = W.shape[1]
    for s0 in range(0, cols, span):
        s1 = min(s0 + span, cols)
        errs, feeds = [], []  # the span's errors and their feeds past it
        for a in range(s0, s1, g.group):
            b = min(a + g.group, s1)
            blk = slice(a, b)
            peaks.append(W[:, blk].abs().amax())
            st, val = _code_columns(W, blk, scales, g, table)
            if g.axis == 1:
                states[:, blk] = st
            else:
                states[blk] = st
            recon[:, blk] = val
            if b < cols:
                err = W[:, blk] - val.double()
                feed = torch.linalg.solve_triangular(U[blk, blk], U[blk, b:], upper=True)
                if b < s1:  # the rest of the span now
                    W[:, b:s1].addmm_(err, feed[:, : s1 - b], alpha=-1)
                if s1 < cols:
                    errs.append(err)
                    feeds.append(feed[:, s1 - b:])
            yield
        if len(errs) == 1:  # a span of one group (CPU builds): as always
            W[:, s1:] -= errs[0] @ feeds[0]
        elif errs:  # past the span: every group's feedback in one product
            W[:, s1:].addmm_(torch.cat(errs, 1), torch.cat(feeds), alpha=-1)


def _run_parts(steps: list, device: torch.device) -> None:
    """Run the parts' step generators a group at a time in turn, each on its own CUDA
    stream where there are several on CUDA (ordered after, and before, the current one)."""
    side = len(steps) > 1 and device.type == "cuda"
    main = torch.cuda.current_stream(device) if side else None
    streams: list[torch.cuda.Stream | None] = [None] * len(steps)
    if main is not None:
        streams = [torch.cuda.Stream(device) for _ in steps]
        for st in streams:
            st.wait_stream(main)  # type: ignore[union-attr]
    live = list(zip(streams, steps, strict=True))
    while live:
        for item in list(live):
            st, gen = item
            with torch.cuda.stream(st) if st is not None else contextlib.nullcontext():
                if next(gen, StopIteration) is StopIteration:
                    live.remove(item)
    if main is not None:
        for st in streams:
            main.wait_stream(st)  # type: ignore[arg-type]


def ldlq_core(w: torch.Tensor, h: torch.Tensor, g: Geometry, damp: float,
              scale_ratio: float, span: int | None = None,
              parts: int | None = None) -> TrellisResult | dict:
    """One LDLQ pass; a guard event dict if it fails. `span`: columns (whole
    groups) whose later feedback is deferred to one product (`lazy_span`); `parts`:
    output-row parts run side by side (`row_parts`)."""
    out, cols = w.shape
    W = w.double().clone()
    H = h.double().to(w.device).clone()
    mask_dead_columns(W, H)
    U = inverse_cholesky_upper(H, damp)
    if U is None:
        return {"event": "cholesky_failed", "damp": damp}
    scales = sequence_scales(w, g.axis, g.alpha)
    table = viterbi.value_table(g.code, g.L, w.device)
    peak = float(w.abs().max())
    states = torch.empty((out, cols) if g.axis == 1 else (cols, out), dtype=torch.int64,
                         device=w.device)
    recon = torch.empty(out, cols, dtype=torch.float32, device=w.device)
    span = lazy_span(g.group, W.is_cuda) if span is None else span
    if span % g.group:
        raise ValueError(f"LDLQ span {span} is not whole groups of {g.group} columns")
    # each group's target peak, checked once after the loop (no host sync per group);
    # a diverged pass is discarded whole, as if it had stopped there
    rows = row_parts(out, g, torch.cuda.get_device_properties(W.device).total_memory
                     if W.is_cuda else None, parts)
    peaks: list[list] = [[] for _ in rows]
    _run_parts([_ldlq_steps(W[r], U, scales[r] if g.axis == 1 else scales, table, g, span,
                            states[r] if g.axis == 1 else states[:, r], recon[r], pk)
                for r, pk in zip(rows, peaks, strict=True)], W.device)
    if peak > 0:
        group_peaks = torch.stack([torch.stack(pk) for pk in peaks]).amax(0)
        bad = ~(group_peaks <= scale_ratio * peak)  # NaN (a blown-up target) counts
        if bool(bad.any()):
            first = float(group_peaks[int(bad.nonzero()[0, 0])])
            return {"event": "target_diverged", "damp": damp, "peak": first,
                    "original_peak": peak}
    return TrellisResult(states=states, scales=scales, recon=recon, method="ldlq", damp=damp)


def trellis_guarded(w: torch.Tensor, h: torch.Tensor | None, g: Geometry, *,
                    damp: float = 0.01, scale_ratio: float = 4.0, max_damp: float = 10.0,
                    compare_plain: bool = False) -> TrellisResult:
    if h is None:
        return trellis_plain(w, g)
    h = h.to(w.device)
    events: list[dict] = []
    res: TrellisResult | None = None
    for d in damping_ladder(damp, max_damp):
        got = ldlq_core(w, h, g, d, scale_ratio)
        if isinstance(got, dict):
            events.append(got)
            continue
        res = got
        if events:
            events.append({"event": "recovered", "damp": d})
        break
    if res is None:
        events.append({"event": "fallback_plain"})
        res = trellis_plain(w, g)
    if g.refit:
        refit(res, w, h, g)
    res.proxy_loss = proxy_loss(w, res.recon, h)
    if compare_plain and res.method == "ldlq":
        plain = trellis_plain(w, g)
        if g.refit:
            refit(plain, w, h, g)
        plain.proxy_loss = plain.plain_proxy_loss = proxy_loss(w, plain.recon, h)
        res.plain_proxy_loss = plain.proxy_loss
        if plain.proxy_loss < res.proxy_loss:
            events.append({"event": "plain_better", "ldlq_loss": res.proxy_loss,
                           "plain_loss": plain.proxy_loss})
            res = plain
    res.events = events
    return res


def refit(res: TrellisResult, w: torch.Tensor, h: torch.Tensor, g: Geometry) -> None:
    """Scales refit to the chosen states (never raising the proxy); the
    reconstruction recomputed as f32(code) · f32(scale), as the runtimes do."""
    codes = values(res.states.to(w.device), g.code, g.L)
    codes = codes if g.axis == 1 else codes.t()
    res.scales = refit_scales(w, codes, res.scales, h, g.axis)
    s = res.scales.float().to(w.device)
    res.recon = (codes * (s[:, None] if g.axis == 1 else s[None, :])).contiguous()


ENCODER_FIELDS = ("ldlq_group", "scale_alpha", "refit")  # not in the format entry


def geometry(spec) -> Geometry:
    tp = spec.trellis
    return Geometry(L=tp.L, k=spec.bits, T=tp.T, code=tp.code, axis=int(tp.axis),
                    group=tp.T if int(tp.axis) == 1 else tp.ldlq_group,
                    alpha=tp.scale_alpha, refit=tp.refit)


def quantize_trellis_matrix(w: torch.Tensor, h: torch.Tensor | None, spec, guard,
                            dtype=None) -> TrellisResult:
    return trellis_guarded(w.float(), h if spec.method == "ldlq" else None, geometry(spec),
                           damp=spec.damp, scale_ratio=guard.scale_ratio,
                           max_damp=guard.max_damp, compare_plain=guard.compare_plain)


def assemble_trellis(name: str, w: torch.Tensor, results: list[TrellisResult], spec, hessians,
                     dtype, guard) -> tuple[dict, dict, list]:
    """Per-matrix results -> (packed words + fp16 scales, the module record with
    the reconstruction hash, extra events)."""
    import numpy as np

    module = name[: -len(".weight")]
    g = geometry(spec)
    use_h = spec.method == "ldlq"
    words, scales, recons = [], [], []
    for r in results:
        wd = fmt.pack_tensor(r.states, g.k, g.T)
        words.append(fmt.interleave(wd, g.k, g.T) if spec.trellis.interleave else wd)
        scales.append(r.scales.cpu().numpy())
        recons.append(r.recon.cpu().numpy())  # one copy to the host per matrix
    lead = tuple(w.shape[:-2])
    packed = np.stack(words).reshape(*lead, *words[0].shape)
    sc = np.stack(scales).reshape(*lead, -1)
    recon = torch.from_numpy(recons[0][None] if len(recons) == 1 else np.stack(recons))
    stored = recon.numpy() if g.axis == 1 else recon.numpy().transpose(0, 2, 1)
    record: dict[str, Any] = {"format": "trellis", "bits": g.k, "group_size": g.T,
              "trellis": fmt.TrellisEntry.from_spec(spec).trellis_dict(), "scale": "rms-fp16",
              "proxy_rel_error": round(relative_error(w.cpu().float(),
                                                      recon.reshape(w.shape)), 6),
              "recon_sha256": fmt.recon_hash(stored)}
    encoder = {f: getattr(spec.trellis, f) for f in ENCODER_FIELDS
               if getattr(spec.trellis, f) != type(spec.trellis).model_fields[f].default}
    if encoder:  # the encoder settings a recipe changed (absent: the defaults)
        record["encoder"] = encoder
    if use_h and hessians is not None:
        record["damp"] = sorted({r.damp for r in results if r.damp is not None})
        record["hessian_proxy_loss"] = {"kept": sum(r.proxy_loss or 0 for r in results)}
        if guard.compare_plain:
            record["hessian_proxy_loss"]["plain"] = sum(r.plain_proxy_loss or 0
                                                        for r in results)
    extra = [{"event": "no_hessian_plain", "module": module}] if use_h and hessians is None \
        else []
    return {name: torch.from_numpy(packed), f"{module}.scales": torch.from_numpy(sc)}, record, extra
