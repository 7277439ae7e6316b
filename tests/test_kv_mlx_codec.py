"""The MLX TurboQuant codec (kv/mlx_codec.py) equals the reference codec's
production mode bit for bit: fresh random inputs, awkward groups, the goldens'
inputs; and the on-device cache grows in steps without changing a value."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

mx = pytest.importorskip("mlx.core")
from tqbuild.errors import BadInput  # noqa: E402
from tqbuild.kv import codec, mlx_codec  # noqa: E402
from tqbuild.kv.goldens import _input  # noqa: E402
from tqbuild.kv.mlx_cache import TurboQuantKVCache, make_cache  # noqa: E402


def _bits_equal(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def _awkward(rng, shape) -> np.ndarray:
    """Gaussian rows with a constant group, a zero row, huge and tiny magnitudes
    and values sitting on fp16 grid points."""
    x = rng.standard_normal(shape).astype(np.float32)
    x[..., 0, :32] = 1.25  # a constant group
    x[..., 1, :] = 0.0
    x[..., 2, :] *= 1e4
    x[..., 3, :] *= 1e-5
    x[..., 4, :] = np.round(x[..., 4, :] * 8) / 8
    return x


def _check_pair(x: np.ndarray, kb: int, vb: int) -> None:
    d = x.shape[-1]
    kc = codec.encode_keys(x, kb, torch.float16)
    vc = codec.encode_values(x, vb, torch.float16)
    kp, ks, kz = mlx_codec.encode_keys(mx.array(x), kb)
    vp, vs = mlx_codec.encode_values(mx.array(x), vb)
    assert _bits_equal(kp, kc.packed) and _bits_equal(ks, kc.scales)
    assert _bits_equal(kz, kc.zeros)
    assert _bits_equal(vp, vc.packed) and _bits_equal(vs, vc.scales)
    assert _bits_equal(mlx_codec.decode_keys(kp, ks, kz, kb, d), codec.decode_keys(kc))
    assert _bits_equal(mlx_codec.decode_values(vp, vs, vb, d), codec.decode_values(vc))
    assert _bits_equal(mlx_codec.decode_values(vp, vs, vb, d, rotated=True),
                       codec.decode_values_rotated(vc))


@pytest.mark.parametrize("d", [64, 128, 256])
def test_mlx_codec_is_the_codec_bit_for_bit(d):
    rng = np.random.default_rng(d)
    x = _awkward(rng, (2, 3, 9, d))
    for kb, vb in [(8, 3), (8, 4), (4, 3), (2, 2), (5, 5), (8, 8), (4, 2)]:
        _check_pair(x, kb, vb)


@pytest.mark.parametrize("bits", [2, 3, 4, 5])
def test_pack_matches_the_codec_bitstream(bits):
    idx = np.random.default_rng(bits).integers(0, 1 << bits, (3, 128)).astype(np.uint8)
    packed = mlx_codec.pack_bits(mx.array(idx), bits)
    assert _bits_equal(packed, codec.pack_bits(idx, bits))
    assert _bits_equal(mlx_codec.unpack_bits(packed, bits, 128), idx)


def test_mlx_codec_on_the_golden_inputs(goldens):
    for f in sorted((goldens / "turboquant").glob("tq_float16_d*.npz")):
        z = np.load(f)
        k, v = _input(z, "K_input", "float16"), _input(z, "V_input", "float16")
        for kb, vb in [(8, 3), (4, 4), (2, 5), (5, 2), (8, 8)]:
            _check_pair(k, kb, 3)
            _check_pair(v, 8, vb)


def test_cache_grows_in_steps_and_fetches_the_codec_values():
    c = TurboQuantKVCache(4, 3)
    c.step = 4
    rng = np.random.default_rng(3)
    chunks = [rng.standard_normal((1, 2, n, 64)).astype(np.float32) for n in (3, 1, 1, 6, 1)]
    for i, x in enumerate(chunks):
        dk, dv = c.update_and_fetch(mx.array(x), mx.array(-x))
        seen = np.concatenate(chunks[: i + 1], axis=2)
        assert _bits_equal(dk, codec.decode_keys(codec.encode_keys(seen, 4, torch.float16)))
        assert _bits_equal(dv, codec.decode_values(codec.encode_values(-seen, 3,
                                                                        torch.float16)))
    # room: 3 → 4; 5 → 4 + 4; 11 → the 5 used + 8; 12 fits
    assert c.codes[0].shape[2] == 13 and c.offset == 12
    assert c.nbytes == 12 * 2 * (32 + 4 + 4 + 24 + 4)


def test_unsupported_head_dim_is_refused_before_generation(tmp_path):
    from test_kv_cache import tiny_mlx

    model = tiny_mlx(tmp_path, head_dim=48, hidden_size=96)
    with pytest.raises(BadInput, match="head_dim 48"):
        make_cache(model, "k8v3")
    with pytest.raises(BadInput, match="head_dim 48"):
        TurboQuantKVCache().update_and_fetch(mx.zeros((1, 1, 2, 48)), mx.zeros((1, 1, 2, 48)))


def test_no_numpy_or_torch_in_the_step():
    """The step's source names neither numpy nor torch (the codec runs in MLX)."""
    import inspect

    src = inspect.getsource(TurboQuantKVCache) + inspect.getsource(mlx_codec.encode_values)
    assert "np." not in src.replace("np.ndarray", "") and "torch" not in src
    assert Path(mlx_codec.__file__).read_text().count("import torch") == 0


def test_value_scale_where_mlx_sqrt_is_one_ulp_off():
    """A SmolLM2 value vector (layer 18) whose group RMS MLX's CPU sqrt rounds one
    ulp low, enough to flip its fp16 scale: the production mode's Newton square
    root makes both frameworks agree."""
    v = np.load(Path(__file__).parent / "data" / "kv_value_sqrt_edge.npy")[None]
    _check_pair(v, 8, 3)
