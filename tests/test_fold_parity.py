"""Fold parity on a tiny random model of every family: the folded model (no
quantization) gives the source's logits; deliberately wrong folds are caught."""

from __future__ import annotations

import json

import pytest
import torch
from tiny import (
    FAMILIES,
    NO_R1,
    VOCAB,
    ZERO_CENTRED,
    fold_recipe,
    make_model,
    reload_source,
    save_bf16,
)

from tqbuild.eval.metrics import compare, forward_logits
from tqbuild.io.source import Source
from tqbuild.pipeline.executor import BuildOptions, build
from tqbuild.pipeline.graph import compile_plan
from tqbuild.recipe import load
from tqbuild.runtime.torch_load import load_torch
from tqbuild.stages import norm_fold, rotate

TOKENS = 512
RESULTS: dict[str, dict] = {}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    mt = request.param
    d = tmp_path_factory.mktemp(mt)
    save_bf16(make_model(mt), d / "src")
    ids = torch.randint(0, VOCAB, (TOKENS,), generator=torch.Generator().manual_seed(0))
    teacher = forward_logits(reload_source(d / "src"), ids, 128)
    return mt, d, ids, teacher


def fold_and_compare(mt, d, ids, teacher, dtype: str, tag: str):
    text = fold_recipe(mt, d / "src", d / f"out-{tag}").replace(
        "  - write\n", f"  - write: {{dtype: {dtype}}}\n")
    (d / f"{tag}.yaml").write_text(text)
    recipe = load(d / f"{tag}.yaml")
    source = Source(d / "src")
    build(compile_plan(recipe, source), source, d / f"out-{tag}",
          BuildOptions(progress=False, force=True), workdir=d / "work")
    return compare(teacher, forward_logits(load_torch(d / f"out-{tag}"), ids, 128))


def test_fold_exact_in_float32(family):
    mt, d, ids, teacher = family
    c = fold_and_compare(mt, d, ids, teacher, "float32", "f32")
    assert c.mean_kl < 1e-9 and c.top1_agreement == 1.0, c


def test_fold_parity_bf16_artifact(family):
    mt, d, ids, teacher = family
    c = fold_and_compare(mt, d, ids, teacher, "bfloat16", "bf16")
    RESULTS[mt] = c.__dict__
    assert c.mean_kl < 1e-3, c
    assert c.decisive_top1_agreement >= 0.99, c


WRONG_FOLDS = {
    # γ folded into the readers but the norm keeps its gain: γ applied twice
    "norm-keeps-gain": (norm_fold, "identity_gain", lambda like, zc: like),
    # zero-centred gain folded as w instead of 1 + w
    "zero-centred-as-plain": (norm_fold, "effective_gain", lambda w, zc: w),
    # R1 applied to the readers only: writers left in the old basis
    "writers-not-rotated": (rotate, "rotate_writer_output", lambda w, r: w),
}


@pytest.mark.parametrize("wrong", sorted(WRONG_FOLDS))
def test_negative_control_wrong_fold_is_rejected(family, wrong, monkeypatch):
    mt, d, ids, teacher = family
    if wrong == "zero-centred-as-plain" and mt not in ZERO_CENTRED:
        pytest.skip("family has plain norms")
    if wrong == "writers-not-rotated" and mt in NO_R1:
        pytest.skip("R1 is invalid for this family")
    mod, attr, fn = WRONG_FOLDS[wrong]
    monkeypatch.setattr(mod, attr, fn)
    c = fold_and_compare(mt, d, ids, teacher, "float32", f"wrong-{wrong}")
    assert c.mean_kl > 1e-2, f"{wrong} fold on {mt} was not caught: {c}"


def test_zz_report(tmp_path_factory, request):
    """Print the per-family parity numbers (collected above) for the closing note."""
    if RESULTS:
        print("\n" + json.dumps(RESULTS, indent=1))
