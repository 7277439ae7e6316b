"""Stored formats: one spec object per format (formats/spec.py), all in FORMATS.
A new format is one module here that defines its spec, plus its tests."""

from __future__ import annotations

from .mlx_affine import AFFINE
from .mx import MX
from .spec import FormatSpec
from .trellis import TRELLIS

FORMATS: dict[str, FormatSpec] = {"affine": AFFINE, "trellis": TRELLIS, **MX}


def format_of(entry: dict) -> FormatSpec:
    """The spec of a config entry (`mode`, default affine) or a metadata record
    (`format`)."""
    name = entry.get("format") or entry.get("mode", "affine")
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown stored format {name!r} (known: "
                         f"{', '.join(FORMATS)})") from None
