"""`tq-build inspect` and `tq-build schema`."""

from __future__ import annotations

import json
from pathlib import Path

from cli_run import cli
from conftest import write_recipe


def test_inspect_reports_modules_bpw_and_transforms(tmp_path, tiny_source):
    write_recipe(tmp_path / "r.yaml", name="ins", source=tiny_source(), stages=[
        "untie", "norm_fold", {"rotate": {"seed": 5}},
        {"quantize": {"default": {"bits": 4, "group_size": 32},
                      "rules": [{"match": "down_proj", "bits": 8},
                                {"match": "lm_head", "format": "none"}]}}])
    assert cli(tmp_path, "r.yaml").returncode == 0
    p = cli(tmp_path, "inspect", "out", "--json")
    info = json.loads(p.stdout)
    mods = info["modules"]
    assert mods["model.layers.0.mlp.down_proj"]["bits"] == 8
    assert mods["model.layers.0.mlp.down_proj"]["shape"] == [64, 128]
    assert mods["lm_head"]["format"] == "bfloat16"
    # per layer: q,o 64×64, k,v 32×64, gate/up 128×64 at 4 bits; down 64×128 at 8; g32 bf16
    # scale+bias add 32 bits per 32 weights
    w4 = 2 * 64 * 64 + 2 * 32 * 64 + 2 * 128 * 64
    w8 = 64 * 128
    expect = (w4 * 5 + w8 * 9) / (w4 + w8)
    assert abs(info["bits_per_weight"] - expect) < 1e-3
    assert info["weight_transforms"][0]["seed"] == 5
    text = cli(tmp_path, "inspect", "out").stdout
    assert "bits per weight" in text and "model.layers.1.self_attn.q_proj" in text


def test_schema_is_json_schema_of_the_recipe():
    p = cli(Path.cwd(), "schema")
    s = json.loads(p.stdout)
    assert s["additionalProperties"] is False and "stages" in s["required"]
    assert "calibration" in s["properties"]


def test_recipe_reference_doc_is_generated_and_current():
    from pathlib import Path

    from tqbuild.recipe import recipe_reference_markdown

    doc = Path(__file__).resolve().parent.parent / "docs" / "recipe-reference.md"
    assert doc.read_text().strip() == recipe_reference_markdown().strip(), \
        "regenerate: tq-build schema --markdown > docs/recipe-reference.md"
