"""The recipe's `evaluate` stage: quality recorded in metadata and card, gates
that fail the build (exit 3) and block upload, texts checked before building."""

from __future__ import annotations

import json
import shutil

import pytest
from cli_run import cli
from conftest import write_recipe
from tiny import save_char_tokenizer

TEXT = ("The quick brown fox jumps over the lazy dog. " * 3 +
        "Pack my box with five dozen liquor jugs; how vexingly quick daft zebras jump! ") * 4


@pytest.fixture(scope="module")
def src_with_tokenizer(tmp_path_factory, tiny_source):
    d = tmp_path_factory.mktemp("tok") / "src"
    shutil.copytree(tiny_source(), d)
    return save_char_tokenizer(d)


def _recipe(tmp_path, src, evaluate, stages_after=()):
    (tmp_path / "a.txt").write_text(TEXT)
    (tmp_path / "b.txt").write_text(TEXT[::-1])
    ev = {"texts": [str(tmp_path / "a.txt"), str(tmp_path / "b.txt")], "tokens": 200,
          "window": 64, **evaluate}
    return write_recipe(tmp_path / "r.yaml", source=src, output=tmp_path / "out", stages=[
        "untie", {"quantize": {"default": {"bits": 4, "group_size": 32}}}, *stages_after,
        {"evaluate": ev}])


def test_quality_recorded_in_metadata_and_card(tmp_path, src_with_tokenizer):
    r = _recipe(tmp_path, src_with_tokenizer, {"gate": {"max_kl": 10.0,
                                                         "eos_probe_failures": 100}})
    p = cli(tmp_path, r, "--no-lock", "--workdir", tmp_path / "w")
    assert p.returncode == 0, p.stderr[-2000:]
    q = json.loads((tmp_path / "out" / "optiq_metadata.json").read_text())["quality"]
    assert [t["text"] for t in q["texts"]] == ["a.txt", "b.txt"]
    assert all(t["tokens"] == 200 and t["mean_kl"] > 0 and t["source_perplexity"] > 1
               for t in q["texts"])
    assert q["mean_kl"] == pytest.approx(sum(t["mean_kl"] for t in q["texts"]) / 2)
    assert q["eos_probe"]["prompts"] > 0
    assert f"quality on 2 held-out text(s): mean KL {q['mean_kl']:.4f}" in p.stdout
    assert "gate passed" in p.stdout
    assert q["gate"] == {"max_kl": 10.0, "eos_probe_failures": 100, "passed": True,
                         "failures": []}
    card = (tmp_path / "out" / "README.md").read_text()
    assert "Quality against the source" in card and "| a.txt | 200 |" in card
    assert "Gates: passed" in card


def test_a_failing_gate_exits_3_and_blocks_upload(tmp_path, src_with_tokenizer):
    r = _recipe(tmp_path, src_with_tokenizer, {"probe": False, "gate": {"max_kl": 1e-9}})
    p = cli(tmp_path, r, "--workdir", tmp_path / "w", "--lock", tmp_path / "artifacts.lock")
    assert p.returncode == 3 and "Traceback" not in p.stderr
    assert "quality gate failed" in p.stderr and "max_kl 1e-09" in p.stderr
    assert not (tmp_path / "artifacts.lock").exists()  # a failed build is not locked
    q = json.loads((tmp_path / "out" / "optiq_metadata.json").read_text())["quality"]
    assert q["gate"]["passed"] is False
    p = cli(tmp_path, "upload", tmp_path / "out", "me/x", "--dry-run")
    assert p.returncode == 3 and "quality gate failed" in p.stderr


def test_a_missing_text_fails_before_building(tmp_path, src_with_tokenizer):
    r = _recipe(tmp_path, src_with_tokenizer, {})
    (tmp_path / "b.txt").unlink()
    p = cli(tmp_path, r, "--no-lock", "--workdir", tmp_path / "w")
    assert p.returncode == 2 and "b.txt does not exist" in p.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "w").exists()


def test_write_is_placed_before_evaluate(tmp_path, src_with_tokenizer):
    from tqbuild.recipe import load

    r = load(_recipe(tmp_path, src_with_tokenizer, {}))
    assert [s.name for s in r.stages][-2:] == ["write", "evaluate"]
