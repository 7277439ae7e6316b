"""artifacts.lock, `status`, `verify [--locked]`, byte-identical rebuilds, the
model card and `upload --dry-run`, on a tiny llama with GPTQ + trellis."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import yaml
from cli_run import cli
from tiny import make_model, save_bf16

RECIPE = """name: lk
source: {{path: {src}}}
output: out/lk
card: {{base_model: test/tiny-llama, license: apache-2.0}}
calibration: {{source: {{self_generated: true}}, samples: 4, seq_len: 32}}
stages:
  - untie
  - norm_fold
  - rotate: {{seed: {seed}}}
  - calibrate
  - quantize:
      default: {{method: gptq, bits: 4, group_size: 32}}
      rules:
        - {{match: 'mlp\\.(gate|up|down)_proj$', format: trellis, method: ldlq, bits: 2,
           trellis: {{T: 64}}}}
"""



@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("lock")
    src = save_bf16(make_model("llama"), d / "src")
    (d / "r.yaml").write_text(RECIPE.format(src=src, seed=42))
    p = cli(d, "r.yaml")
    assert p.returncode == 0, p.stderr[-3000:]
    return d


def flip_byte_of(artifact: Path, tensor: str) -> Path:
    """Flip one byte inside a named tensor's data in its safetensors shard."""
    for f in sorted(artifact.glob("*.safetensors")):
        raw = bytearray(f.read_bytes())
        n = struct.unpack("<Q", raw[:8])[0]
        header = json.loads(raw[8:8 + n])
        if tensor in header:
            a, b = header[tensor]["data_offsets"]
            raw[8 + n + (a + b) // 2] ^= 0x10
            f.write_bytes(bytes(raw))
            return f
    raise KeyError(tensor)


def test_lock_written_and_status_up_to_date(built):
    lock = json.loads((built / "artifacts.lock").read_text())
    assert lock["schema"] == 1
    e = lock["recipes"]["lk"]
    assert e["recipe"]["path"] == "r.yaml" and len(e["recipe"]["sha256"]) == 64
    assert e["output_dir"] == "out/lk"
    assert {"untie", "norm_fold", "rotate", "calibrate", "quantize"} <= set(e["stages"])
    assert e["stages"]["rotate"]["seed"] == 42
    outs = {o["path"] for o in e["outputs"]}
    assert {"out/lk/config.json", "out/lk/optiq_metadata.json", "out/lk/README.md"} <= outs
    assert any(i["path"].endswith("model.safetensors") for i in e["inputs"])
    assert {"tq-build", "torch", "transformers"} <= set(e["versions"])
    p = cli(built, "status")
    assert p.returncode == 0 and "lk: up to date" in p.stdout
    p = cli(built, "r.yaml")  # nothing to do
    assert p.returncode == 0 and "up to date" in p.stdout
    p = cli(built, "verify", "out/lk", "--locked")
    assert p.returncode == 0 and "matches artifacts.lock" in p.stdout


def test_model_card(built):
    text = (built / "out" / "lk" / "README.md").read_text()
    front = yaml.safe_load(text.split("---")[1])
    assert front["library_name"] == "mlx" and front["base_model"] == "test/tiny-llama"
    assert front["license"] == "apache-2.0" and "trellis" in front["tags"]
    assert front["quantization"]["bits_per_weight"] > 2
    assert "## Caveats" in text and "EOS" in text and "rotated basis" in text
    assert "Device: cpu" in text


def test_rebuild_is_byte_identical(built, tmp_path):
    """Same recipe, source and libraries, fresh work dir and output: same bytes."""
    p = cli(built, "r.yaml", "--output", tmp_path / "again", "--workdir", tmp_path / "w",
            "--no-lock")
    assert p.returncode == 0, p.stderr[-3000:]
    a = {f.relative_to(built / "out" / "lk"): f.read_bytes()
         for f in (built / "out" / "lk").rglob("*") if f.is_file()}
    b = {f.relative_to(tmp_path / "again"): f.read_bytes()
         for f in (tmp_path / "again").rglob("*") if f.is_file()}
    assert a.keys() == b.keys()
    assert [k for k in a if a[k] != b[k]] == []


def test_upload_dry_run(built):
    p = cli(built, "upload", "out/lk", "me/tiny-lk", "--dry-run", "--private")
    assert p.returncode == 0, p.stderr
    plan = json.loads(p.stdout[:p.stdout.rindex("}") + 1])
    assert plan["repo_id"] == "me/tiny-lk" and plan["private"] is True
    assert plan["lock"].startswith("matches")
    lock = json.loads((built / "artifacts.lock").read_text())["recipes"]["lk"]["outputs"]
    assert {(f"out/lk/{f['path']}", f["sha256"]) for f in plan["files"]} == \
        {(o["path"], o["sha256"]) for o in lock}
    assert "nothing was sent" in p.stdout
    bad = cli(built, "upload", "out/lk", "not-a-repo-id", "--dry-run")
    assert bad.returncode == 2


def test_flipped_byte_fails_status_verify_and_upload(built, tmp_path):
    import shutil

    d = tmp_path / "copy"
    shutil.copytree(built, d, symlinks=True)
    shard = flip_byte_of(d / "out" / "lk", "model.layers.1.mlp.up_proj.weight")
    p = cli(d, "status")
    assert p.returncode == 3 and shard.name in p.stdout and "STALE" in p.stdout
    p = cli(d, "verify", "out/lk")
    assert p.returncode == 3 and "model.layers.1.mlp.up_proj" in p.stderr
    p = cli(d, "verify", "out/lk", "--locked")
    assert p.returncode == 3 and shard.name in p.stderr
    p = cli(d, "upload", "out/lk", "me/x", "--dry-run")
    assert p.returncode == 3 and "refusing" in p.stderr


def test_changed_param_or_input_makes_status_stale(built, tmp_path):
    import shutil

    d = tmp_path / "copy"
    shutil.copytree(built, d, symlinks=True)
    r = (d / "r.yaml").read_text()
    (d / "r.yaml").write_text(r.replace("seed: 42", "seed: 7"))
    p = cli(d, "status")
    assert p.returncode == 3 and "recipe r.yaml" in p.stdout and "changed" in p.stdout
    (d / "r.yaml").write_text(r)
    assert cli(d, "status").returncode == 0
    extra = d / "out" / "lk" / "stray.txt"
    extra.write_text("x")
    p = cli(d, "verify", "out/lk", "--locked")
    assert p.returncode == 3 and "stray.txt" in p.stderr and "not in the lock" in p.stderr


def test_ci_example_uses_real_commands():
    """examples/ci: valid workflow YAML whose tq-build calls are real commands."""
    import re

    from tqbuild.cli import app

    root = Path(__file__).parents[1]
    wf = yaml.safe_load((root / "examples" / "ci" / "build-and-publish.yml").read_text())
    runs = [s.get("run", "") for s in wf["jobs"]["build"]["steps"]]
    used = set(re.findall(r"tq-build (\w[\w-]*)", "\n".join(runs)))
    commands = {c.name or c.callback.__name__ for c in app.registered_commands}
    assert {"plan", "verify", "status", "upload", "inspect"} <= used
    assert used - {"plan", "verify", "status", "upload", "inspect"} <= commands | {"RECIPE"}
    assert used <= commands
    assert any("--locked" in r for r in runs) and any("actions/cache" in s.get("uses", "")
                                                    for s in wf["jobs"]["build"]["steps"])
