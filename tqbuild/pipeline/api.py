"""The library entry point the CLI, `sensitivity` and the tests share:
`prepare` reads and checks a recipe, resolves its source and compiles the
plan (bad input fails here, before any slow step); `run` builds it.

    prepared = prepare("recipes/smollm2-q45.yaml")
    result = run(prepared, BuildOptions(device="cuda"))
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..io.hash_cache import HashCache
from ..io.paths import creatable
from ..io.resolve import resolve_source
from ..io.source import Source
from ..recipe import Recipe, load
from .distributed import Dist
from .evaluate import texts_of
from .executor import BuildOptions, BuildResult, build
from .graph import Plan, compile_plan
from .lock import check_entry, make_entry, read_lock, rel, update_lock


@dataclass(frozen=True)
class Prepared:
    recipe: Recipe
    plan: Plan
    source: Source
    gguf: Path | None  # the GGUF file the source was converted from
    output: Path
    workdir: Path


def prepare(recipe_path: Path | str, workdir: Path | None = None, overrides=(),
            output: Path | None = None, log=print, allocate: bool = True) -> Prepared:
    """`overrides`: `--set key=value` strings; `workdir` / `output` replace the
    recipe's. The work and output directories are checked before the source is
    resolved (which may convert a GGUF)."""
    recipe = load(Path(recipe_path), tuple(overrides or ()))
    root = creatable(workdir or recipe.workdir, what="work directory",
                     where="--workdir" if workdir else recipe.line_of("workdir"),
                     fix="choose a writable directory with a plain name (the recipe's "
                     "`workdir:` or --workdir)")
    out = creatable(output or recipe.output, what="output directory",
                    where="--output" if output else recipe.line_of("output"),
                    fix="choose a writable directory with a plain name (the recipe's "
                    "`output:` or --output)")
    src_dir, gguf = resolve_source(recipe, root / "cache", log=log)
    source = Source(src_dir, trust_remote_code=recipe.source.trust_remote_code)
    plan = compile_plan(recipe, source, allocate=allocate)
    if recipe.evaluate is not None:  # a missing text fails now, not after the build
        texts_of(recipe.evaluate, recipe.line_of("stages"))
    for f in plan.seed_findings:
        if f["action"] == "warned":
            log(f"warning: {f['name']}: {f['reason']}; fix: {f['fix']} (or `allow: "
                f"[{f['name']}]` to silence this)")
    return Prepared(recipe, plan, source, gguf, out, Path(workdir or recipe.workdir))


def run(prepared: Prepared, options: BuildOptions = BuildOptions(), *, log=print,
        events=None, dist: Dist | None = None) -> BuildResult:
    p = prepared
    return build(p.plan, p.source, p.output, options, gguf=p.gguf, workdir=p.workdir,
                 log=log, events=events, dist=dist)


def _hash_cache(lock_path: Path) -> HashCache:
    return HashCache(lock_path.parent / ".tq-work" / "hash-cache.json")


def up_to_date(prepared: Prepared, lock_path: Path) -> bool:
    """Whether `lock_path` records this recipe, at this output, and every input
    and output still matches it (cheapest checks first)."""
    entry = read_lock(lock_path)["recipes"].get(prepared.recipe.name)
    if entry is None or entry.get("output_dir") != rel(prepared.output, lock_path.parent):
        return False
    cache = _hash_cache(lock_path)
    ok = not check_entry(entry, lock_path.parent, cache)
    cache.save()
    return ok


def record_in_lock(prepared: Prepared, lock_path: Path) -> None:
    """Write this build's entry (inputs, params, outputs, versions) into the lock."""
    p, cache = prepared, _hash_cache(lock_path)
    update_lock(lock_path, p.recipe.name,
                make_entry(p.plan, p.source, p.gguf, p.output, lock_path, cache))
    cache.save()
