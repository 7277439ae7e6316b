"""Registers tq-build's transformers quantizer (runtime/hf_quantizer.py) without
importing transformers: at `import tqbuild`, a post-import hook is installed
for `transformers.quantizers.auto`; when that module has loaded (or at once if
it already has), the quantizer registers itself."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import warnings

TARGET = "transformers.quantizers.auto"


def register() -> None:
    try:
        from . import hf_quantizer  # noqa: F401  (registers on import)
    except Exception as e:  # an incompatible transformers must not break tq-build
        warnings.warn(f"tq-build's transformers quantizer was not registered: {e}",
                      stacklevel=2)


class _Loader(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        register()


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def install() -> None:
    if TARGET in sys.modules:
        register()
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
