"""transformers' `AutoModelForCausalLM.from_pretrained` on tq-build artifacts
(registered quantizer): packed trellis and affine modules, the torch loader's
logits, generate."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from cli_run import cli
from conftest import write_recipe

import tqbuild  # noqa: F401  (registers the quantizer)
from tqbuild.runtime.affine_torch import AffineEmbedding, AffineLinear, unpack_torch
from tqbuild.runtime.torch_load import load_torch
from tqbuild.runtime.trellis_torch import TrellisLinear

RULES = [{"match": r"mlp\.(gate|up)_proj$", "format": "trellis", "bits": 3,
          "trellis": {"T": 64}},
         {"match": r"mlp\.down_proj$", "format": "trellis", "bits": 2,
          "trellis": {"T": 32, "interleave": True}},
         {"match": "embed_tokens", "bits": 8}]


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory, tiny_source):
    out = {}
    for name, rules in [("trellis", RULES), ("affine", RULES[2:])]:
        d = tmp_path_factory.mktemp(name)
        write_recipe(d / "r.yaml", name=name, source=tiny_source(), output=d / "out", stages=[
            "untie", "norm_fold", "rotate",
            {"quantize": {"default": {"bits": 4, "group_size": 32}, "rules": rules}}],
            allow=["rotated-rtn4"])  # the affine one is the seed's refused arm: fine here
        p = cli(d, d / "r.yaml", "--no-lock", "--workdir", d / "w")
        assert p.returncode == 0, p.stderr[-2000:]
        out[name] = d / "out"
    return out


@pytest.mark.parametrize("kind", ["trellis", "affine"])
def test_from_pretrained_gives_the_torch_loaders_logits(artifacts, kind):
    from transformers import AutoModelForCausalLM

    path = artifacts[kind]
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    mods = dict(model.named_modules())
    assert isinstance(mods["model.layers.0.self_attn.q_proj"], AffineLinear)
    assert isinstance(mods["model.embed_tokens"], AffineEmbedding)
    assert isinstance(mods["model.layers.0.mlp.down_proj"],
                      TrellisLinear if kind == "trellis" else AffineLinear)
    assert not any(p.dtype.is_floating_point and p.ndim == 2 and p.shape[-1] >= 64
                   for n, p in model.named_parameters() if "proj" in n)  # no dense copies
    ids = torch.arange(3, 27)[None]
    with torch.no_grad():
        got = model(ids).logits[0].double()
        ref = load_torch(path)(ids).logits[0].double()
    assert torch.allclose(got, ref, atol=1e-4, rtol=1e-4), float((got - ref).abs().max())
    out = model.generate(ids[:, :4], max_new_tokens=5, do_sample=False)
    assert out.shape == (1, 9)


def test_from_pretrained_works_in_a_fresh_process_after_import_tqbuild(artifacts):
    code = ("import tqbuild, torch\nfrom transformers import AutoModelForCausalLM\n"
            f"m = AutoModelForCausalLM.from_pretrained({str(artifacts['trellis'])!r})\n"
            "print(type(m.model.layers[0].mlp.gate_proj).__name__)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "TrellisLinear"


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
def test_unpack_torch_is_the_numpy_unpack(bits):
    from tqbuild.formats.mlx_affine import pack, unpack

    q = np.random.default_rng(bits).integers(0, 1 << bits, (5, 128)).astype(np.uint32)
    words = pack(q, bits)
    assert np.array_equal(unpack(words, bits), q)
    got = unpack_torch(torch.from_numpy(words.view(np.int32)), bits).numpy()
    assert np.array_equal(got, q)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_from_pretrained_on_cuda_decodes_with_the_triton_kernels(artifacts, monkeypatch):
    from transformers import AutoModelForCausalLM

    from tqbuild.runtime import trellis_torch, trellis_triton

    calls = []
    for mod, name in ((trellis_triton, "matvec"), (trellis_torch, "matvec_triton")):
        if hasattr(mod, name):
            real = getattr(mod, name)
            monkeypatch.setattr(mod, name, lambda *a, _r=real, **k: calls.append(1) or _r(*a, **k))
    path = artifacts["trellis"]
    cpu = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    gpu = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval().to("cuda")
    for ids in (torch.arange(3, 27)[None], torch.tensor([[7]])):  # prefill, then M = 1
        with torch.no_grad():
            ref = cpu(ids).logits
            got = gpu(ids.cuda()).logits.cpu()
        assert torch.allclose(got, ref, atol=1e-3, rtol=1e-3), float((got - ref).abs().max())
    assert calls  # the M = 1 forward went through the Triton decode-matvec kernels
    out = gpu.generate(torch.tensor([[5, 6, 7]]).cuda(), max_new_tokens=6, do_sample=False)
    assert out.shape == (1, 9)


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
def test_pack_torch_is_the_numpy_pack(bits):
    """The build packs affine q where it was computed (the GPU on a GPU build):
    the same words as the numpy packer, every width, stacked leading dims."""
    from tqbuild.formats.mlx_affine import pack, pack_torch

    q = np.random.default_rng(bits + 50).integers(0, 1 << bits, (2, 3, 192))
    want = pack(q, bits)
    got = pack_torch(torch.from_numpy(q), bits)
    assert got.dtype == np.uint32 and got.shape == want.shape
    assert np.array_equal(got, want)
    if torch.cuda.is_available():
        assert np.array_equal(pack_torch(torch.from_numpy(q).cuda(), bits), want)
