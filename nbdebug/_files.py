"""The one way nbdebug reads and writes files: what a file is, where it points and how big it is are checked here.

Reading (``read_bytes``, ``read_text``, ``folder_files``):

- regular files only: a FIFO, a device (``/dev/zero``), a socket or a folder is refused with one ``NbdebugError``
  that says what it is (a FIFO is opened without blocking, so asking never hangs);
- within a folder given by the user, a symlink is followed only when its target stays inside that folder; one that
  points out (or loops) is skipped and listed, so nothing from elsewhere is quoted into a report;
- every read is bounded: at most ``cap`` bytes, read with ``read()`` (never a memory map, which a file shrinking
  under it turns into SIGBUS), so a file that grows or shrinks while it is read gives what was there, no more;
- decoding is one pass over the bytes (UTF-8, undecodable bytes replaced; universal newlines).

Writing (``write_file``, ``open_append``):

- a file is written under a temporary name created with ``O_EXCL | O_NOFOLLOW`` next to it, then renamed onto
  the final name: a symlink planted at the final name is replaced, never written through, and a reader never sees
  half a file;
- a file kept open for appending (a rank's log, kept for faulthandler) is opened with ``O_NOFOLLOW``.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TextIO

from nbdebug.errors import NbdebugError

__all__ = ["DEFAULT_CAP", "read_bytes", "read_text", "decode", "folder_files", "Skipped", "write_file",
           "open_append", "kind_of"]

#: the most bytes one read takes unless the reader says otherwise (a log or report larger than this is cut)
DEFAULT_CAP = 256 << 20
_CHUNK = 1 << 20
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def kind_of(mode: int) -> str:
    """What a file is, in words, from its ``st_mode`` (``"a regular file"``, ``"a FIFO"``, ...)."""
    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symlink")):
        if test(mode):
            return name
    return "not a regular file"


def _open_regular(path: str, what: str, *, follow: bool = True) -> int:
    """An fd of ``path`` opened for reading, after checking it is a regular file (never blocks on a FIFO)."""
    flags = os.O_RDONLY | _NONBLOCK | (0 if follow else _NOFOLLOW) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise NbdebugError(f"cannot read {path!r}: it is a symlink, which is not followed here; expected "
                               f"{what}") from e
        raise NbdebugError(f"cannot read {path!r}: {e.strerror}; expected {what}") from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NbdebugError(f"cannot read {path!r}: it is {kind_of(st.st_mode)}, not a regular file; "
                               f"expected {what}")
        if _NONBLOCK:  # a regular file reads the same either way; blocking reads are the plain ones
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(path: str | os.PathLike[str], what: str, *, cap: int = DEFAULT_CAP, tail: bool = False,
               follow: bool = True) -> bytes:
    """The bytes of the regular file ``path``: at most ``cap`` of them (its start, or its end with ``tail``).

    ``what`` names what was expected, for the one error a bad path gets.  ``follow=False`` refuses a symlink.
    """
    path = os.fspath(path)
    fd = _open_regular(path, what, follow=follow)
    try:
        if tail:
            size = os.fstat(fd).st_size
            if size > cap:
                os.lseek(fd, size - cap, os.SEEK_SET)
        parts: list[bytes] = []
        left = cap
        while left > 0:
            chunk = os.read(fd, min(_CHUNK, left))
            if not chunk:  # the end, also of a file that shrank while it was read
                break
            parts.append(chunk)
            left -= len(chunk)
        return b"".join(parts)
    except OSError as e:
        raise NbdebugError(f"cannot read {path!r}: {e.strerror}; expected {what}") from e
    finally:
        os.close(fd)


def decode(data: bytes) -> str:
    """UTF-8 with undecodable bytes replaced, and the universal newlines a file opened in text mode gets."""
    text = data.decode("utf-8", errors="replace")
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def read_text(path: str | os.PathLike[str], what: str, *, cap: int = DEFAULT_CAP, tail: bool = False,
              follow: bool = True) -> str:
    """``read_bytes`` decoded (see ``decode``)."""
    return decode(read_bytes(path, what, cap=cap, tail=tail, follow=follow))


@dataclass(frozen=True)
class Skipped:
    """A path in a folder that was not read, and why (a symlink out of the folder, a FIFO, too many files)."""

    path: str
    why: str


def folder_files(root: str | os.PathLike[str], *, limit: int = 1_000_000,
                 skipped: list[Skipped] | None = None) -> Iterator[str]:
    """The regular files below the folder ``root``, in sorted order, depth first.

    A symlink is followed only when its target (resolved) stays inside ``root``; a symlink out of it, one that
    loops or dangles, a FIFO, a device or a socket is not yielded but appended to ``skipped`` with the reason.
    At most ``limit`` files are yielded; the rest are counted in ``skipped`` as one entry.
    """
    base = os.path.realpath(os.fspath(root))
    note = skipped.append if skipped is not None else (lambda s: None)
    seen_dirs: set[str] = set()
    count = 0
    stack = [base]
    while stack:
        folder = stack.pop()
        real = os.path.realpath(folder)
        if real in seen_dirs:
            continue
        seen_dirs.add(real)
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name, reverse=True)
        except OSError as e:
            note(Skipped(folder, f"cannot be listed: {e.strerror}"))
            continue
        subdirs = []
        for entry in reversed(entries):
            path = entry.path
            try:
                if entry.is_symlink():
                    target = os.path.realpath(path)
                    if target != base and not target.startswith(base + os.sep):
                        note(Skipped(path, "a symlink that points out of the folder (not followed)"))
                        continue
                st = os.stat(path)
            except OSError as e:
                note(Skipped(path, f"cannot be read: {e.strerror} (a dangling or looping symlink?)"))
                continue
            if stat.S_ISDIR(st.st_mode):
                subdirs.append(path)
            elif stat.S_ISREG(st.st_mode):
                if count >= limit:
                    note(Skipped(path, f"more than {limit} files: this one and the rest were not read"))
                    return
                count += 1
                yield path
            else:
                note(Skipped(path, f"{kind_of(st.st_mode)}, not a regular file"))
        stack.extend(reversed(subdirs))


def write_file(path: str | os.PathLike[str], data: bytes | str, *, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` through a new temporary file next to it, renamed onto ``path`` at the end.

    The temporary file is created with ``O_EXCL | O_NOFOLLOW`` (a symlink planted under any name is never written
    through) and the rename replaces whatever ``path`` was, a symlink included, in one step.
    """
    path = os.fspath(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    folder = os.path.dirname(os.path.abspath(path))
    tmp = ""
    for attempt in range(100):
        tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.{attempt}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0), mode)
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - a hundred stale temporary files of this very process
        raise NbdebugError(f"cannot write {path!r}: no free temporary name next to it")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def open_append(path: str | os.PathLike[str], *, mode: int = 0o644, encoding: str = "utf-8") -> TextIO:
    """A text file opened for appending (created if missing) that is never a symlink (``O_NOFOLLOW``)."""
    fd = os.open(os.fspath(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                 mode)
    return os.fdopen(fd, "a", encoding=encoding)
