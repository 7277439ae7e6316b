"""Self-generated calibration sampled one layer at a time (calib_stream) gives
the whole-model sampler's tokens, for plain, sliding-window, hybrid linear-
attention and MoE families; the default samples the whole batch with one cache."""

from __future__ import annotations

import numpy as np
import pytest
from tiny import make_model, reload_source, save_bf16

from tqbuild.recipe import CalibrateParams
from tqbuild.stages.calib_data import self_generated
from tqbuild.stages.calib_stream import self_generated_streamed


def _whole(src, p: CalibrateParams) -> np.ndarray:
    m = reload_source(src)
    bos = m.config.bos_token_id
    return self_generated(m, p, bos[0] if isinstance(bos, list) else bos, m.config.vocab_size)


@pytest.mark.parametrize("family", ["llama", "gemma3_text", "qwen3_5_text", "qwen3_moe"])
def test_streamed_sampling_gives_the_whole_model_tokens(tmp_path, family):
    src = save_bf16(make_model(family), tmp_path / "src")
    p = CalibrateParams(samples=6, seq_len=24, seed=3, batch_size=4)
    whole = _whole(src, p)
    # no layer resident (every token re-reads every layer) and all resident: same tokens
    for resident in (0, 1 << 30):
        got = self_generated_streamed(src, p, resident_bytes=resident)
        assert got.shape == (6, 24) and got.dtype == np.int32
        assert np.array_equal(got, whole)


def test_default_batch_is_all_samples(tmp_path):
    src = save_bf16(make_model("llama"), tmp_path / "src")
    p = CalibrateParams(samples=5, seq_len=12, seed=1)
    assert p.batch_size is None
    one = _whole(src, p)
    assert np.array_equal(one, _whole(src, p.model_copy(update={"batch_size": 5})))
    assert np.array_equal(one, self_generated_streamed(src, p))
