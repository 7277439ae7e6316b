"""Streaming Hessian capture: H = Σ xᵀx per distinct linear input of a layer.

Each calibration sample contributes a float64 partial xₛᵀxₛ, and partials are
summed in sample order, so neither batch size nor device count changes a bit
(DESIGN §8): a sample's factors xₛ are collected, then `end_sample` hands them
to the reducer, which adds xₛᵀxₛ (in a distributed build, every rank's, rank
by rank, each row block on its owner rank: pipeline/distributed.py). Linears
that read the same tensor (q/k/v, gate/up) share one H.
Fused MoE experts get one H per expert from the tokens routed to it (the
down-projection's from the expert's own intermediate activations); routers
(a bare 2-D weight read by `F.linear`) get theirs from their input.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

from .norm_fold import effective_gain


def head_hessian(x: torch.Tensor, norm_w: torch.Tensor, eps: float, zero_centred: bool,
                 reducer, rounds: int) -> torch.Tensor:
    """H of the lm_head's input: each sample's final-RMSNorm output xn (x: this
    rank's samples [n, T, d]) adds xnᵀxn, in sample order (`rounds`: rounds of
    one sample per rank)."""
    gain = effective_gain(norm_w, zero_centred)
    acc: dict[str, torch.Tensor] = {}
    for j in range(rounds):
        parts = {}
        if j < x.shape[0]:
            xs = x[j]
            xn = (xs * torch.rsqrt(xs.pow(2).mean(-1, keepdim=True) + eps) * gain).double()
            parts["h"] = [xn]  # the factor: the reducer adds xnᵀxn
        reducer.ordered_add(acc, {}, parts, {})
    reducer.finish(acc)
    return acc["h"]


class LocalReducer:
    """One process: a sample's partials are added as they come (the reducer
    interface pipeline/distributed.py's Dist implements across ranks)."""

    world = 1

    def ordered_add(self, acc, count, factors, ntok) -> None:
        accumulate(acc, count, factors, ntok)

    def finish(self, acc) -> None:
        pass


class HessianCapture:
    def __init__(self, layer: nn.Module, seq_len: int, reducer=None):
        self.seq_len = seq_len
        self.reducer = reducer or LocalReducer()
        self.h: dict[str, torch.Tensor] = {}  # key -> H (float64)
        self.alias: dict[str, str] = {}  # module name -> key of its H
        self.count: dict[str, int] = {}
        self._parts: dict[str, list[torch.Tensor]] = {}  # this sample's factors X
        self._ntok: dict[str, int] = {}
        self._handles = []
        # inputs seen in this batch, held so their memory cannot be reused and
        # mistaken for another input at the same address
        self._seen: OrderedDict[tuple, tuple[str, torch.Tensor]] = OrderedDict()
        for name, mod in layer.named_modules():
            if isinstance(mod, nn.Linear):
                self._handles.append(mod.register_forward_pre_hook(self._linear_hook(name)))
            elif _is_fused_experts(mod):
                self._handles.append(mod.register_forward_hook(self._experts_hook(name, mod)))
            elif _is_router(mod):
                self._handles.append(mod.register_forward_pre_hook(self._linear_hook(name)))

    def start_batch(self, first_sample: int, n: int) -> None:
        self._flush()
        self._seen.clear()

    def _flush(self) -> None:
        """One process: a new sample (or close) adds the last one's partials. In a
        distributed build the executor calls end_sample once per round itself."""
        if self._parts and self.reducer.world == 1:
            self.end_sample()
        assert not self._parts, "distributed capture: end_sample was not called"

    def end_sample(self) -> None:
        """Add this sample's partials (collective in a distributed build: every
        rank calls it once per round, with or without a sample)."""
        self.reducer.ordered_add(self.h, self.count, self._parts, self._ntok)
        self._parts, self._ntok = {}, {}

    def close(self) -> None:
        self._flush()
        self.reducer.finish(self.h)
        for h in self._handles:
            h.remove()

    def _add(self, key: str, x: torch.Tensor, samples: torch.Tensor | None = None) -> None:
        """x [N, d] rows of consecutive samples; `samples` gives each row's sample id."""
        x = x.detach().to(torch.float64)
        d = x.shape[-1]
        parts = self._parts.setdefault(key, [])
        # a sample's factor X: the reducer adds XᵀX (distributed: ranks trade the
        # small factors, not d×d partials)
        if samples is None:
            rows = x.reshape(-1, self.seq_len, d)
            parts.extend(xs.contiguous() for xs in rows)
            self._ntok[key] = self._ntok.get(key, 0) + rows.shape[0] * self.seq_len
        else:
            for s in torch.unique(samples).tolist():  # ascending sample order
                xs = x[samples == s]
                parts.append(xs)
                self._ntok[key] = self._ntok.get(key, 0) + xs.shape[0]

    def _linear_hook(self, name: str):
        def hook(mod, args):
            x = args[0]
            ptr = (x.data_ptr(), tuple(x.shape), tuple(x.stride()))
            if ptr in self._seen:
                key = self._seen[ptr][0]
            else:
                key = name
                self._seen[ptr] = (name, x)
                self._add(key, x.reshape(-1, x.shape[-1]))
            self.alias[name] = key
        return hook

    def _experts_hook(self, name: str, mod: nn.Module):
        def hook(module, args, output):
            x, top_k_index = args[0], args[1]
            samples_all = torch.arange(x.shape[0], device=x.device) // self.seq_len
            for e in range(module.gate_up_proj.shape[0]):
                rows = (top_k_index == e).any(-1).nonzero()[:, 0]
                if rows.numel() == 0:
                    continue
                xe, se = x[rows], samples_all[rows]
                gate_up = torch.nn.functional.linear(xe, module.gate_up_proj[e])
                g, u = gate_up.chunk(2, dim=-1)
                inter = module.act_fn(g) * u
                base = f"{name}.{e}"
                self._add(f"{base}.gate_proj", xe, se)
                for proj in ("gate_proj", "up_proj"):  # one input, one H
                    self.alias[f"{base}.{proj}"] = f"{base}.gate_proj"
                self._add(f"{base}.down_proj", inter, se)
                self.alias[f"{base}.down_proj"] = f"{base}.down_proj"
        return hook

    def for_module(self, name: str) -> torch.Tensor | None:
        key = self.alias.get(name)
        return None if key is None else self.h[key]


def _is_fused_experts(mod: nn.Module) -> bool:
    p = dict(mod.named_parameters(recurse=False))
    return ("gate_up_proj" in p and "down_proj" in p and p["gate_up_proj"].ndim == 3
            and hasattr(mod, "act_fn"))


def _is_router(mod: nn.Module) -> bool:
    p = dict(mod.named_parameters(recurse=False))
    return (set(p) == {"weight"} and p["weight"].ndim == 2 and not isinstance(mod, nn.Embedding)
            and not list(mod.children()) and hasattr(mod, "top_k"))


BLOCK_ROWS = 2048  # Hessian rows per block: one block (the plain XᵀX) up to this width


def row_blocks(d: int) -> list[tuple[int, int]]:
    return [(lo, min(d, lo + BLOCK_ROWS)) for lo in range(0, d, BLOCK_ROWS)]


def accumulate(acc, count, factors, ntok, mine=None) -> None:
    """acc[k] += XᵀX for every factor X of every key, in order, row block by row
    block (only the blocks `mine` accepts, when given)."""
    for k, fs in factors.items():
        for f in fs:
            d = f.shape[1]
            if k not in acc:
                acc[k] = torch.zeros((d, d), dtype=torch.float64, device=f.device)
                count[k] = 0
            f = f.to(acc[k].device).contiguous()  # the same layout on every path
            for lo, hi in row_blocks(d):
                if mine is None or mine(k, lo, hi, d):
                    acc[k][lo:hi] += f[:, lo:hi].T @ f
        count[k] = count.get(k, 0) + ntok.get(k, 0)
