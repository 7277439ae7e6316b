"""The MLX runtime: TrellisLinear decodes exactly as the numpy reference, and a
trellis artifact loads into mlx-lm (affine modules by mlx-lm itself), gives the
torch loader's logits and generates."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from cli_run import cli
from conftest import write_recipe

from tqbuild.formats import trellis as fmt
from tqbuild.kernels.viterbi import viterbi_tailbiting

mx = pytest.importorskip("mlx.core")


@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("interleave", [False, True])
def test_trellis_linear_decode_is_the_reference(k, axis, interleave):
    from tqbuild.runtime.mlx import TrellisLinear

    rng = np.random.default_rng(k * 7 + axis * 3 + interleave)
    rows, T, nb = 24, 64, 4
    states = viterbi_tailbiting(torch.from_numpy(rng.standard_normal(
        (rows * nb, T)).astype(np.float32)), 12, k).numpy().reshape(rows, nb * T)
    words = fmt.pack(states, k, T)
    if interleave:
        words = fmt.interleave(words, k, T)
    scales = (rng.random(rows) + 0.5).astype(np.float16)
    ref = fmt.decode(words, scales, k=k, T=T, L=12, code="1mad", axis=axis,
                     interleaved=interleave)
    lin = TrellisLinear(mx.array(words), mx.array(scales), k=k, T=T, L=12, code="1mad",
                        axis=axis, interleave=interleave)
    got = np.array(lin.decode())
    assert np.array_equal(got, ref)
    dense = TrellisLinear(mx.array(words), mx.array(scales), k=k, T=T, L=12, code="1mad",
                          axis=axis, interleave=interleave, cache_dense=True)
    for m in (1, 3, 8, 9, 40):  # small-M (scales on the activations) and prefill paths
        x = rng.standard_normal((m, ref.shape[1])).astype(np.float32)
        y = np.array(lin(mx.array(x)))
        assert np.allclose(y, x @ ref.T, atol=1e-4, rtol=1e-5)
        if m > 8:  # the prefill path is the dense-cached module's arithmetic
            assert np.array_equal(y, np.array(dense(mx.array(x))))
    assert lin._dense is None and dense._dense is not None  # packed keeps no dense copy


@pytest.mark.parametrize("axis,interleave", [(1, False), (0, True)])
def test_stacked_experts_decode_exactly_and_match_switch_linear(axis, interleave):
    from mlx_lm.models.switch_layers import SwitchLinear

    from tqbuild.runtime.mlx_trellis import TrellisSwitchLinear, decode

    rng = np.random.default_rng(5 + axis)
    E, rows, T, nb, k = 5, 16, 32, 4, 3
    words = np.stack([fmt.pack(rng.integers(0, 1 << 12, (rows, nb * T)), k, T)
                      for _ in range(E)])
    if interleave:
        words = np.stack([fmt.interleave(w, k, T) for w in words])
    scales = (rng.random((E, rows)) + 0.5).astype(np.float16)
    entry = {"bits": k, "group_size": T, "mode": "trellis", "trellis": {
        "L": 12, "code": "1mad", "axis": axis, "interleave": interleave, "version": 1}}
    te = fmt.TrellisEntry.from_config(entry)
    ref = te.decode(words, scales)  # [E, out, in]
    assert np.array_equal(np.array(decode(te, mx.array(words), mx.array(scales))), ref)
    packed = TrellisSwitchLinear(mx.array(words), mx.array(scales), entry)
    dense = SwitchLinear(ref.shape[2], ref.shape[1], E, bias=False)
    dense.weight = mx.array(ref)
    for tokens in (1, 6):  # fewer selected experts than E: only those are decoded
        x = mx.array(rng.standard_normal((tokens, 1, 1, ref.shape[2])).astype(np.float32))
        idx = mx.array(rng.integers(0, E, (tokens, 2)).astype(np.uint32))
        assert np.allclose(np.array(packed(x, idx)), np.array(dense(x, idx)), atol=1e-5)


def test_trellis_artifact_loads_in_mlx_lm_and_generates(tmp_path, tiny_source):
    write_recipe(tmp_path / "r.yaml", name="rt", source=tiny_source(),
                 output=tmp_path / "out", stages=[
                     "untie", "norm_fold", "rotate",
                     {"quantize": {"default": {"bits": 4, "group_size": 32}, "rules": [
                         {"match": r"mlp\.(gate|up)_proj$", "format": "trellis", "bits": 3,
                          "trellis": {"T": 64}},
                         {"match": r"mlp\.down_proj$", "format": "trellis", "bits": 2,
                          "trellis": {"T": 32, "interleave": True}}]}}])
    p = cli(tmp_path, tmp_path / "r.yaml", "--no-lock", "--workdir", tmp_path / "w")
    assert p.returncode == 0, p.stderr[-2000:]
    from mlx_lm.generate import generate_step

    from tqbuild.runtime.mlx import TrellisLinear, load
    from tqbuild.runtime.torch_load import load_torch

    model, tok = load(tmp_path / "out", dtype=mx.float32)
    assert tok is None  # the tiny source has no tokenizer
    assert isinstance(model.model.layers[0].mlp.down_proj, TrellisLinear)
    assert type(model.model.layers[0].self_attn.q_proj).__name__ == "QuantizedLinear"
    ids = np.arange(3, 27)
    got = np.array(model(mx.array(ids)[None])[0])
    with torch.no_grad():
        ref = load_torch(tmp_path / "out")(torch.from_numpy(ids)[None]).logits[0].numpy()
    p_ref = torch.log_softmax(torch.from_numpy(ref).double(), -1)
    p_got = torch.log_softmax(torch.from_numpy(got).double(), -1)
    # trellis weights decode identically; the affine ones differ by one bf16
    # rounding (the torch loader dequantizes in bf16, MLX here in float32)
    assert float((p_ref.exp() * (p_ref - p_got)).sum(-1).mean()) < 1e-3
    # packed: the trellis modules hold their payload and no dense copy after a forward
    from safetensors import safe_open

    from tqbuild.runtime.mlx import resident_bytes

    trellis = {m for m, e in json.loads((tmp_path / "out" / "config.json").read_text())[
        "quantization"].items() if isinstance(e, dict) and e.get("mode") == "trellis"}
    with safe_open(str(tmp_path / "out" / "model.safetensors"), "np") as h:
        payload = sum(h.get_tensor(k).nbytes for k in h.keys()
                      if k.rsplit(".", 1)[0] in trellis)
    res = resident_bytes(model)
    assert res["dense_cache"] == 0 and payload <= res["trellis"] <= 1.1 * payload
    dense, _ = load(tmp_path / "out", dtype=mx.float32, cache_dense=True)
    got_dense = np.array(dense(mx.array(ids)[None])[0])
    assert np.allclose(got_dense, got, atol=1e-4, rtol=1e-4)  # logits equal to the dense path
    assert resident_bytes(dense)["dense_cache"] > 0
    steps = generate_step(mx.array([5, 6, 7]), model, max_tokens=4)
    toks = [int(t) for t, _ in steps]
    assert len(toks) == 4 and toks[0] == int(np.argmax(np.array(model(mx.array([[5, 6, 7]]))
                                                                  [0, -1])))


@pytest.mark.parametrize("code", ["1mad", "3inst"])
def test_code_values_equal_the_table_on_every_state(code):
    from tqbuild.kernels.trellis_codes import code_table
    from tqbuild.runtime.mlx_trellis import code_values

    states = mx.arange(1 << 16, dtype=mx.uint32)
    assert np.array_equal(np.array(code_values(code, 16, states)), code_table(code, 16))
