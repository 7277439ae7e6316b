"""runtime/gqa_attention.py: "tq_sdpa" gives sdpa's logits (prefill and one-token
decode, static cache, padding) and its one-token path runs attention on the
key/value heads without repeat_kv."""

from __future__ import annotations

import pytest
import torch

from tqbuild.runtime import gqa_attention

transformers = pytest.importorskip("transformers")


def _model(heads: int = 8, kv: int = 2, model_type: str = "llama"):
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(model_type, hidden_size=64, intermediate_size=96,
                               num_hidden_layers=2, num_attention_heads=heads,
                               num_key_value_heads=kv, head_dim=16, vocab_size=97,
                               max_position_embeddings=64,
                               **({"query_pre_attn_scalar": 64, "sliding_window": 4}
                                  if model_type == "gemma3_text" else {}))
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg).eval()


def _decode(model, ids: torch.Tensor, mask: torch.Tensor | None, steps: int = 4) -> torch.Tensor:
    """Prefill, then `steps` greedy tokens one at a time on a static cache: the
    logits of every step [steps + 1, B, vocab]."""
    from transformers import StaticCache

    B, n = ids.shape
    cache = StaticCache(config=model.config, max_cache_len=n + steps + 1)
    out, logits = [], None
    with torch.no_grad():
        pos = torch.arange(n, device=ids.device)
        am = mask
        for _ in range(steps + 1):
            logits = model(ids, attention_mask=am, past_key_values=cache, cache_position=pos,
                           use_cache=True).logits[:, -1]
            out.append(logits)
            ids = logits.argmax(-1, keepdim=True)
            if am is not None:
                am = torch.cat([am, am.new_ones(B, 1)], 1)
            pos = pos[-1:] + 1
    return torch.stack(out)


@pytest.mark.parametrize("model_type", ["llama", "qwen3", "gemma3_text"])  # gemma3: scaling ≠ D^-½
@pytest.mark.parametrize("padded", [False, True])
def test_same_logits_as_sdpa(model_type, padded):
    model = _model(model_type=model_type)
    ids = torch.randint(1, 97, (2, 6), generator=torch.Generator().manual_seed(1))
    mask = None
    if padded:  # the first row left-padded by two
        mask = torch.ones(2, 6, dtype=torch.long)
        mask[0, :2] = 0
    want = _decode(model, ids, mask)
    assert gqa_attention.use_gqa_attention(model)
    assert model.config._attn_implementation == gqa_attention.NAME
    got = _decode(model, ids, mask)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)


def test_one_token_attends_on_the_key_value_heads(monkeypatch):
    model = _model(heads=8, kv=2)
    gqa_attention.use_gqa_attention(model)
    seen = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, *a, **kw):
        seen.append((tuple(q.shape), tuple(k.shape)))
        return sdpa(q, k, v, *a, **kw)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    _decode(model, torch.tensor([[5, 6, 7]]), None, steps=2)
    # prefill: transformers' sdpa (all query heads); each token after it: 2 kv heads × 4 rows
    assert seen[0][0] == (1, 8, 3, 16) and len(seen) == 3 * 2
    assert all(q == (1, 2, 4, 16) and k[1] == 2 for q, k in seen[2:])


def test_models_kept_on_sdpa(monkeypatch):
    assert not gqa_attention.use_gqa_attention(_model(heads=4, kv=4))  # no grouped heads
    eager = _model()
    eager.config._attn_implementation = "eager"
    assert not gqa_attention.use_gqa_attention(eager)
    monkeypatch.setenv("TQBUILD_GQA_ATTN", "0")
    model = _model()
    assert not gqa_attention.use_gqa_attention(model)
    assert model.config._attn_implementation == "sdpa"
