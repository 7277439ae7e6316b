"""Disk: the build refuses to start when the filesystem is too small, and a
disk that fills mid-write leaves no output, a clean error and a resumable work
dir (a size-limited tmpfs made by the test; skipped where it cannot mount)."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest
from cli_run import cli as run
from tiny import make_model, save_bf16

RECIPE = """name: disk
source: {{path: {src}}}
output: {out}
workdir: {work}
stages:
  - untie
  - norm_fold
  - rotate
  - quantize: {{default: {{bits: 4, group_size: 32}}}}
"""


@pytest.fixture
def small_fs(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12k", "tmpfs", str(mnt)],
                       capture_output=True)
    if p.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    yield mnt
    subprocess.run(["umount", str(mnt)], capture_output=True)


def cli(d: Path, *args):
    return run(d, "r.yaml", *args)


def digests(out: Path) -> dict[str, str]:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(out.iterdir())}


def test_refuses_to_start_on_a_too_small_disk(tmp_path, small_fs):
    src = save_bf16(make_model("llama"), tmp_path / "src")
    (tmp_path / "r.yaml").write_text(RECIPE.format(src=src, out=small_fs / "out",
                                                   work=tmp_path / "work"))
    p = cli(tmp_path)
    assert p.returncode == 2 and "not enough disk space" in p.stderr and "--ignore-disk" in p.stderr
    assert list(small_fs.iterdir()) == []


def test_disk_full_mid_write_leaves_no_output_and_resumes(tmp_path, small_fs):
    src = save_bf16(make_model("llama"), tmp_path / "src")
    (tmp_path / "r.yaml").write_text(RECIPE.format(src=src, out=small_fs / "out",
                                                   work=tmp_path / "work"))
    p = cli(tmp_path, "--ignore-disk")
    assert p.returncode == 2, p.stderr
    assert "disk filled up" in p.stderr and "Traceback" not in p.stderr
    assert list(small_fs.iterdir()) == []  # neither the output nor its temp dir
    # the work dir is intact: the same build to a roomy place reuses every unit
    (tmp_path / "r.yaml").write_text(RECIPE.format(src=src, out=tmp_path / "out",
                                                   work=tmp_path / "work"))
    p = cli(tmp_path)
    assert p.returncode == 0 and "0/4 units computed" in p.stdout, p.stdout + p.stderr
    ref = tmp_path / "ref"
    ref.mkdir()
    (ref / "r.yaml").write_text(RECIPE.format(src=src, out=tmp_path / "out2",
                                              work=ref / "work"))
    assert cli(ref).returncode == 0
    a, b = digests(tmp_path / "out"), digests(tmp_path / "out2")
    for f in ("optiq_metadata.json", "README.md"):  # they name the recipe's hash
        a.pop(f), b.pop(f)
    assert a == b
