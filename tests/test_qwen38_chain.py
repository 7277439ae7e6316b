"""The shipped qwen38-q3 recipe end to end on a tiny Qwen3.5 VL + MTP
checkpoint: streamed sensitivity writes its k map, the build allocates k from
it within the 3.00-bit budget (calibration sampled layer by layer), and the
artifact is evaluated layer-streamed against its source."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from cli_run import cli
from tiny import make_qwen3_5_vl_with_mtp, save_char_tokenizer

ROOT = Path(__file__).resolve().parents[1]


def test_qwen38_q3_sensitivity_kmap_build_eval(tmp_path):
    src = save_char_tokenizer(make_qwen3_5_vl_with_mtp(tmp_path / "src"))
    r = yaml.safe_load((ROOT / "recipes/qwen38-q3.yaml").read_text())
    r["source"] = {"path": str(src)}
    r["output"] = str(tmp_path / "out")
    r["calibration"].update(samples=4, seq_len=32)
    assert r["calibration"]["stream"] is True  # the shipped recipe samples layer by layer
    q = r["stages"][4]["quantize"]
    q["default"]["group_size"] = 32  # tiny rows of 32 (linear attention out_proj)
    for rule in q["rules"]:
        if rule.get("format") == "trellis":
            rule["trellis"]["T"] = 32  # two blocks per tiny row (interleave needs an even count)
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(r, sort_keys=False))
    wd = ["--workdir", tmp_path / "w"]

    p = cli(tmp_path, "plan", "r.yaml", *wd)
    assert p.returncode == 2 and "qwen38-q3.kmap.json" in p.stderr
    p = cli(tmp_path, "sensitivity", "r.yaml", "--tokens", "64", *wd)
    assert p.returncode == 0, p.stderr[-3000:]
    table = json.loads((tmp_path / "qwen38-q3.kmap.json").read_text())
    meta = table.pop("_measured")
    assert meta["stream"] is True and len(meta["seconds_per_layer"]) == 2
    assert len(table) == 6 and all(set(v) == {"2", "3", "4"} for v in table.values())

    p = cli(tmp_path, "r.yaml", "--no-lock", *wd)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "one decoder layer at a time" in p.stdout + p.stderr
    built = json.loads((tmp_path / "out/optiq_metadata.json").read_text())
    alloc = next(a for a in built["bit_allocation"] if a["format"] == "trellis")
    assert alloc["average_k"] <= 3.0 and set(alloc["map"]) == set(table)

    p = cli(tmp_path, "eval", "out", "--source", src, "--stream", "--tokens", "64",
            "--no-probe", "--json", "e.json", "--workdir", tmp_path / "w")
    assert p.returncode == 0, p.stderr[-3000:]
    e = json.loads((tmp_path / "e.json").read_text())
    assert 0 < e["mean_kl"] < 5 and e["perplexity"] > 1

    p = cli(tmp_path, "verify", "out", "--source", src, "--stream", "--no-runtimes")
    assert p.returncode == 0, p.stderr[-3000:]
    assert '"streamed": true' in p.stdout
