"""artifacts.lock (DESIGN §6), modelled on dvc.lock: per built recipe, the
recipe hash (text + overrides), the params each stage used, inputs and
outputs as {path, sha256, size}, and tool/library versions.

Paths are relative to the lock's directory where they lie under it. What is
up to date is decided cheapest first: recipe hash, then input sizes and
hashes, then outputs; file hashes come from a cache keyed by size, mtime and
inode, so unchanged multi-GB shards are not re-read.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from .. import __version__
from ..errors import BadInput, TQError
from ..io.atomic import write_json
from ..io.hash_cache import HashCache
from ..recipe import load
from ..stages.calib_data import calibration_files

SCHEMA = 1
LOCK_NAME = "artifacts.lock"
LIBRARIES = ("torch", "transformers", "numpy", "safetensors", "gguf", "mlx", "mlx-lm",
             "pydantic")


def default_lock_path(recipe_file: Path) -> Path:
    """`artifacts.lock` at the repository root: the nearest ancestor of the recipe
    holding `.git` or an `artifacts.lock`, else the recipe's own directory."""
    start = Path(recipe_file).resolve().parent
    for d in (start, *start.parents):
        if (d / LOCK_NAME).is_file() or (d / ".git").exists():
            return d / LOCK_NAME
    return start / LOCK_NAME


def versions() -> dict[str, str]:
    out = {"tq-build": __version__, "python": platform.python_version()}
    for lib in LIBRARIES:
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            pass
    return out


def rel(path: Path, base: Path) -> str:
    p = Path(os.path.abspath(path))
    try:
        return p.relative_to(Path(os.path.abspath(base))).as_posix()
    except ValueError:
        return p.as_posix()


def file_entry(path: Path, base: Path, cache: HashCache) -> dict:
    return {"path": rel(path, base), "sha256": cache.sha256(path), "size": path.stat().st_size}


def stage_params(plan) -> dict:
    """Only the params each stage uses (calibration belongs to `calibrate`)."""
    out = {}
    for s in plan.recipe.stages:
        p = s.params.model_dump(mode="json") if s.params is not None else {}
        if s.name == "quantize" and plan.allocations:
            p = {**p, "allocations": plan.allocations}
        out[s.name] = p
    return out


def input_files(plan, source, gguf: Path | None) -> list[Path]:
    files = [gguf] if gguf else [*source.files, source.path / "config.json",
                                 *source.passthrough_files()]
    calib = plan.recipe.stage("calibrate")
    if calib is not None and calib.source.files:
        files += calibration_files(calib.source.files)
    return files + list(plan.kmap_files)


def make_entry(plan, source, gguf: Path | None, output: Path, lock_path: Path,
               cache: HashCache) -> dict:
    base = lock_path.parent
    r = plan.recipe
    return {
        "recipe": {"path": rel(Path(r.file), base), "sha256": r.hash,
                   "overrides": list(r.overrides)},
        "stages": stage_params(plan),
        "inputs": [file_entry(f, base, cache) for f in input_files(plan, source, gguf)],
        "outputs": [file_entry(f, base, cache) for f in sorted(Path(output).rglob("*"))
                    if f.is_file()],
        "output_dir": rel(Path(output), base),
        "versions": versions(),
    }


def read_lock(path: Path) -> dict:
    if not path.is_file():
        return {"schema": SCHEMA, "recipes": {}}
    try:
        data = json.loads(path.read_text())
    except ValueError as e:
        raise BadInput(f"{path} is not valid JSON ({e})", where=str(path),
                       fix="restore it from version control or delete it and rebuild") from None
    if data.get("schema") != SCHEMA:
        raise BadInput(f"{path} has schema {data.get('schema')!r}; this tq-build reads "
                       f"schema {SCHEMA}", where=str(path), fix="rebuild to rewrite the lock")
    return data


def update_lock(path: Path, name: str, entry: dict) -> None:
    data = read_lock(path)
    data["recipes"][name] = entry
    data["recipes"] = dict(sorted(data["recipes"].items()))
    write_json(path, data)


@dataclass
class Finding:
    kind: str  # recipe | input | output
    path: str
    why: str

    def __str__(self) -> str:
        return f"{self.kind} {self.path}: {self.why}"


def check_files(entries: list[dict], base: Path, cache: HashCache, kind: str) -> list[Finding]:
    out = []
    for e in entries:
        f = Path(e["path"]) if Path(e["path"]).is_absolute() else base / e["path"]
        if not f.is_file():
            out.append(Finding(kind, e["path"], "missing"))
        elif f.stat().st_size != e["size"]:
            out.append(Finding(kind, e["path"], f"size {f.stat().st_size} != locked "
                               f"{e['size']}"))
        elif cache.sha256(f) != e["sha256"]:
            out.append(Finding(kind, e["path"], "sha256 differs from the lock"))
    return out


def check_entry(entry: dict, base: Path, cache: HashCache) -> list[Finding]:
    """Cheapest first; stops at the first stage that finds something."""

    rpath = base / entry["recipe"]["path"] if not Path(entry["recipe"]["path"]).is_absolute() \
        else Path(entry["recipe"]["path"])
    if not rpath.is_file():
        return [Finding("recipe", entry["recipe"]["path"], "missing")]
    try:
        h = load(rpath, entry["recipe"].get("overrides", [])).hash
    except TQError as e:
        return [Finding("recipe", entry["recipe"]["path"], f"does not load ({e.message})")]
    if h != entry["recipe"]["sha256"]:
        return [Finding("recipe", entry["recipe"]["path"], "changed since the build "
                        "(recipe hash differs)")]
    found = check_files(entry["inputs"], base, cache, "input")
    if found:
        return found
    return check_outputs(entry, base, cache)


def check_outputs(entry: dict, base: Path, cache: HashCache) -> list[Finding]:
    found = check_files(entry["outputs"], base, cache, "output")
    out_dir = base / entry["output_dir"]
    locked = {e["path"] for e in entry["outputs"]}
    if out_dir.is_dir():
        for f in sorted(out_dir.rglob("*")):
            if f.is_file() and rel(f, base) not in locked:
                found.append(Finding("output", rel(f, base), "not in the lock"))
    return found


def entry_for_artifact(lock: dict, artifact: Path, base: Path) -> tuple[str, dict] | None:
    want = rel(artifact, base)
    for name, e in lock["recipes"].items():
        if e.get("output_dir") == want:
            return name, e
    return None
