"""The folded artifact of every tiny family loads in stock mlx-lm and gives the
source's logits: the artifact layout (prefixes, 1 + w norms, conv1d axis,
stacked experts, untied head) is what mlx-lm expects."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny import FAMILIES, VOCAB, fold_recipe, make_model, reload_source, save_bf16

from tqbuild.eval.metrics import compare, forward_logits
from tqbuild.io.source import Source
from tqbuild.pipeline.executor import BuildOptions, build
from tqbuild.pipeline.graph import compile_plan
from tqbuild.recipe import load

pytest.importorskip("mlx_lm")
HERE = Path(__file__).parent


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_fold_artifact_in_stock_mlx_lm(model_type, tmp_path):
    save_bf16(make_model(model_type), tmp_path / "src")
    ids = torch.randint(0, VOCAB, (64,), generator=torch.Generator().manual_seed(1))
    teacher = forward_logits(reload_source(tmp_path / "src"), ids)
    (tmp_path / "r.yaml").write_text(
        fold_recipe(model_type, tmp_path / "src", tmp_path / "out").replace(
            "  - write\n", "  - write: {dtype: float32}\n"))
    source = Source(tmp_path / "src")
    build(compile_plan(load(tmp_path / "r.yaml"), source), source, tmp_path / "out",
          BuildOptions(progress=False), workdir=tmp_path / "work")
    np.save(tmp_path / "ids.npy", ids.numpy().astype(np.int32))
    p = subprocess.run([sys.executable, str(HERE / "mlx_logits.py"), str(tmp_path / "out"),
                        str(tmp_path / "ids.npy"), str(tmp_path / "logits.npy")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    mlx = torch.from_numpy(np.load(tmp_path / "logits.npy"))
    c = compare(teacher, mlx)
    assert c.mean_kl < 1e-4 and c.decisive_top1_agreement == 1.0, c


def test_affine_pack_unpack_round_trip_every_width():
    import numpy as np

    from tqbuild.formats import mlx_affine

    rng = np.random.default_rng(3)
    for bits in mlx_affine.BITS:
        for n in (32, 64, 96, 576):
            if n * bits % 32:
                continue
            q = rng.integers(0, 1 << bits, (2, 3, n))
            words = mlx_affine.pack(q, bits)
            assert words.shape == (2, 3, n * bits // 32) and words.dtype == np.uint32
            assert np.array_equal(mlx_affine.unpack(words, bits), q)
            # element i at bits [i·b, (i+1)·b) of the row's LSB-first bitstream
            row = int.from_bytes(words[1, 2].astype("<u4").tobytes(), "little")
            assert all((row >> (i * bits)) & ((1 << bits) - 1) == q[1, 2, i] for i in range(n))
