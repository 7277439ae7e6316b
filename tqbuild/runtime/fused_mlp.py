"""Gated MLPs with gate and up as one packed trellis module: one kernel call a
token instead of two, the input quantized once (H200, Llama-3-8B's 14336 × 4096
at k = 3, M = 1: 30.5 µs stacked vs 2 × 17.4 µs apart;
bench/results/trellis_gemv-cuda-r6.json).

Only MLPs whose forward is transformers' `down_proj(act_fn(gate_proj(x)) *
up_proj(x))` (llama, mistral, qwen2/3, qwen3_moe's dense MLP, qwen3_next,
qwen3_5, gemma3) with gate and up packed alike are fused; the fused module holds
`gate_up_proj` (gate's rows, then up's) in place of `gate_proj` and `up_proj`.
Each output row is decoded and summed exactly as before (a row's sum does not
depend on the rows beside it), so the int8 CUDA kernels give the same bits.
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
import textwrap
from collections.abc import Callable

import torch
from torch import nn

from ..formats.trellis import TrellisEntry
from .trellis_torch import TrellisLinear

_GATED = "self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))"
_BODIES = ({f"down_proj = {_GATED}", "return down_proj"}, {f"return {_GATED}"})


def _is_gated_mlp(module: nn.Module) -> bool:
    return all(hasattr(module, a) for a in ("gate_proj", "up_proj", "down_proj", "act_fn")) \
        and _gated_forward(type(module).forward)


def source_ast(fn: Callable) -> ast.stmt | None:
    """The first statement of fn's source (its def, decorators included), or None where
    the source cannot be read or parsed."""
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return None


@functools.cache
def _gated_forward(forward: Callable) -> bool:
    """Whether forward(self, x) is exactly the gated MLP (read from its source)."""
    fn = source_ast(forward)
    if not isinstance(fn, ast.FunctionDef) or [a.arg for a in fn.args.args] != ["self", "x"]:
        return False
    body = [st for st in fn.body
            if not (isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant))]
    return {ast.unparse(st) for st in body} in _BODIES and len(body) in (1, 2)


def stack_rows(parts: list[TrellisLinear]) -> TrellisLinear | None:
    """One TrellisLinear whose outputs are the parts' outputs in order, or None
    where they cannot share one (coded along the outputs, other k / L / T / code,
    other inputs, biases)."""
    first = parts[0]
    same = all(p.axis == 1 and p.bias is None and p.in_features == first.in_features and
               (p.k, p.T, p.L, p.code) == (first.k, first.T, first.L, first.code)
               for p in parts)
    if not same:
        return None
    entry = TrellisEntry(k=first.k, T=first.T, L=first.L, code=first.code, axis=1,
                         interleave=False).config()
    return TrellisLinear(torch.cat([p.words for p in parts]), torch.cat([p.scales for p in parts]),
                         entry).to(first.words.device)


class GateUpMLP(nn.Module):
    """down_proj(act_fn(gate) · up) with [gate | up] = gate_up_proj(x), halves alike."""

    def __init__(self, gate_up_proj: TrellisLinear, down_proj: nn.Module, act_fn: nn.Module):
        super().__init__()
        self.gate_up_proj, self.down_proj, self.act_fn = gate_up_proj, down_proj, act_fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(self.act_fn(gate) * up)


def fuse_gate_up(model: nn.Module) -> int:
    """Swap every gated MLP whose gate and up are packed alike for a GateUpMLP;
    the number swapped (none with TQBUILD_FUSE_MLP=0). The CUDA loaders call it."""
    if os.environ.get("TQBUILD_FUSE_MLP", "1") == "0":
        return 0
    swaps = []
    for name, module in model.named_modules():
        if not _is_gated_mlp(module):
            continue
        gate, up = module.gate_proj, module.up_proj
        if not (isinstance(gate, TrellisLinear) and isinstance(up, TrellisLinear)
                and gate.out_features == up.out_features):
            continue
        stacked = stack_rows([gate, up])
        if stacked is not None:
            swaps.append((name, GateUpMLP(stacked, module.down_proj, module.act_fn)))
    for name, new in swaps:
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf, new)
    return len(swaps)
