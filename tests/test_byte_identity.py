"""Refactors must not change what a build writes: four tiny artifacts (trellis
LDLQ, affine GPTQ, MLX microscaling, a Qwen3.5 vision-language checkpoint with
an MTP head) are rebuilt and every file's sha256 compared with the values
recorded before the architecture change of issue 20 (at 1622227); re-recorded
once since, when config.json's quantization_config gained `quant_method:
tq-build` (the transformers loader) — every other file unchanged; and again when
the calibration parameters gained `version` and `stream` (metadata and card
only: the recipes pin calibration version 1, whose tokens are the first
release's, and every weight file kept its bytes). Paths in
the recipe are relative and the run's directory is replaced by `<tmp>`.
optiq_metadata.json is compared without its `hessian_proxy_loss` values: they are
float sums whose last digits follow the CPU's vector width (an AVX-512 machine
and the recording one differ at the 6th digit, every other byte equal), so they
are reported, not pinned; every other byte of every file is compared.

To re-record after an intended format change: `python tests/test_byte_identity.py`
prints the new table for tests/data/byte_identity.json."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from tiny import make_model, make_qwen3_5_vl_with_mtp, save_bf16

sys.path.insert(0, str(Path(__file__).parent))
from cli_run import cli  # noqa: E402

CALIB = "calibration: {source: {self_generated: true}, samples: 4, seq_len: 32, version: 1}\n"
PREFIX = "stages:\n  - untie\n  - norm_fold\n  - rotate: {r2: %s, seed: 7}\n"

RECIPES = {
    "trellis": CALIB + PREFIX % "random_hadamard" + """  - calibrate
  - quantize:
      default: {method: gptq, bits: 4, group_size: 32}
      rules:
        - {match: 'mlp\\.(gate|up|down)_proj$', format: trellis, method: ldlq, bits: 3,
           trellis: {T: 64}}
  - write
""",
    "gptq": CALIB + PREFIX % "random_hadamard" + """  - calibrate
  - quantize:
      default: {method: gptq, bits: 4, group_size: 32, act_order: true}
      rules:
        - {match: 'embed_tokens', bits: 8, group_size: 64, method: rtn}
  - write
""",
    "mx": PREFIX % "random_hadamard" + """  - quantize:
      default: {format: mxfp4}
      rules:
        - {match: 'down_proj', format: mxfp8}
        - {match: 'self_attn', format: nvfp4}
        - {match: 'embed_tokens', format: affine, bits: 8, group_size: 64}
  - write
""",
    "qwen3_5_vl_mtp": CALIB + PREFIX % "off" + """  - calibrate
  - quantize:
      default: {method: gptq, bits: 4, group_size: 32}
      rules:
        - {match: 'vision_tower', format: none}
        - {match: 'mlp\\.(gate|up|down)_proj$', format: trellis, method: ldlq, bits: 2,
           trellis: {T: 32}}
  - write
""",
}

RECORD = json.loads((Path(__file__).parent / "data" / "byte_identity.json").read_text())
EXPECTED = RECORD["artifacts"]


def environment() -> dict[str, str]:
    """What the recorded bytes depend on besides tq-build: other library versions
    (e.g. the H200 image's torch/transformers) write other bytes."""
    import platform

    from tqbuild.pipeline.lock import versions

    v = {k: x for k, x in versions().items() if k in RECORD["environment"]}
    v["machine"] = platform.machine()
    return v


def source(kind: str, d: Path) -> Path:
    if kind == "qwen3_5_vl_mtp":
        return make_qwen3_5_vl_with_mtp(d / "src")
    return save_bf16(make_model("llama"), d / "src")


def pinned_bytes(name: str, data: bytes) -> bytes:
    """The bytes a file is compared by: metadata without its CPU-dependent losses."""
    if name != "optiq_metadata.json":
        return data
    meta = json.loads(data)
    for rec in meta.get("modules", {}).values():
        if isinstance(rec.get("hessian_proxy_loss"), dict):
            rec["hessian_proxy_loss"] = sorted(rec["hessian_proxy_loss"])
    return json.dumps(meta, indent=2, sort_keys=True).encode()


def build(kind: str, d: Path) -> dict[str, str]:
    src = source(kind, d)
    (d / "r.yaml").write_text(f"name: bi-{kind}\nsource: {{path: {src.name}}}\noutput: out\n"
                              + RECIPES[kind])
    p = cli(d, "r.yaml", "--workdir", "w", "--no-lock")
    assert p.returncode == 0, p.stderr[-3000:]
    out, hashes = d / "out", {}
    for f in sorted(out.rglob("*")):
        if f.is_file():
            name = f.relative_to(out).as_posix()
            data = pinned_bytes(name, f.read_bytes().replace(str(d).encode(), b"<tmp>"))
            hashes[name] = hashlib.sha256(data).hexdigest()
    return hashes


@pytest.mark.parametrize("kind", list(RECIPES))
def test_artifact_bytes_unchanged(kind, tmp_path):
    if environment() != RECORD["environment"]:
        pytest.skip(f"recorded under {RECORD['environment']}, this is {environment()}")
    if kind == "mx":
        pytest.importorskip("mlx")
    got = build(kind, tmp_path)
    assert got == EXPECTED[kind]


@pytest.mark.parametrize("kind", ["trellis", "gptq"])
def test_overlapped_host_work_writes_the_same_bytes(kind, tmp_path, monkeypatch):
    """A GPU build assembles each tensor in a helper thread while the next one
    quantizes; forced on here (CPU), the artifact is byte for byte the same."""
    if environment() != RECORD["environment"]:
        pytest.skip(f"recorded under {RECORD['environment']}, this is {environment()}")
    from tqbuild.pipeline import executor

    used = []
    monkeypatch.setattr(executor, "overlap_host_work", lambda device: used.append(1) or True)
    assert build(kind, tmp_path) == EXPECTED[kind]
    assert used  # the overlapped path ran


if __name__ == "__main__":
    import tempfile

    table = {}
    for kind in RECIPES:
        with tempfile.TemporaryDirectory() as t:
            table[kind] = build(kind, Path(t))
    print(json.dumps({"environment": environment(), "artifacts": table}, indent=1,
                     sort_keys=True))
