"""TurboQuant KV cache for mlx-lm: appended tokens are encoded (keys affine per
32-group, values FWHT + Lloyd-Max), only the codes are kept, and every fetch
returns keys/values decoded from them. Sliding-window layers keep mlx-lm's own
bf16 rotating cache (with a warning). Prompt caches are saved and restored in
mlx-lm's file format through this module's functions (stock
`load_prompt_cache` only knows mlx-lm's classes)."""

from __future__ import annotations

import re
import warnings

import mlx.core as mx
import numpy as np
import torch
from mlx_lm.models import cache as mlx_cache

from . import codec

SCHEME = re.compile(r"k(\d)v(\d)$")


def parse_scheme(scheme: str) -> tuple[int, int]:
    m = SCHEME.match(scheme)
    if not m:
        raise ValueError(f"scheme {scheme!r} is not like 'k8v3'")
    return int(m.group(1)), int(m.group(2))


class TurboQuantKVCache(mlx_cache._BaseCache):
    """Codes per layer, [B, H, T, ·] mx arrays: packed keys (int8 indices at 8
    bits), key scales/zeros (fp16), packed values, value scales (fp16)."""

    def __init__(self, key_bits: int = 8, value_bits: int = 3, deferred_fwht: bool = False):
        self.key_bits, self.value_bits = key_bits, value_bits
        # deferred: values come back in the rotated domain (centroid · scale); the
        # inverse FWHT and signs are folded into o_proj once (fold_inverse_fwht)
        self.deferred_fwht = deferred_fwht
        self.codes: list[mx.array] | None = None
        self.offset = 0
        self.head_dim = 0

    # -- mlx-lm cache protocol -------------------------------------------------
    def update_and_fetch(self, keys: mx.array, values: mx.array):
        dtype = keys.dtype
        k = np.array(keys.astype(mx.float32))
        v = np.array(values.astype(mx.float32))
        self.head_dim = k.shape[-1]
        kc = codec.encode_keys(k, self.key_bits, torch.float16)
        vc = codec.encode_values(v, self.value_bits, torch.float16)
        new = [mx.array(a) for a in (kc.packed, kc.scales, kc.zeros, vc.packed, vc.scales)]
        if self.codes is None:
            self.codes = new
        else:
            self.codes = [mx.concatenate([a[..., : self.offset, :], b], axis=2)
                          for a, b in zip(self.codes, new, strict=True)]
        self.offset += k.shape[2]
        dk, dv = self.decoded()
        return mx.array(dk).astype(dtype), mx.array(dv).astype(dtype)

    def decoded(self) -> tuple[np.ndarray, np.ndarray]:
        kp, ks, kz, vp, vs = (np.array(a[..., : self.offset, :]) for a in self.codes)
        d = self.head_dim
        kidx = kp if self.key_bits == 8 else codec.unpack_bits(kp, self.key_bits, d)
        keys = codec.decode_keys(codec.KeyCode(kidx, ks, kz, kp, self.key_bits))
        vidx = codec.unpack_bits(vp, self.value_bits, d)
        vcode = codec.ValueCode(vidx, vs, vp, self.value_bits)
        values = (codec.decode_values_rotated(vcode) if self.deferred_fwht
                  else codec.decode_values(vcode))
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
        if self.codes is not None:
            self.codes = [a[..., : self.offset, :] for a in self.codes]
        return n

    def make_mask(self, *args, **kwargs):
        return mlx_cache.create_attention_mask(*args, offset=self.offset, **kwargs)

    @property
    def nbytes(self) -> int:
        return 0 if self.codes is None else sum(a[..., : self.offset, :].nbytes
                                                for a in self.codes)

    @property
    def state(self):
        """The five code arrays, then the scalars mlx-lm's prompt-cache writer
        stores as such: key_bits, value_bits, offset, head_dim, deferred."""
        meta = [self.key_bits, self.value_bits, self.offset, self.head_dim,
                int(self.deferred_fwht)]
        return [*(self.codes or []), *meta]

    @state.setter
    def state(self, v):
        v = list(v)
        arrays, meta = v[:-5], v[-5:]
        self.codes = arrays or None
        self.key_bits, self.value_bits, self.offset, self.head_dim = map(int, meta[:4])
        self.deferred_fwht = bool(int(meta[4]))


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
        fold_inverse_fwht(model, model.layers[0].self_attn.head_dim
                          if hasattr(model.layers[0].self_attn, "head_dim")
                          else model.args.head_dim)
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
