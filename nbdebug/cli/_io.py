"""Reading the text file a verb was given (``-`` for standard input), with one clear error."""

from __future__ import annotations

import sys

from nbdebug.errors import NbdebugError


def read_text(path: str, what: str) -> str:
    """Return the text of ``path`` (``-``: stdin), undecodable bytes replaced; ``what`` names what was expected."""
    if path == "-":
        return sys.stdin.buffer.read().decode("utf-8", errors="replace")
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError as e:
        raise NbdebugError(f"cannot read {path!r}: {e.strerror}; expected {what}") from e
