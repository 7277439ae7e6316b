"""lm-evaluation-harness on a tq-build artifact: the `tq-build` model over a
local multiple-choice task (a task YAML over a JSONL file the test writes);
its accuracy equals the one computed from the torch loader's logits."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from cli_run import cli
from conftest import write_recipe
from tiny import save_char_tokenizer

pytest.importorskip("lm_eval")

ITEMS = [("the cat sat on the ", ["mat", "sky", "dog"], 0),
         ("one, two, three, ", ["four", "tree", "for"], 0),
         ("a b c d ", ["e", "z", "q"], 0),
         ("hello wor", ["ld", "ms", "th"], 0),
         ("red, green, ", ["blue", "cold", "sand"], 0),
         ("up and ", ["down", "in", "sea"], 0)]
TASK = """task: tiny_local_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{context}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: label
target_delimiter: ""
metric_list:
  - metric: acc
"""


@pytest.fixture(scope="module")
def artifact(tmp_path_factory, tiny_source):
    d = tmp_path_factory.mktemp("lmeval")
    src = save_char_tokenizer(shutil.copytree(tiny_source(), d / "src"))
    write_recipe(d / "r.yaml", source=src, output=d / "out", stages=[
        "untie", "norm_fold", "rotate",
        {"quantize": {"default": {"bits": 4, "group_size": 32}, "rules": [
            {"match": r"mlp\.(gate|up|down)_proj$", "format": "trellis", "bits": 3,
             "trellis": {"T": 64}}]}}])
    p = cli(d, d / "r.yaml", "--no-lock", "--workdir", d / "w")
    assert p.returncode == 0, p.stderr[-2000:]
    return d / "out"


def _task_dir(tmp_path):
    (tmp_path / "items.jsonl").write_text("".join(
        json.dumps({"context": c, "choices": ch, "label": lab}) + "\n" for c, ch, lab in ITEMS))
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "tiny.yaml").write_text(TASK.format(data=tmp_path / "items.jsonl"))
    return tmp_path / "tasks"


def _our_accuracy(path) -> float:
    from transformers import AutoTokenizer

    from tqbuild.runtime.torch_load import load_torch

    model, tok = load_torch(path), AutoTokenizer.from_pretrained(path)
    right = 0
    for ctx, choices, label in ITEMS:
        scores = []
        for ch in choices:
            c, t = tok(ctx)["input_ids"], tok(ch)["input_ids"]
            ids = torch.tensor(c + t)[None]
            with torch.no_grad():
                lp = torch.log_softmax(model(ids).logits[0].double(), -1)
            scores.append(sum(float(lp[len(c) - 1 + i, t[i]]) for i in range(len(t))))
        right += max(range(len(choices)), key=scores.__getitem__) == label
    return right / len(ITEMS)


def test_tq_build_eval_tasks_on_a_local_task(tmp_path, artifact, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    p = cli(tmp_path, "eval", artifact, "--tasks", "tiny_local_mc", "--include-path",
            _task_dir(tmp_path), "--json", tmp_path / "r.json")
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads((tmp_path / "r.json").read_text())
    assert res["tiny_local_mc"]["acc,none"] == pytest.approx(_our_accuracy(artifact))


def test_unknown_task_is_a_clear_error(tmp_path, artifact, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    p = cli(tmp_path, "eval", artifact, "--tasks", "no_such_task_xyz")
    assert p.returncode == 2 and "no_such_task_xyz" in p.stderr and "Traceback" not in p.stderr
