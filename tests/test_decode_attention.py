"""runtime/decode_attention.py: split-KV flash decoding of one query token on the key/value
heads equals the float64 softmax attention (masks none, boolean, additive, per row; splits
one and several; float32, bfloat16, float16; ragged last tiles; unused cache slots), and
tq_sdpa with it on gives sdpa's logits. Kernel cases run in Triton's interpreter on CPU
(a subprocess), or on CUDA where there is one."""

from __future__ import annotations

import contextlib
import os

import pytest
import torch

from tqbuild.runtime import decode_attention as da

CUDA = torch.cuda.is_available()
triton = pytest.importorskip("triton")


def reference(q, k, v, mask, scale):
    """softmax(q kᵀ·scale + mask) v in float64, per (batch, kv head)."""
    s = q.double() @ k.double().transpose(-1, -2) * scale
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask.double()
    return torch.softmax(s, -1) @ v.double()


def _cases():
    """(name, B, H, G, S, D, Dv, dtype, mask kind, splits)."""
    f32, bf, f16 = torch.float32, torch.bfloat16, torch.float16
    return [
        ("plain", 2, 2, 4, 100, 16, 16, f32, None, 1),
        ("plain split", 2, 2, 4, 100, 16, 16, f32, None, 3),
        ("bool holes", 1, 2, 4, 150, 32, 32, f32, "bool", 1),
        ("bool holes split", 1, 2, 4, 150, 32, 32, f32, "bool", 3),
        ("static cache tail", 1, 2, 4, 256, 16, 16, f32, "tail", 4),  # splits wholly masked
        ("additive", 2, 1, 8, 90, 16, 32, f32, "add", 2),
        ("per row", 1, 2, 4, 70, 16, 16, f32, "row", 2),
        ("one row", 1, 3, 1, 65, 16, 16, f32, "bool", 2),
        ("bf16", 1, 2, 4, 130, 64, 64, bf, "tail", 3),
        ("f16", 1, 2, 4, 130, 64, 64, f16, "bool", 1),
        ("auto split", 1, 1, 4, 700, 16, 16, f32, "tail", 0),
    ]


def _inputs(case, g):
    name, B, H, G, S, D, Dv, dt, kind, splits = case
    q = torch.randn(B, H, G, D, generator=g)
    k = torch.randn(B, H, S, D, generator=g)
    v = torch.randn(B, H, S, Dv, generator=g)
    mask = None
    if kind in ("bool", "tail"):
        mask = torch.rand(B, 1, 1, S, generator=g) > 0.3 if kind == "bool" else \
            torch.arange(S).view(1, 1, 1, S).expand(B, 1, 1, S) < S // 3
        mask = mask.clone()
        mask[..., 0] = True  # every row attends somewhere
    elif kind == "add":
        mask = torch.randn(B, 1, 1, S, generator=g) * 3
        mask[..., S // 2:] = torch.finfo(torch.float32).min  # transformers' masked value
    elif kind == "row":
        mask = torch.rand(B, H, G, S, generator=g) > 0.5
        mask[..., 0] = True
    return q.to(dt), k.to(dt), v.to(dt), mask, splits


def _kernel_cases(device: str) -> None:
    g = torch.Generator().manual_seed(3)
    for case in _cases():
        q, k, v, mask, splits = (t.to(device) if isinstance(t, torch.Tensor) else t
                                 for t in _inputs(case, g))
        assert da.serves(q, k, v, mask), case[0]
        scale = q.shape[-1] ** -0.5
        got = da.attention(q, k, v, mask, scale, splits=splits)
        want = reference(q.cpu(), k.cpu(), v.cpu(), None if mask is None else mask.cpu(), scale)
        assert got.shape == want.shape and got.dtype == q.dtype, case[0]
        tol = 2e-5 if q.dtype == torch.float32 else 2e-2
        err = (got.cpu().double() - want).abs().max().item()
        assert err < tol, (case[0], err)
    z = torch.zeros(1, 2, 4, 16, device=device)
    zk = torch.zeros(1, 2, 8, 16, device=device)
    assert not da.serves(torch.zeros(1, 2, 4, 24, device=device), zk, zk, None)  # D not 2^n
    assert not da.serves(z, zk.half(), zk, None)  # dtypes differ
    assert not da.serves(torch.zeros(1, 2, 65, 16, device=device), zk, zk, None)  # G > 64
    assert not da.serves(z, zk, zk, torch.ones(1, 3, 1, 8, dtype=torch.bool, device=device))
    assert not da.serves(z, zk, zk, torch.ones(1, 1, 1, 8, dtype=torch.long, device=device))
    assert not da.serves(z, zk, zk, torch.ones(2, 1, 1, 8, dtype=torch.bool, device=device))
    # a non-contiguous q (a transposed view) and the custom op
    q = torch.randn(1, 4, 2, 16, generator=g).transpose(1, 2).to(device)
    k, v = (torch.randn(1, 2, 40, 16, generator=g).to(device) for _ in range(2))
    got = da.decode_attention(q, k, v, None, 0.3)
    assert (got.cpu().double() - reference(q.cpu(), k.cpu(), v.cpu(), None, 0.3)).abs().max() < 2e-5
    _compiled_case(device)
    _tq_sdpa_case(device)


@contextlib.contextmanager
def _kernel_on():
    """TQBUILD_DECODE_ATTN=1 and the kernel's calls counted (a list, one entry a call)."""
    calls: list[int] = []
    attend = da.attention
    os.environ["TQBUILD_DECODE_ATTN"] = "1"
    da.attention = lambda *a, **kw: calls.append(1) or attend(*a, **kw)
    try:
        yield calls
    finally:
        da.attention = attend
        os.environ.pop("TQBUILD_DECODE_ATTN")


def _compiled_case(device: str) -> None:
    """tq_sdpa's one-token call with the kernel on, through torch.compile (one custom op)."""
    from tqbuild.runtime import gqa_attention

    class Layer(torch.nn.Module):
        num_key_value_groups = 4

    g = torch.Generator().manual_seed(4)
    q = torch.randn(1, 8, 1, 16, generator=g).to(device)
    k, v = (torch.randn(1, 2, 96, 16, generator=g).to(device) for _ in range(2))
    mask = (torch.arange(96, device=device) < 50).view(1, 1, 1, 96)
    fn = lambda: gqa_attention.attention(Layer(), q, k, v, mask, scaling=0.25)[0]  # noqa: E731
    want = fn()
    with _kernel_on() as calls:
        torch._dynamo.reset()
        got = torch.compile(fn)()
    assert len(calls) == 1 and got.shape == want.shape == (1, 1, 8, 16)
    assert (got - want).abs().max().item() < 2e-5


def _tq_sdpa_case(device: str) -> None:
    """A tiny llama decoded on a static cache: tq_sdpa with the kernel on gives sdpa's logits."""
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    from test_gqa_attention import _decode, _model

    from tqbuild.runtime import gqa_attention

    model = _model().to(device)  # on CUDA the kernel serves CUDA tensors only
    ids = torch.randint(1, 97, (2, 6), generator=torch.Generator().manual_seed(1)).to(device)
    mask = torch.ones(2, 6, dtype=torch.long, device=device)
    mask[0, :2] = 0
    want = _decode(model, ids, mask)
    with _kernel_on() as calls:
        assert gqa_attention.use_gqa_attention(model)
        got = _decode(model, ids, mask)
    assert len(calls) == 4 * 2, len(calls)  # 4 one-token steps × 2 layers
    err = (got - want).abs().max().item()
    assert err < 2e-5, err


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_cuda_cases():
    _kernel_cases("cuda")


def test_interpreter_cases():
    from interpreter import run_cases

    run_cases("test_decode_attention", timeout=900)


def test_serves_and_plan():
    q = torch.zeros(1, 8, 4, 128)
    k = v = torch.zeros(1, 8, 64, 128)
    if not da._interpreting() and not CUDA:
        assert not da.serves(q, k, v, None)  # CPU tensors without the interpreter
    assert da.plan(128, 8, 132, 64) == (64, 2)  # two tiles: two splits
    assert da.plan(4096, 8, 132, 64) == (128, 32)  # ⌈264 / 8⌉ = 33 splits asked: 2 tiles each
    assert da.plan(4096, 512, 132, 64) == (4096, 1)  # enough programs already
    assert da.plan(1, 8, 132, 64) == (64, 1)
    for S in (1, 63, 64, 65, 1000, 4096):  # splits asked: whole tiles, as many as fit
        for asked in (1, 2, 3, 7, 200):
            per = -(-S // (asked * 64)) * 64
            assert da.plan(S, 8, 132, 64, asked) == (per, -(-S // per)), (S, asked)
    if da.triton is not None:  # no positions: zeros, no launch (splits asked or not)
        for asked in (0, 2):
            got = da.attention(q, k[:, :, :0], v[:, :, :0], None, 0.3, splits=asked)
            assert got.shape == (1, 8, 4, 128) and not got.any()
