"""The library entry point the CLI, `sensitivity` and the tests share:
`prepare` reads and checks a recipe, resolves its source and compiles the
plan (bad input fails here, before any slow step); `run` builds it.

    prepared = prepare("recipes/smollm2-q45.yaml")
    result = run(prepared, BuildOptions(device="cuda"))
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..io.paths import creatable
from ..io.resolve import resolve_source
from ..io.source import Source
from ..recipe import Recipe, load
from .distributed import Dist
from .executor import BuildOptions, BuildResult, build
from .graph import Plan, compile_plan


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
    return Prepared(recipe, compile_plan(recipe, source, allocate=allocate), source, gguf, out,
                    Path(workdir or recipe.workdir))


def run(prepared: Prepared, options: BuildOptions = BuildOptions(), *, log=print,
        events=None, dist: Dist | None = None) -> BuildResult:
    p = prepared
    return build(p.plan, p.source, p.output, options, gguf=p.gguf, workdir=p.workdir,
                 log=log, events=events, dist=dist)
