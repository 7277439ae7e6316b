"""User paths (from a recipe, an override or the command line) checked before
use: every failure of the whole class — a name too long, a NUL or control
character, no permission, a symlink loop, a path through a file, a FIFO or
device where a file is expected — becomes a BadInput naming the place and a
fix, never an OSError traceback."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

from ..errors import BadInput

NAME_MAX = 255  # bytes per path component (Linux, macOS)
PATH_MAX = 4095  # bytes in a whole path

_REASONS = {
    errno.ENAMETOOLONG: "its name is too long",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ELOOP: "it runs into a symbolic-link loop",
    errno.ENOTDIR: "one of its parent components is a file, not a directory",
    errno.ENOENT: "it does not exist",
}
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR,
          "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def syntax_problem(raw: str) -> str | None:
    """What makes a string unusable as a path on any file system, or None."""
    if not raw:
        return "it is empty"
    bad = next((c for c in raw if ord(c) < 32 or c == "\x7f"), None)
    if bad is not None:
        return f"it contains the control character {bad!r}"
    b = os.fsencode(raw)
    if len(b) > PATH_MAX:
        return f"it is {len(b)} bytes long (at most {PATH_MAX})"
    longest = max(b.split(b"/"), key=len)
    if len(longest) > NAME_MAX:
        return (f"a component is {len(longest)} bytes long (at most {NAME_MAX}): "
                f"{os.fsdecode(longest[:40])}…")
    return None


def _short(p: str | Path) -> str:
    s = str(p)
    return s if len(s) <= 120 else s[:100] + f"… ({len(s)} characters)"


def describe(e: OSError) -> str:
    return _REASONS.get(e.errno or 0, e.strerror or type(e).__name__)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "a special file")


def _check(raw: str | Path, what: str, where: str | None, fix: str, error: type[BadInput],
           probe: Callable[[Path], str | None]) -> Path:
    """The shared frame: the syntax check, then `probe` (which may stat and raise),
    every OSError turned into its reason, and one error naming the place."""
    p = Path(raw).expanduser()
    reason = syntax_problem(str(raw))
    if reason is None:
        try:
            reason = probe(p)
        except OSError as e:
            reason = describe(e)
        except ValueError as e:  # what syntax_problem missed (e.g. a surrogate)
            reason = str(e)
    if reason is not None:
        raise error(f"{what} {_short(raw)}: {reason}", where=where, fix=fix)
    return p


def checked(raw: str | Path, *, what: str, where: str | None, fix: str,
            kind: str = "any", error: type[BadInput] = BadInput) -> Path:
    """An existing path, of `kind` ('file': a regular file; 'dir'; 'any')."""
    def probe(p: Path) -> str | None:
        mode = os.stat(p).st_mode
        if kind == "file" and not stat.S_ISREG(mode):
            return f"it is {_kind(mode)}, not a regular file"
        if kind == "dir" and not stat.S_ISDIR(mode):
            return "it is not a directory"
        return None

    return _check(raw, what, where, fix, error, probe)


def creatable(raw: str | Path, *, what: str, where: str | None, fix: str) -> Path:
    """A path a directory can be created at: syntactically valid, and its nearest
    existing ancestor a searchable, writable directory (an existing directory
    itself is fine)."""
    def probe(p: Path) -> str | None:
        target = q = p.absolute()
        while True:
            try:
                mode = os.stat(q).st_mode
                break
            except FileNotFoundError:
                if q.parent == q:
                    raise
                q = q.parent
        if not stat.S_ISDIR(mode):
            return "it exists and is not a directory" if q == target else \
                f"{_short(q)} is a file, not a directory"
        if not os.access(q, os.W_OK | os.X_OK):
            return f"{_short(q)} is not writable"
        return None

    return _check(raw, what, where, fix, BadInput, probe)


def writable_file(raw: str | Path, *, what: str, where: str | None, fix: str) -> Path:
    """A file to create or append to: a usable name in a creatable directory; if it
    exists, a regular file or a character device (/dev/null, /dev/stdout)."""
    def probe(p: Path) -> str | None:
        creatable(p.parent, what=what, where=where, fix=fix)
        try:
            mode = os.stat(p).st_mode
        except FileNotFoundError:
            return None
        return None if stat.S_ISREG(mode) or stat.S_ISCHR(mode) else f"it is {_kind(mode)}"

    return _check(raw, what, where, fix, BadInput, probe)
