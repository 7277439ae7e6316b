"""Attention with q, k and v as one packed module: one kernel call a token instead of
three (Llama-3-8B's 4-bit q / k / v at M = 1 on an H100: 7.7 + 4.7 + 4.7 µs apart, the
small k and v far from the memory bandwidth; bench/results/affine_gemv-cuda-s12.json).

The attention's forward is rewritten once per class from its source: it must call
`self.q_proj`, `self.k_proj` and `self.v_proj` once each, on its first argument
(never reassigned), and no other method but `__init__` may name them; the three
calls become the parts of one `self.qkv_proj(<argument>)`, computed first. Other
forwards are left alone. q, k and v must be packed alike (all AffineLinear of one
bit width and group, or all TrellisLinear coded along the inputs with one k / L /
T / code). Each output row is decoded and summed as before (a row's sum does not
depend on the rows beside it where the kernel splits no inputs: every decoder shape
on an H100 / H200), so the CUDA kernels give the same bits.
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
from typing import Any

import torch
from torch import nn

from .affine_torch import AffineLinear
from .fused_mlp import source_ast, stack_rows
from .trellis_torch import TrellisLinear

PROJ = ("q_proj", "k_proj", "v_proj")
FUSED = "_tq_qkv"  # the local the rewritten forward keeps the three parts in


class QKVProj(nn.Module):
    """(q, k, v) = the parts of one packed linear's output, in that order."""

    def __init__(self, proj: nn.Module, sizes: tuple[int, int, int]):
        super().__init__()
        self.proj, self.sizes = proj, sizes

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.proj(x).split(self.sizes, dim=-1)


def stack_affine(parts: list[AffineLinear]) -> AffineLinear | None:
    """One AffineLinear whose outputs are the parts' in order, or None where they
    cannot share one (other bits, group, inputs, scale dtypes, biases on some only)."""
    first = parts[0]
    same = all((p.bits, p.group_size, p.in_features, p.scales.dtype, p.bias is None)
               == (first.bits, first.group_size, first.in_features, first.scales.dtype,
                   first.bias is None) for p in parts)
    if not same:
        return None
    biases = [p.bias for p in parts if p.bias is not None]
    bias = torch.cat([b.data for b in biases]) if biases else None
    return AffineLinear(torch.cat([p.weight for p in parts]), torch.cat([p.scales for p in parts]),
                        torch.cat([p.biases for p in parts]), first.bits, first.group_size, bias)


def stack_linears(parts: list[nn.Module]) -> nn.Module | None:
    if all(type(p) is AffineLinear for p in parts):
        return stack_affine(parts)  # type: ignore[arg-type]
    if all(isinstance(p, TrellisLinear) for p in parts):
        return stack_rows(parts)  # type: ignore[arg-type]
    return None


class _Rewrite(ast.NodeTransformer):
    def __init__(self, calls: dict[str, ast.Call]):
        self.index = {id(c): PROJ.index(name) for name, c in calls.items()}

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if id(node) in self.index:
            return ast.copy_location(ast.Subscript(ast.Name(FUSED, ast.Load()),
                                                   ast.Constant(self.index[id(node)]),
                                                   ast.Load()), node)
        return self.generic_visit(node)


def _self_proj(node: ast.AST) -> str | None:
    """'q_proj' for the expression self.q_proj (and k / v), else None."""
    if isinstance(node, ast.Attribute) and node.attr in PROJ and \
            isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def _names_proj_elsewhere(cls: type) -> bool:
    """Whether a method of cls (or a base) other than __init__ / forward names q/k/v_proj."""
    for klass in cls.__mro__:
        if klass in (nn.Module, object):
            continue
        for name, fn in vars(klass).items():
            if name in ("__init__", "forward") or not inspect.isfunction(fn):
                continue
            tree = source_ast(fn)
            if tree is None or any(_self_proj(n) for n in ast.walk(tree)):
                return True
    return False


@functools.cache
def fused_class(cls: Any) -> type | None:
    """cls with its forward rewritten to one qkv_proj call, or None where its forward
    is not of the form the module docstring states."""
    fn = getattr(cls, "forward", None)
    if fn is None:
        return None
    raw = inspect.unwrap(fn)
    if raw.__code__.co_freevars or _names_proj_elsewhere(cls):
        return None  # a closure (super(), __class__) does not survive the rewrite
    fdef = source_ast(fn)
    if not isinstance(fdef, ast.FunctionDef) or len(fdef.args.args) < 2:
        return None
    arg = fdef.args.args[1].arg
    calls: dict[str, ast.Call] = {}
    named = 0
    for node in ast.walk(fdef):
        if _self_proj(node):
            named += 1
        if isinstance(node, ast.Name) and node.id == arg and isinstance(node.ctx, ast.Store):
            return None  # the argument reassigned
        if isinstance(node, ast.Call) and (proj := _self_proj(node.func)):
            if proj in calls or node.keywords or len(node.args) != 1 or \
                    not (isinstance(node.args[0], ast.Name) and node.args[0].id == arg):
                return None
            calls[proj] = node
    if len(calls) != 3 or named != 3:  # each called once, never named otherwise
        return None
    fdef = _Rewrite(calls).visit(fdef)
    first = ast.parse(f"{FUSED} = self.qkv_proj({arg})").body[0]
    fdef.body.insert(0, first)
    module = ast.fix_missing_locations(ast.Module(body=[fdef], type_ignores=[]))
    ast.increment_lineno(module, inspect.getsourcelines(fn)[1] - 1)  # tracebacks: its file's lines
    space: dict = {}
    exec(compile(module, inspect.getsourcefile(raw) or "<fused_qkv>", "exec"),  # noqa: S102
         raw.__globals__, space)
    return type(cls.__name__, (cls,), {"forward": space[fdef.name], "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__})


def fuse_qkv(model: nn.Module) -> int:
    """Give every attention whose q, k and v are packed alike (and whose forward
    fused_class can rewrite) one qkv_proj; the number fused (none with
    TQBUILD_FUSE_QKV=0). The CUDA loaders call it."""
    if os.environ.get("TQBUILD_FUSE_QKV", "1") == "0":
        return 0
    fused = 0
    for module in model.modules():
        if not all(hasattr(module, p) for p in PROJ):
            continue
        cls: Any = type(module)
        new_cls = fused_class(cls)  # (cached) before any weights are copied
        parts = [getattr(module, p) for p in PROJ]
        stacked = stack_linears(parts) if new_cls is not None else None
        if new_cls is None or stacked is None:
            continue
        for p in PROJ:
            delattr(module, p)
        module.qkv_proj = QKVProj(stacked, tuple(p.out_features for p in parts))  # type: ignore[arg-type]
        module.__class__ = new_cls
        fused += 1
    return fused
