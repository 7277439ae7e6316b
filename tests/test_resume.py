"""Resumable builds: SIGKILL at any work-dir write boundary, Ctrl-C, resume,
byte-identical artifacts; --rerun-layers; a changed param recomputes exactly
the layers it affects."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tiny import make_model, save_bf16

RECIPE = """name: tiny-gptq
source: {{path: {src}}}
output: {out}
workdir: {work}
calibration:
  source: {{self_generated: true}}
  samples: {samples}
  seq_len: 32
  batch_size: {batch}
  hessians: {mode}
stages:
  - untie
  - norm_fold
  - rotate: {{seed: 3}}
  - calibrate
  - quantize:
      default: {{method: gptq, bits: 4, group_size: 32}}
      rules: {rules}
  - write
"""


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    return save_bf16(make_model("llama", layers=4), tmp_path_factory.mktemp("rs") / "src")


def recipe(tmp: Path, src: Path, tag: str, mode="original", batch=4, rules="[]",
           samples=8) -> Path:
    """A recipe in tmp/TAG/ whose output and work dir are relative: the text (and
    so the artifact's metadata) is the same wherever it runs."""
    (tmp / tag).mkdir(exist_ok=True)
    p = tmp / tag / "r.yaml"
    p.write_text(RECIPE.format(src=src, out="out", work="work", batch=batch, mode=mode,
                               samples=samples, rules=rules))
    return p


def cli(recipe_path: Path, *args, env=None) -> subprocess.CompletedProcess:
    e = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "tqbuild", "r.yaml", *map(str, args)], env=e,
                          capture_output=True, text=True, timeout=600, cwd=recipe_path.parent)


def digests(out: Path) -> dict[str, str]:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(out.iterdir())}


def computed(work: Path) -> list[str]:
    return json.loads((work / "tiny-gptq" / "report.json").read_text())["computed_units"]


@pytest.fixture(scope="module")
def reference(src, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ref")
    p = cli(recipe(tmp, src, "ref"))
    assert p.returncode == 0, p.stderr
    return digests(tmp / "ref" / "out")


@pytest.mark.parametrize("kill_at", [[2], [5], [9], [3, 11], [14]])
def test_sigkill_anywhere_then_resume_is_byte_identical(src, reference, tmp_path, kill_at):
    r = recipe(tmp_path, src, "k")
    for k in kill_at:
        p = cli(r, env={"TQBUILD_TEST_KILL_AT": str(k)})
        assert p.returncode == -signal.SIGKILL, (k, p.returncode, p.stderr[-2000:])
        assert not (tmp_path / "k" / "out").exists()
    p = cli(r)
    assert p.returncode == 0, p.stderr
    assert digests(tmp_path / "k" / "out") == reference
    assert 0 < len(computed(tmp_path / "k" / "work")) < 6  # something was reused


def test_sigint_stops_cleanly_and_resumes(src, reference, tmp_path):
    r = recipe(tmp_path, src, "c")
    proc = subprocess.Popen([sys.executable, "-m", "tqbuild", "r.yaml"], stderr=subprocess.PIPE,
                            text=True, cwd=r.parent)
    units = r.parent / "work" / "tiny-gptq" / "units"
    t0 = time.time()
    while not (units.is_dir() and len(list(units.glob("layer-*.safetensors"))) >= 1):
        assert time.time() - t0 < 300 and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=300)[1]
    assert proc.returncode == 130, err
    assert "resume with: tq-build" in err and "Traceback" not in err
    assert not (tmp_path / "c" / "out").exists()
    assert cli(r).returncode == 0
    assert digests(tmp_path / "c" / "out") == reference


def test_rerun_layers_original_mode(src, reference, tmp_path):
    r = recipe(tmp_path, src, "r")
    assert cli(r).returncode == 0
    p = cli(r, "--rerun-layers", "1,3-3")
    assert p.returncode == 0, p.stderr
    assert computed(tmp_path / "r" / "work") == ["layer 1", "layer 3"]
    assert digests(tmp_path / "r" / "out") == reference
    assert cli(r, "--no-lock").returncode == 0 and computed(tmp_path / "r" / "work") == []
    p = cli(r)  # the lock entry is current: nothing to do at all
    assert p.returncode == 0 and "up to date" in p.stdout


def test_rerun_layers_propagate_mode_recomputes_downstream(src, tmp_path):
    r = recipe(tmp_path, src, "p", mode="propagate")
    assert cli(r).returncode == 0
    first = digests(tmp_path / "p" / "out")
    assert cli(r, "--rerun-layers", "2").returncode == 0
    assert computed(tmp_path / "p" / "work") == ["layer 2", "layer 3", "head"]
    assert digests(tmp_path / "p" / "out") == first


def test_changed_param_recomputes_exactly_the_affected_layers(src, tmp_path):
    r = recipe(tmp_path, src, "x")
    assert cli(r).returncode == 0
    text = r.read_text().replace("rules: []", "rules: [{match: 'layers\\.2\\.mlp', bits: 8}]")
    r.write_text(text)
    p = cli(r)
    assert p.returncode == 0, p.stderr
    assert computed(tmp_path / "x" / "work") == ["layer 2"]
    cfg = json.loads((tmp_path / "x" / "out" / "config.json").read_text())
    assert cfg["quantization"]["model.layers.2.mlp.down_proj"]["bits"] == 8


def test_bad_rerun_spec(src, tmp_path):
    p = cli(recipe(tmp_path, src, "bad"), "--rerun-layers", "two")
    assert p.returncode == 2 and "3,7-9" in p.stderr


def test_second_build_on_same_workdir_is_refused(src, tmp_path):
    from tqbuild.errors import OutputError
    from tqbuild.pipeline.workdir import WorkDir

    a = WorkDir(tmp_path / "w", "n")
    a.lock()
    try:
        with pytest.raises(OutputError, match="another build"):
            WorkDir(tmp_path / "w", "n").lock()
    finally:
        a.unlock()


def test_activations_are_pruned_unless_kept(src, tmp_path):
    r = recipe(tmp_path, src, "pr")
    assert cli(r).returncode == 0
    acts = sorted((tmp_path / "pr" / "work" / "tiny-gptq" / "acts").glob("*.safetensors"))
    assert [a.name for a in acts] == ["after-layer-0003.safetensors"]
    r.write_text(r.read_text().replace("  hessians: original\n",
                                       "  hessians: original\n  keep: all\n"))
    p = cli(r, "--force", "--rerun-layers", "0-3")
    assert p.returncode == 0, p.stderr
    assert computed(tmp_path / "pr" / "work") == [f"layer {i}" for i in range(4)]
    acts = sorted((tmp_path / "pr" / "work" / "tiny-gptq" / "acts").glob("*.safetensors"))
    assert len(acts) == 4


def test_signal_turned_into_another_error_still_stops_cleanly(src, tmp_path, monkeypatch, capsys):
    """A stop signal that a library swallows and re-raises as its own error (safetensors
    mid-read raises ValueError) ends the build like Ctrl-C: exit 130, resume hint."""
    from tqbuild import cli as tq_cli

    def swallowing_run(*a, **k):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            raise ValueError("could not determine the shape of object") from None

    r = recipe(tmp_path, src, "s")
    monkeypatch.chdir(r.parent)
    monkeypatch.setattr(tq_cli, "run", swallowing_run)
    monkeypatch.setattr(tq_cli, "_signalled", False)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(SystemExit) as stop:
            tq_cli.main(["r.yaml"])
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    assert stop.value.code == 130
    assert "resume with: tq-build" in capsys.readouterr().err
    monkeypatch.setattr(tq_cli, "_signalled", False)
    monkeypatch.setattr(tq_cli, "run", lambda *a, **k: (_ for _ in ()).throw(ValueError("fault")))
    with pytest.raises(ValueError, match="fault"):  # without a signal a fault stays a fault
        tq_cli.main(["r.yaml"])
