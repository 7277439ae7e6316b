"""Decode attention for grouped-query models without repeat_kv.

transformers' "sdpa" attention, given a mask (a static KV cache always has one)
and compiled, expands every layer's cached keys and values from the key/value
heads to all query heads (`repeat_kv`: a copy of the cache each token) before
scaled_dot_product_attention. For one query token the same attention is the
key/value heads' own attention over their groups' queries: q [B, H, 1, D] viewed
as [B, H_kv, G, D] (head h = kv head h // G, as repeat_kv orders them), the mask
broadcast over the G rows — no copy, a quarter of the key/value bytes read at
G = 4. "tq_sdpa" is that for one query token and transformers' sdpa otherwise
(prefill, softcapping, sinks, position biases, dropout); masks are sdpa's.
The CUDA loaders switch models on "sdpa" to it; TQBUILD_GQA_ATTN=0 keeps sdpa.
On CUDA the one-token case runs as split-KV flash decoding
(runtime/decode_attention.py; TQBUILD_DECODE_ATTN=0 keeps sdpa there too)."""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

from . import decode_attention

NAME = "tq_sdpa"
_UNSUPPORTED = ("softcap", "s_aux", "position_bias", "output_attentions")


def attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
              value: torch.Tensor, attention_mask: torch.Tensor | None, dropout: float = 0.0,
              scaling: float | None = None, is_causal: bool | None = None, **kwargs):
    """transformers' attention-interface signature: -> (out [B, q_len, H, D], None)."""
    groups = getattr(module, "num_key_value_groups", 1)
    B, H, q_len, D = query.shape
    if groups == 1 or q_len != 1 or dropout or any(kwargs.get(k) for k in _UNSUPPORTED) or \
            key.shape[1] * groups != H:
        return _sdpa_forward()(module, query, key, value, attention_mask, dropout=dropout,
                               scaling=scaling, is_causal=is_causal, **kwargs)
    kv_heads = H // groups
    mask = attention_mask
    if mask is not None and mask.shape[1] != 1:  # a mask per query head: rows as the queries
        mask = mask.reshape(mask.shape[0], kv_heads, groups, mask.shape[-1])
    q = query.reshape(B, kv_heads, groups, D)
    if decode_attention.enabled() and decode_attention.serves(q, key, value, mask):
        out = decode_attention.decode_attention(q, key, value, mask,
                                                D**-0.5 if scaling is None else scaling)
    else:
        out = F.scaled_dot_product_attention(q, key, value, attn_mask=mask, scale=scaling)
    return out.reshape(B, H, 1, value.shape[-1]).transpose(1, 2).contiguous(), None


def _sdpa_forward():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward


def register() -> str:
    """Make "tq_sdpa" a transformers attention implementation (its masks sdpa's)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME


def use_gqa_attention(model: torch.nn.Module) -> bool:
    """Switch a model on transformers' sdpa to "tq_sdpa" (the same attention, one
    query token without repeat_kv); whether it did (not with TQBUILD_GQA_ATTN=0,
    nor for another implementation or a model without grouped heads)."""
    config = getattr(model, "config", None)
    if os.environ.get("TQBUILD_GQA_ATTN", "1") == "0" or config is None or \
            getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads, kv = getattr(text, "num_attention_heads", 0), getattr(text, "num_key_value_heads", 0)
    if not kv or heads == kv:
        return False
    register()
    config._attn_implementation = NAME
    return True
