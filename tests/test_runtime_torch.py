"""The PyTorch trellis runtime: torch decode = numpy reference, TrellisLinear on
CPU, the Triton decode-matvec kernels (in Triton's interpreter where Triton is
installed, on CUDA where a GPU is) against the reference, and a packed model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cli_run import cli
from interpreter import run_cases

from tqbuild.formats import trellis as fmt
from tqbuild.kernels.trellis_codes import code_table
from tqbuild.kernels.viterbi import viterbi_tailbiting
from tqbuild.runtime import trellis_torch as tt

CUDA = torch.cuda.is_available()


def packed(k, axis, interleave, rows=16, nb=4, T=64, seed=0):
    rng = np.random.default_rng(seed + 10 * k + axis)
    st = viterbi_tailbiting(torch.from_numpy(rng.standard_normal((rows * nb, T)).astype(
        np.float32)), 12, k).numpy().reshape(rows, nb * T)
    words = fmt.pack(st, k, T)
    if interleave:
        words = fmt.interleave(words, k, T)
    scales = (rng.random(rows) + 0.5).astype(np.float16)
    ref = fmt.decode(words, scales, k=k, T=T, L=12, code="1mad", axis=axis,
                     interleaved=interleave)
    entry = {"bits": k, "group_size": T, "mode": "trellis",
             "trellis": {"L": 12, "code": "1mad", "axis": axis, "interleave": interleave,
                         "version": 1}}
    return torch.from_numpy(words), torch.from_numpy(scales), ref, entry


@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("interleave", [False, True])
def test_torch_decode_and_cpu_linear(k, axis, interleave):
    words, scales, ref, entry = packed(k, axis, interleave)
    lin = tt.TrellisLinear(words, scales, entry)
    assert np.array_equal(lin.weight_f32().numpy(), ref)
    for m in (1, 3, 40):
        x = torch.randn(m, ref.shape[1])
        assert torch.allclose(lin(x), x @ torch.from_numpy(ref).T, atol=1e-4)


def _kernel_cases(device):
    tab = torch.from_numpy(code_table("1mad", 12).copy()).to(device)
    for k in (2, 3, 4):
        for axis in (0, 1):
            words, scales, ref, _ = packed(k, axis, False, rows=48, nb=8, seed=k)
            for m in (1, 2, 3, 4):
                x = torch.randn(m, ref.shape[1], generator=torch.Generator().manual_seed(m))
                y = tt.matvec_triton(x.to(device), words.view(torch.int32).to(device),
                                     scales.to(device), tab, k=k, T=64, L=12, axis=axis,
                                     out_features=ref.shape[0], in_features=ref.shape[1])
                want = x.double() @ torch.from_numpy(ref).double().T
                assert torch.allclose(y.cpu().double(), want, rtol=1e-2, atol=2e-2), (k, axis, m)
    _period_kernel_cases(device)


def _period_kernel_cases(device):
    """The period kernels (trellis_triton) vs the numpy reference decode: both
    codes, L = 12 and 16, T = 64 and 256, k = 1..4, both axes, M = 1..4, ragged
    row counts and column tiles."""
    from tqbuild.runtime import trellis_triton as tk

    rng = np.random.default_rng(7)
    cases = [(c, L, T, k, axis) for c in ("1mad", "3inst") for k in (1, 2, 3, 4)
             for axis in (0, 1) for (L, T) in ((12, 64), (16, 256) if k > 1 else (12, 256))]
    cases += [("mul1", L, T, k, axis) for k in (2, 3) for axis in (0, 1)
              for (L, T) in ((12, 64), (16, 256))]
    for i, (code, L, T, k, axis) in enumerate(cases):
        rows = 37 + 16 * (i % 3)
        nb = 3 if T == 64 else 1
        words = rng.integers(0, 2**32, (rows, nb * T * k // 32), dtype=np.uint32)
        scales = (rng.random(rows) + 0.5).astype(np.float16)
        ref = fmt.decode(words, scales, k=k, T=T, L=L, code=code, axis=axis, interleaved=False)
        m = 1 + i % 4
        x = torch.from_numpy(rng.standard_normal((m, ref.shape[1])).astype(np.float32))
        if i % 2:  # bf16 inputs (the model dtype); the reference takes the same values
            x = x.bfloat16()
        # every block-shape variant: wide x loads or not, prefetch or not
        cfg = ({"splits": 2, "BI": 16, "PF": i % 3 == 0} if axis == 0 else
               {"RB": 3, "NP": 16, "XV": i % 3 != 1, "PF": i % 3 == 2})
        if i % 5 == 4:
            cfg = None  # the defaults TrellisLinear launches
        y = tk.matvec(x.to(device), torch.from_numpy(words.view(np.int32)).to(device),
                      torch.from_numpy(scales).to(device), code=code, k=k, T=T, L=L, axis=axis,
                      out_features=ref.shape[0], in_features=ref.shape[1], cfg=cfg)
        x = x.double().numpy()
        want = x.astype(np.float64) @ ref.astype(np.float64).T
        err = np.abs(y.cpu().double().numpy() - want).max() / np.abs(want).max()
        assert err < 1e-5, (code, L, T, k, axis, m, err)


@pytest.mark.skipif(tt.triton is None, reason="Triton is not installed")
def test_triton_kernels_in_the_interpreter():
    """Triton's interpreter runs the kernels on CPU tensors."""
    run_cases("test_runtime_torch", timeout=900)


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_triton_kernels_on_cuda():
    _kernel_cases("cuda")


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("m", [1, 4, 64])
def test_cuda_linear_every_path_bf16(m):
    for k, axis in ((2, 1), (3, 0), (4, 1)):
        words, scales, ref, entry = packed(k, axis, axis == 0, rows=64, nb=8)
        lin = tt.TrellisLinear(words, scales, entry).cuda()
        x = torch.randn(m, ref.shape[1], device="cuda", dtype=torch.bfloat16)
        w = torch.from_numpy(ref).cuda()
        if m > tt.SMALL_M:  # expanded to the activation dtype: compare with bf16 weights
            w = w.bfloat16().float()
        want = x.float() @ w.T
        # M ≤ 8: int8 activations (runtime/act_int8.py) — an error of ~0.5 % of the
        # outputs' scale, checked exactly against their reference in test_trellis_int8
        atol = 2e-2 * want.abs().max().item() if m <= 8 else 5e-2
        assert torch.allclose(lin(x).float(), want, rtol=2e-2, atol=atol)


@pytest.mark.parametrize("code", ["1mad", "mul1"])
def test_verify_runs_both_runtimes_and_reports_speed(tmp_path, tiny_source, code):
    """A whole artifact through both runtimes; mul1 (format version 2) as well."""
    import json

    from conftest import write_recipe

    write_recipe(tmp_path / "r.yaml", name="vr", source=tiny_source(),
                 output=tmp_path / "out", stages=[
                     "untie", "norm_fold", "rotate",
                     {"quantize": {"default": {"bits": 4, "group_size": 32}, "rules": [
                         {"match": r"mlp\.(gate|up|down)_proj$", "format": "trellis",
                          "bits": 3, "trellis": {"T": 64, "code": code}}]}}])
    def run(*a):
        return cli(tmp_path, *a)
    assert run("r.yaml", "--no-lock").returncode == 0
    p = run("verify", tmp_path / "out")
    assert p.returncode == 0, p.stderr[-2000:]
    info = json.loads(p.stdout.splitlines()[0])
    assert info["runtimes"] == ["torch-cpu", "mlx"] and info["torch_vs_mlx_mean_kl"] < 1e-3
    meta = json.loads((tmp_path / "out" / "optiq_metadata.json").read_text())
    t = meta["modules"]["model.layers.0.mlp.down_proj"]["trellis"]
    assert (t["code"], t["version"]) == (code, 2 if code == "mul1" else 1)
