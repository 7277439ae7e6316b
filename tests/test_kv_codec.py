"""TurboQuant KV codec: bit-exact goldens, FWHT, Lloyd-Max MSE, production mode."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_run import cli

from tqbuild.errors import BadInput
from tqbuild.kv import codec, tables
from tqbuild.kv.goldens import check_file


def golden_files(goldens):
    files = sorted((goldens / "turboquant").glob("*.npz"))
    assert len(files) >= 4
    return files


def test_check_goldens_cli_passes_on_every_shared_file(goldens):
    p = cli(Path.cwd(), "kv", "check-goldens", *golden_files(goldens))
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count(", ok") == len(golden_files(goldens))


def test_every_golden_array_is_compared(goldens):
    for f in golden_files(goldens):
        rep = check_file(f)
        assert rep.mismatches == [] and rep.checked > 10, (f, rep)


def test_a_flipped_bit_is_caught(goldens, tmp_path):
    src = goldens / "turboquant" / "tq_float16_d64.npz"
    with np.load(src) as z:
        arrays = {k: z[k].copy() for k in z.files}
    arrays["k4_v3__value_packed"].reshape(-1)[7] ^= 0x10
    np.savez(tmp_path / "tq_float16_d64.npz", **arrays)
    p = cli(tmp_path, "kv", "check-goldens", tmp_path / "tq_float16_d64.npz")
    assert p.returncode == 3 and "k4_v3__value_packed" in p.stdout
    assert "Traceback" not in p.stderr


def test_bf16_inputs_take_the_bf16_path(goldens, tmp_path):
    """A bf16 golden set (same format) is recognised by its dtype and re-encoded
    with bf16 arithmetic: our own bf16 encodings round-trip through the checker."""
    shutil.copy(goldens / "turboquant" / "tq_float16_d64.npz", tmp_path / "x.npz")
    rng = np.random.default_rng(7)
    K = torch.from_numpy(rng.standard_normal((3, 2, 64)).astype(np.float32)).bfloat16()
    V = torch.from_numpy(rng.standard_normal((3, 2, 64)).astype(np.float32)).bfloat16()
    arrays = {"K_input": K.float().numpy(), "V_input": V.float().numpy(),
              "K_input_bits": K.view(torch.int16).numpy().view(np.uint16),
              "V_input_bits": V.view(torch.int16).numpy().view(np.uint16)}
    kc = codec.encode_keys(arrays["K_input"], 8, torch.bfloat16, "reference")
    vc = codec.encode_values(arrays["V_input"], 3, torch.bfloat16, "reference")
    arrays.update({"k8_v3__key_indices": kc.indices, "k8_v3__key_scales": kc.scales,
                   "k8_v3__value_packed": vc.packed, "V_fwht_rotated": vc.rotated})
    np.savez(tmp_path / "tq_bfloat16_d64.npz", **arrays)
    rep = check_file(tmp_path / "tq_bfloat16_d64.npz")
    assert rep.mismatches == [] and rep.checked == 4
    fp16 = codec.encode_values(arrays["V_input"], 3, torch.float16, "reference")
    assert not np.array_equal(fp16.rotated, vc.rotated)  # the dtype path matters


@pytest.mark.parametrize("d", tables.HEAD_DIMS)
def test_fwht_orthogonal_and_involution(d):
    x = torch.randn(5, d, dtype=torch.float64)
    y = codec.fwht(x) / np.sqrt(d)
    assert torch.allclose(y.norm(dim=-1), x.norm(dim=-1))
    assert torch.allclose(codec.fwht(y) / np.sqrt(d), x)


def test_three_bit_roundtrip_mse_is_lloyd_max():
    rng = np.random.default_rng(0)
    v = rng.standard_normal((4096, 128)).astype(np.float32)
    c = codec.encode_values(v, 3, torch.float32)
    mse = float(np.mean((codec.decode_values(c) - v) ** 2))
    assert 0.030 < mse < 0.040, mse  # Lloyd-Max 3-bit on N(0,1): 0.0345


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 8])
def test_pack_roundtrip(bits):
    idx = np.random.default_rng(bits).integers(0, 1 << bits, (3, 7, 128)).astype(np.uint8)
    assert np.array_equal(codec.unpack_bits(codec.pack_bits(idx, bits), bits, 128), idx)


def test_production_mode_has_no_nan_on_constant_groups():
    k = np.zeros((1, 1, 128), np.float32)
    k[..., 32:64] = 0.75
    k[..., 64:96] = np.linspace(-1, 1, 32)
    ref = codec.decode_keys(codec.encode_keys(k, 8, torch.float16, "reference"), "reference")
    assert np.isnan(ref[..., :64]).all()  # the reference's quirk
    prod = codec.decode_keys(codec.encode_keys(k, 8, torch.float16))
    assert np.isfinite(prod).all()
    assert np.array_equal(prod[..., :64], k[..., :64])
    assert np.abs(prod - k).max() < 0.01


def test_unsupported_head_dim_is_refused():
    with pytest.raises(BadInput, match="head_dim 96"):
        codec.encode_values(np.zeros((1, 96), np.float32), 3, torch.float16)


def test_k8v3_bytes_per_token_per_head_d128():
    x = np.random.default_rng(1).standard_normal((1, 128)).astype(np.float32)
    kc = codec.encode_keys(x, 8, torch.float16)
    vc = codec.encode_values(x, 3, torch.float16)
    total = sum(a.nbytes for a in (kc.packed, kc.scales, kc.zeros, vc.packed, vc.scales))
    assert total == 200 and 128 * 2 * 2 / total == pytest.approx(2.56)
