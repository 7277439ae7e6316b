"""Typed errors. Each names what went wrong, where, and the fix; the CLI prints
them without a traceback and exits with `exit_code`."""

from __future__ import annotations


class TQError(Exception):
    """Base error: a message, an optional place (file:line or tensor) and a fix."""

    exit_code = 1

    def __init__(self, message: str, *, where: str | None = None, fix: str | None = None):
        super().__init__(message)
        self.message = message
        self.where = where
        self.fix = fix

    def __str__(self) -> str:
        head = f"{self.where}: {self.message}" if self.where else self.message
        return f"{head}\n  fix: {self.fix}" if self.fix else head


class BadInput(TQError):
    """The user's input (recipe, source, paths) is wrong; exit 2."""

    exit_code = 2


class RecipeError(BadInput):
    """A recipe file is malformed or asks for something impossible."""


class SourceError(BadInput):
    """A source checkpoint cannot be used as given."""


class UnsupportedSize(BadInput):
    """A tensor dimension no construction supports (Hadamard size, group size)."""


class OutputError(BadInput):
    """The output or work directory cannot be written."""


class VerificationFailed(TQError):
    """An artifact does not match what was recorded; exit 3."""

    exit_code = 3
