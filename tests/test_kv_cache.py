"""The TurboQuant cache inside stock mlx-lm models (tiny random ones here; the
real SmolLM2 generation and curve are in test_smollm2 / bench)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

mx = pytest.importorskip("mlx.core")
from mlx_lm.models import cache as mlx_cache  # noqa: E402
from mlx_lm.utils import load_model  # noqa: E402

from tqbuild.kv import codec  # noqa: E402
from tqbuild.kv.mlx_cache import (  # noqa: E402
    TurboQuantKVCache,
    load_prompt_cache,
    make_cache,
    save_prompt_cache,
)


def tiny_mlx(tmp_path: Path, model_type: str = "llama", **extra):
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    sizes = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                 num_attention_heads=2, num_key_value_heads=1, head_dim=64, vocab_size=128)
    cfg = AutoConfig.for_model(model_type, **{**sizes, **extra})
    AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path / "m")
    cfgd = (tmp_path / "m" / "config.json").read_text()
    if "rope_theta" not in cfgd:  # mlx-lm reads a top-level rope_theta
        import json

        c = json.loads(cfgd)
        c["rope_theta"] = 10000.0
        (tmp_path / "m" / "config.json").write_text(json.dumps(c))
    model, _ = load_model(tmp_path / "m")
    model.set_dtype(mx.float32)
    return model


def test_fetch_returns_the_codec_reconstruction(tmp_path):
    c = TurboQuantKVCache(8, 3)
    rng = np.random.default_rng(0)
    k = rng.standard_normal((1, 2, 5, 64)).astype(np.float32)
    v = rng.standard_normal((1, 2, 5, 64)).astype(np.float32)
    dk, dv = c.update_and_fetch(mx.array(k), mx.array(v))
    ref_k = codec.decode_keys(codec.encode_keys(k, 8, torch.float16))
    ref_v = codec.decode_values(codec.encode_values(v, 3, torch.float16))
    assert np.array_equal(np.array(dk), ref_k) and np.array_equal(np.array(dv), ref_v)
    dk2, _ = c.update_and_fetch(mx.array(k[:, :, :2]), mx.array(v[:, :, :2]))
    assert dk2.shape == (1, 2, 7, 64) and c.size() == 7
    assert c.nbytes == 7 * 2 * 100  # k8v3 at d=64: 64 + 4 + 4 + 24 + 4 bytes per token-head
    assert c.trim(3) == 3 and c.size() == 4 and c.nbytes == 4 * 2 * 100


def test_bytes_per_token_per_head_k8v3_d128():
    c = TurboQuantKVCache(8, 3)
    x = mx.array(np.random.default_rng(1).standard_normal((1, 4, 10, 128)).astype(np.float32))
    c.update_and_fetch(x, x)
    assert c.nbytes / (10 * 4) == 200  # vs 512 in bf16: 2.56x smaller


def test_model_runs_and_prompt_cache_roundtrips(tmp_path):
    model = tiny_mlx(tmp_path)
    caches = make_cache(model, "k8v3")
    assert all(isinstance(c, TurboQuantKVCache) for c in caches)
    ids = mx.array([[1, 5, 9, 13, 17, 21, 25, 29]])
    full = model(ids)
    y = model(ids, cache=caches)
    assert np.isfinite(np.array(y)).all()
    assert float(mx.abs(y - full).max()) < 0.5  # quantized, but close
    save_prompt_cache(str(tmp_path / "pc.safetensors"), caches, {"note": "x"})
    restored, meta = load_prompt_cache(str(tmp_path / "pc.safetensors"), return_metadata=True)
    assert meta == {"note": "x"}
    nxt = mx.array([[33]])
    assert mx.array_equal(model(nxt, cache=caches), model(nxt, cache=restored)).item()


def test_sliding_window_layers_stay_bf16_with_a_warning(tmp_path):
    model = tiny_mlx(tmp_path, "gemma3_text", sliding_window=4,
                     layer_types=["sliding_attention", "full_attention"],
                     sliding_window_pattern=2)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        caches = make_cache(model, "k8v3")
    assert any("stay in bf16" in str(x.message) for x in w)
    assert isinstance(caches[0], mlx_cache.RotatingKVCache)
    assert isinstance(caches[1], TurboQuantKVCache)


def test_deferred_inverse_fwht_gives_the_same_logits(tmp_path):
    model = tiny_mlx(tmp_path)
    ids = mx.array([[1, 5, 9, 13, 17, 21, 25, 29]])
    plain = model(ids, cache=make_cache(model, "k8v3"))
    deferred_caches = make_cache(model, "k8v3", deferred_fwht=True)  # folds into o_proj
    assert deferred_caches[0].deferred_fwht
    deferred = model(ids, cache=deferred_caches)
    assert float(mx.abs(plain - deferred).max()) < 1e-4


def test_deferred_refused_where_sliding_layers_exist(tmp_path):
    model = tiny_mlx(tmp_path, "gemma3_text", sliding_window=4,
                     layer_types=["sliding_attention", "full_attention"],
                     sliding_window_pattern=2)
    with pytest.raises(ValueError, match="deferred"):
        make_cache(model, "k8v3", deferred_fwht=True)
