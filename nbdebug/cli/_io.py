"""Reading the text file a verb was given (``-`` for standard input), with one clear error."""

from __future__ import annotations

import os
import sys
from typing import BinaryIO

from nbdebug.errors import NbdebugError

_CHUNK = 1 << 20


def _tail_of_stream(stream: BinaryIO, limit: int) -> bytes:
    """The last ``limit`` bytes of a stream that cannot seek, read in chunks (memory stays about 2x limit)."""
    kept = b""
    while chunk := stream.read(_CHUNK):
        kept = (kept + chunk)[-limit:]
    return kept


def read_text(path: str, what: str, *, tail_bytes: int | None = None) -> str:
    """Return the text of ``path`` (``-``: stdin), undecodable bytes replaced; ``what`` names what was expected.

    ``tail_bytes`` keeps only the end of a long file or stream (a log's last lines hold its final error), so
    a multi-gigabyte log is never read into memory whole.
    """
    if path == "-":
        stream = sys.stdin.buffer
        data = stream.read() if tail_bytes is None else _tail_of_stream(stream, tail_bytes)
        return data.decode("utf-8", errors="replace")
    try:
        with open(path, "rb") as fh:
            if tail_bytes is not None:
                size = fh.seek(0, os.SEEK_END)
                fh.seek(max(0, size - tail_bytes))
            data = fh.read()
    except OSError as e:
        raise NbdebugError(f"cannot read {path!r}: {e.strerror}; expected {what}") from e
    # the universal newlines a file opened in text mode gets
    return data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")
