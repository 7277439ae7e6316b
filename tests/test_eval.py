"""The evaluation instruments themselves: teacher dumps round-trip, a model
against its own dump scores exactly 0, the top-K truncation is bracketed."""

from __future__ import annotations

import pytest
import torch

from tqbuild.eval.metrics import compare
from tqbuild.eval.teacher import TeacherDump, kl_vs_dump, make_dump


def _logits(seed, n=64, v=500, scale=3.0):
    return scale * torch.randn(n, v, generator=torch.Generator().manual_seed(seed))


def test_self_kl_is_exactly_zero():
    lg = _logits(0)
    for k in (16, 500):
        r = kl_vs_dump(make_dump(lg, torch.arange(64), k, 64), lg)
        assert r.mean_kl == 0.0 and r.top1_agreement == 1.0
    assert kl_vs_dump(make_dump(lg, torch.arange(64), 500, 64), lg).mean_kl_upper == 0.0


def test_dump_round_trips(tmp_path):
    lg = _logits(1)
    d = make_dump(lg, torch.arange(64), 32, 16)
    d.save(tmp_path / "t.safetensors")
    e = TeacherDump.load(tmp_path / "t.safetensors")
    assert torch.equal(d.top_idx, e.top_idx) and torch.equal(d.top_logit, e.top_logit)
    assert torch.equal(d.lse, e.lse) and torch.equal(d.ids, e.ids) and e.window == 16
    assert kl_vs_dump(e, lg + 0.1 * _logits(2)).mean_kl == kl_vs_dump(d, lg + 0.1 * _logits(2)
                                                                       ).mean_kl


@pytest.mark.parametrize("k", [4, 32, 128])
def test_truncation_brackets_the_full_kl(k):
    teacher, cand = _logits(3), _logits(3) + 0.7 * _logits(4)
    full = compare(teacher, cand).mean_kl
    r = kl_vs_dump(make_dump(teacher, torch.arange(64), k, 64), cand)
    assert r.mean_kl <= full + 1e-12 and full <= r.mean_kl_upper + 1e-12
    assert 0 < r.tail_mass < 1
    exact = kl_vs_dump(make_dump(teacher, torch.arange(64), 500, 64), cand)
    assert exact.mean_kl == pytest.approx(full, rel=1e-9) and exact.tail_mass < 1e-12
