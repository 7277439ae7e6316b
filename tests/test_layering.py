"""The package's layering, enforced (docs/architecture.md): a module may import
only from its own layer or the layers below it. Every `tqbuild` import counts,
module-level and function-local alike, so a lazy import cannot hide an upward
edge. A new upward edge fails here, naming the file, line and both layers."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "tqbuild"

# lowest first; a module belongs to the layer of its longest matching prefix
LAYERS: list[tuple[str, ...]] = [
    ("tqbuild", "tqbuild.errors", "tqbuild.divergence", "tqbuild.environment"),
    ("tqbuild.io.atomic", "tqbuild.io.paths", "tqbuild.io.hashing", "tqbuild.io.hash_cache",
     "tqbuild.kernels", "tqbuild.models"),
    ("tqbuild.formats", "tqbuild.inspect_artifact"),
    ("tqbuild.recipe", "tqbuild.io"),
    ("tqbuild.stages", "tqbuild.kv", "tqbuild.runtime", "tqbuild.eval"),
    ("tqbuild.pipeline",),
    ("tqbuild.verify", "tqbuild.eval.sensitivity"),
    ("tqbuild.upload", "tqbuild.cli", "tqbuild.__main__"),
]


def layer_of(module: str) -> int:
    best, level = "", -1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > len(best):
                best, level = p, i
    assert level >= 0, f"{module} is in no layer: add it to LAYERS"
    return level


def module_name(f: Path) -> str:
    parts = list(f.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(f: Path, text: str | None = None):
    """(line, imported tqbuild module) for every import in the file (or in
    `text`, read as that file)."""
    mod = module_name(f)
    package = mod.split(".") if f.name == "__init__.py" else mod.split(".")[:-1]
    for n in ast.walk(ast.parse(f.read_text() if text is None else text)):
        if isinstance(n, ast.ImportFrom) and n.level:
            base = package[: len(package) - n.level + 1]
            target = ".".join(base + ([n.module] if n.module else []))
            if n.module:
                yield n.lineno, target
            else:  # `from . import x`: x may be a module or a name
                for a in n.names:
                    sub = f"{target}.{a.name}"
                    yield n.lineno, sub if _exists(sub) else target
        elif isinstance(n, ast.ImportFrom) and (n.module or "").startswith("tqbuild"):
            yield n.lineno, n.module
        elif isinstance(n, ast.Import):
            for a in n.names:
                if a.name.startswith("tqbuild"):
                    yield n.lineno, a.name


def _exists(module: str) -> bool:
    p = PKG.parent.joinpath(*module.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


# The one sanctioned upward edge: the package root installs the post-import hook
# that registers the transformers quantizer (hf_register imports nothing heavy
# itself; the quantizer loads only when transformers' quantizer module does).
ALLOWED = {("tqbuild", "tqbuild.runtime.hf_register")}


def upward(f: Path, text: str | None = None) -> list[str]:
    me = module_name(f)
    return [f"{f.relative_to(PKG.parent)}:{line}: {me} (layer {layer_of(me)}) imports "
            f"{target} (layer {layer_of(target)})"
            for line, target in imports(f, text)
            if layer_of(target) > layer_of(me) and (me, target) not in ALLOWED]


def test_no_module_imports_a_higher_layer():
    assert [e for f in sorted(PKG.rglob("*.py")) for e in upward(f)] == []


def test_a_hidden_upward_edge_is_caught():
    f = PKG / "formats" / "trellis.py"
    text = f.read_text() + "\n\ndef _f():\n    from ..pipeline import graph\n"
    assert len(upward(f, text)) == 1 and "imports tqbuild.pipeline " in upward(f, text)[0]
    assert upward(f) == []
