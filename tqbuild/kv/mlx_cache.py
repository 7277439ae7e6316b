"""TurboQuant KV cache for mlx-lm: appended tokens are encoded on the device by
MLX ops (kv/mlx_codec.py: keys affine per 32-group, values FWHT + Lloyd-Max),
only the codes are kept — in buffers grown in steps of `step` tokens, as
mlx-lm's KVCache grows its own — and every fetch returns keys/values decoded
from them, with no host copy. Sliding-window layers keep mlx-lm's own bf16
rotating cache (with a warning). Prompt caches are saved and restored in
mlx-lm's file format through this module's functions (stock
`load_prompt_cache` only knows mlx-lm's classes)."""

from __future__ import annotations

import re
import warnings

import mlx.core as mx
import numpy as np
import torch
from mlx_lm.models import cache as mlx_cache

from ..errors import BadInput
from . import codec, mlx_codec

SCHEME = re.compile(r"k(\d)v(\d)$")


def parse_scheme(scheme: str) -> tuple[int, int]:
    m = SCHEME.match(scheme)
    if not m:
        raise ValueError(f"scheme {scheme!r} is not like 'k8v3'")
    return int(m.group(1)), int(m.group(2))


class TurboQuantKVCache(mlx_cache._BaseCache):
    """Codes per layer, [B, H, capacity, ·] mx arrays: packed keys (int8 indices
    at 8 bits), key scales/zeros (fp16), packed values, value scales (fp16);
    positions [offset, capacity) are unused room."""

    step = 256

    def __init__(self, key_bits: int = 8, value_bits: int = 3, deferred_fwht: bool = False):
        self.key_bits, self.value_bits = key_bits, value_bits
        # deferred: values come back in the rotated domain (centroid · scale); the
        # inverse FWHT and signs are folded into o_proj once (fold_inverse_fwht)
        self.deferred_fwht = deferred_fwht
        self.codes: list[mx.array] | None = None
        self.offset = 0
        self.head_dim = 0  # keys'
        self.value_dim = 0

    # -- mlx-lm cache protocol -------------------------------------------------
    def update_and_fetch(self, keys: mx.array, values: mx.array):
        dk, dv = keys.shape[-1], values.shape[-1]
        if self.codes is None:
            mlx_codec.check(dk, dv)
            self.head_dim, self.value_dim = dk, dv
        elif (dk, dv) != (self.head_dim, self.value_dim):
            raise BadInput(f"head_dim changed from {self.head_dim}/{self.value_dim} to "
                           f"{dk}/{dv} within one cache", fix="use one cache per layer")
        new = [*mlx_codec.encode_keys(keys, self.key_bits),
               *mlx_codec.encode_values(values, self.value_bits)]
        prev, n = self.offset, keys.shape[2]
        if self.codes is None or prev + n > self.codes[0].shape[2]:
            grow = (self.step + n - 1) // self.step * self.step
            room = [mx.zeros((*a.shape[:2], grow, a.shape[3]), a.dtype) for a in new]
            self.codes = room if self.codes is None else [
                mx.concatenate([a[..., :prev, :], r], axis=2)
                for a, r in zip(self.codes, room, strict=True)]
        for a, b in zip(self.codes, new, strict=True):
            a[..., prev: prev + n, :] = b
        self.offset += n
        k, v = self.decoded()
        return k.astype(keys.dtype), v.astype(values.dtype)

    def decoded(self) -> tuple[mx.array, mx.array]:
        """float32 keys and values of positions [0, offset), decoded on the device."""
        kp, ks, kz, vp, vs = (a[..., : self.offset, :] for a in self.codes)
        keys = mlx_codec.decode_keys(kp, ks, kz, self.key_bits, self.head_dim)
        values = mlx_codec.decode_values(vp, vs, self.value_bits, self.value_dim,
                                         rotated=self.deferred_fwht)
        return keys, values

    def size(self) -> int:
        return self.offset

    def empty(self) -> bool:
        return self.codes is None

    def is_trimmable(self) -> bool:
        return True

    def trim(self, n: int) -> int:
        n = min(self.offset, n)
        self.offset -= n
        return n

    def make_mask(self, *args, **kwargs):
        return mlx_cache.create_attention_mask(*args, offset=self.offset, **kwargs)

    @property
    def nbytes(self) -> int:
        """Bytes of the codes of the cached tokens (the room grown ahead excluded)."""
        return 0 if self.codes is None else sum(a[..., : self.offset, :].nbytes
                                                for a in self.codes)

    @property
    def state(self):
        """The five code arrays up to offset, then the scalars mlx-lm's prompt-cache
        writer stores as such: key_bits, value_bits, offset, head_dim, deferred,
        value_dim."""
        meta = [self.key_bits, self.value_bits, self.offset, self.head_dim,
                int(self.deferred_fwht), self.value_dim]
        arrays = [] if self.codes is None else [a[..., : self.offset, :] for a in self.codes]
        return [*arrays, *meta]

    @state.setter
    def state(self, v):
        v = list(v)
        n_meta = 6 if len(v) in (6, 11) else 5  # files written before value_dim: 5
        arrays, meta = v[:-n_meta], v[-n_meta:]
        self.codes = arrays or None
        self.key_bits, self.value_bits, self.offset, self.head_dim = map(int, meta[:4])
        self.deferred_fwht = bool(int(meta[4]))
        self.value_dim = int(meta[5]) if n_meta == 6 else self.head_dim


def fold_inverse_fwht(model, head_dim: int) -> None:
    """o_proj ← o_proj · blockdiag(diag(signs) · H / √d), in place: attention over
    rotated-domain values then lands in the original basis after o_proj.
    Valid only where o_proj reads the attention output directly (no elementwise
    gate between them) and o_proj is a plain (unquantized) Linear."""
    import mlx.nn as nn

    d = head_dim
    h = np.asarray(codec.fwht(torch.eye(d, dtype=torch.float64)).numpy()) / np.sqrt(d)
    m = mx.array((codec.tables.signs(d).astype(np.float64)[:, None] * h).astype(np.float32))
    for layer in model.layers:
        attn = getattr(layer, "self_attn", None)
        o = getattr(attn, "o_proj", None)
        if o is None or type(o) is not nn.Linear or getattr(attn, "gate_proj", None) is not None:
            raise ValueError("this model does not allow the deferred inverse FWHT "
                             "(o_proj is quantized, gated or missing)")
        w = o.weight
        blocks = w.reshape(w.shape[0], -1, d).astype(mx.float32)
        o.weight = (blocks @ m).reshape(w.shape).astype(w.dtype)


def attention_head_dim(model) -> int:
    """The head_dim of the model's attention layers (mlx-lm model or its args)."""
    for layer in getattr(model, "layers", []):
        attn = getattr(layer, "self_attn", None)
        if getattr(attn, "head_dim", None):
            return int(attn.head_dim)
    args = model.args
    return int(getattr(args, "head_dim", None) or args.hidden_size // args.num_attention_heads)


def make_cache(model, scheme: str = "k8v3", deferred_fwht: bool = False) -> list:
    """One cache per layer: TurboQuant where the layer keeps full attention,
    mlx-lm's own cache (bf16) for sliding-window and non-attention layers.
    `deferred_fwht` also folds the inverse FWHT into the model's o_proj (in place)."""
    kb, vb = parse_scheme(scheme)
    base = mlx_cache.make_prompt_cache(model)
    if deferred_fwht:
        if any(type(c) is not mlx_cache.KVCache for c in base):
            raise ValueError("the deferred inverse FWHT needs every layer on a TurboQuant "
                             "cache (this model has sliding-window or recurrent layers)")
        fold_inverse_fwht(model, attention_head_dim(model))
    if any(type(c) is mlx_cache.KVCache for c in base):
        codec.check_head_dim(attention_head_dim(model))  # before any token is generated
    out, kept = [], 0
    for c in base:
        if type(c) is mlx_cache.KVCache:
            out.append(TurboQuantKVCache(kb, vb, deferred_fwht))
        else:
            out.append(c)
            kept += 1
    if kept:
        warnings.warn(f"{kept} layer cache(s) (sliding-window or recurrent) stay in bf16",
                      stacklevel=2)
    return out


def save_prompt_cache(path: str, caches: list, metadata: dict | None = None) -> None:
    """mlx-lm's own prompt-cache writer: the file is mlx-lm's format."""
    mlx_cache.save_prompt_cache(path, caches, metadata)


def load_prompt_cache(path: str, return_metadata: bool = False):
    """mlx-lm's prompt-cache reader, with TurboQuantKVCache among the classes it
    can rebuild (stock `load_prompt_cache` looks names up in its own module)."""
    from mlx.utils import tree_unflatten

    arrays, flat_meta = mx.load(path, return_metadata=True)
    metadata, classes, scalars = tree_unflatten(list(flat_meta.items()))
    for pos, kind in scalars[1:]:
        a = arrays[pos]
        arrays[pos] = {"scalar": lambda x: x.item(), "none": lambda x: None,
                       "string": lambda x: "".join(chr(i) for i in x.tolist())}[kind](a)
    states = tree_unflatten(list(arrays.items()))
    known = {**vars(mlx_cache), "TurboQuantKVCache": TurboQuantKVCache}
    caches = [known[c].from_state(st) for c, st in zip(classes, states, strict=True)]
    return (caches, metadata) if return_metadata else caches


def generate(model, tokenizer, prompt, scheme: str = "k8v3", **kwargs) -> str:
    """mlx-lm's `generate` with a TurboQuant prompt cache."""
    from mlx_lm import generate as mlx_generate

    return mlx_generate(model, tokenizer, prompt, prompt_cache=make_cache(model, scheme),
                        **kwargs)
