"""Self-generated calibration sampled one layer at a time (calib_stream) gives
the whole-model sampler's tokens, for plain, sliding-window, hybrid linear-
attention and MoE families; the default samples the whole batch with one cache."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny import make_model, reload_source, save_bf16

from tqbuild.recipe import CalibrateParams
from tqbuild.stages.calib_data import self_generated
from tqbuild.stages.calib_stream import self_generated_streamed
from tqbuild.stages.sampling import draw


def _whole(src, p: CalibrateParams) -> np.ndarray:
    m = reload_source(src)
    bos = m.config.bos_token_id
    return self_generated(m, p, bos[0] if isinstance(bos, list) else bos, m.config.vocab_size)


@pytest.mark.parametrize("family", ["llama", "gemma3_text", "qwen3_5_text", "qwen3_moe"])
def test_streamed_sampling_gives_the_whole_model_tokens(tmp_path, family):
    src = save_bf16(make_model(family), tmp_path / "src")
    p = CalibrateParams(samples=6, seq_len=24, seed=3, batch_size=4)  # two batches
    whole = _whole(src, p)
    # no layer resident (every token re-reads every layer) and all resident: same tokens
    for resident in (0, 1 << 30):
        got = self_generated_streamed(src, p, resident_bytes=resident)
        assert got.shape == (6, 24) and got.dtype == np.int32
        assert np.array_equal(got, whole)


@pytest.mark.parametrize("version", [1, 2])
def test_default_batch_is_all_samples_in_version_2(tmp_path, version):
    src = save_bf16(make_model("llama"), tmp_path / "src")
    p = CalibrateParams(samples=18, seq_len=10, seed=1, version=version)
    assert p.batch == (16 if version == 1 else 18)
    one = _whole(src, p)
    assert np.array_equal(one, _whole(src, p.model_copy(update={"batch_size": p.batch})))
    assert np.array_equal(one, self_generated_streamed(src, p))


@pytest.mark.parametrize("version", [1, 2])
def test_whole_model_sampler_uses_its_cache(tmp_path, version):
    """The incremental sampler's tokens equal a cache-free reference that re-runs
    every sequence's whole prefix each step — with the cache passed under a name
    the installed transformers ignores, every step would see one token."""
    from tqbuild.stages.sampling import sample_tokens

    src = save_bf16(make_model("llama"), tmp_path / "src")
    p = CalibrateParams(samples=3, seq_len=12, seed=2, version=version)
    m = reload_source(src)
    prefix: list[torch.Tensor] = []

    def no_cache(cache, ids, t):
        prefix.append(ids)
        with torch.no_grad():
            return m(input_ids=torch.cat(prefix, 1), use_cache=False).logits[:, -1]

    bos = m.config.bos_token_id
    ref = sample_tokens(p, bos[0] if isinstance(bos, list) else bos, m.config.vocab_size,
                        prefix.clear, no_cache)
    assert np.array_equal(_whole(src, p), ref)


def test_cache_keyword_follows_the_forward_signature():
    from tqbuild.stages.hf_cache import cache_kwargs

    class Old:
        def forward(self, input_ids=None, past_key_values=None, use_cache=None):
            pass

    class New:
        def forward(self, input_ids=None, cache=None, use_cache=None):
            pass

    assert cache_kwargs(Old(), 1) == {"past_key_values": 1}
    assert cache_kwargs(New(), 1) == {"cache": 1}


def test_version_1_keeps_the_first_release_cache_key():
    """The first release keyed cached tokens by this dict; locked artifacts built
    from them stay valid only if version 1 keys the same way."""
    p = CalibrateParams(samples=128, seq_len=256, version=1)
    assert p.identity() == {"source": p.source.model_dump(), "samples": 128, "seq_len": 256,
                            "seed": 0, "batch_size": 16, "temperature": 1.0}
    assert "version" in CalibrateParams(samples=128).identity()
    assert CalibrateParams(stream=True).identity()["stream"] is True


def test_inverse_cdf_draws_follow_the_distribution():
    logits = torch.log(torch.tensor([[0.5, 0.0, 0.3, 0.2]] * 40000))
    got = draw(logits, CalibrateParams(), torch.Generator().manual_seed(0))[:, 0]
    freq = torch.bincount(got, minlength=4).double() / got.numel()
    assert freq[1] == 0  # a zero-probability token is never drawn
    assert torch.allclose(freq, torch.tensor([0.5, 0.0, 0.3, 0.2], dtype=torch.float64),
                          atol=0.01)
