"""Reading the text file a verb was given (``-`` for standard input), with one clear error.

Files go through ``nbdebug._files``: regular files only (a FIFO, a device such as ``/dev/zero`` or a folder is
refused with one ``NbdebugError`` that names the path), every read bounded.  Standard input is bounded too.
"""

from __future__ import annotations

import sys
from typing import BinaryIO

from nbdebug._files import DEFAULT_CAP, decode, read_bytes
from nbdebug.errors import NbdebugError

_CHUNK = 1 << 20
#: the most bytes read from standard input (``-``); a longer stream is refused rather than read on and on
STDIN_CAP = DEFAULT_CAP


def _read_stream(stream: BinaryIO, what: str, *, tail_bytes: int | None, cap: int) -> bytes:
    """At most ``cap`` bytes of a stream that cannot seek (only its last ``tail_bytes`` kept, when given)."""
    parts: list[bytes] = []
    kept = 0
    total = 0
    while chunk := stream.read(_CHUNK):
        total += len(chunk)
        if total > cap:
            raise NbdebugError(f"standard input ('-') gave more than {cap >> 20} MiB; expected {what} (save it to a "
                               "file and pass its path: a long log's end is read from a file)")
        parts.append(chunk)
        kept += len(chunk)
        if tail_bytes is not None:
            while parts and kept - len(parts[0]) >= tail_bytes:  # memory stays about tail_bytes + one chunk
                kept -= len(parts.pop(0))
    data = b"".join(parts)
    return data[-tail_bytes:] if tail_bytes is not None else data


def read_text(path: str, what: str, *, tail_bytes: int | None = None) -> str:
    """Return the text of ``path`` (``-``: stdin), undecodable bytes replaced; ``what`` names what was expected.

    ``tail_bytes`` keeps only the end of a long file or stream (a log's last lines hold its final error), so
    a multi-gigabyte log is never read into memory whole.  Without it a file is read up to ``DEFAULT_CAP``.
    """
    if path == "-":
        return decode(_read_stream(sys.stdin.buffer, what, tail_bytes=tail_bytes, cap=STDIN_CAP))
    if tail_bytes is not None:
        return decode(read_bytes(path, what, cap=tail_bytes, tail=True))
    return decode(read_bytes(path, what))
