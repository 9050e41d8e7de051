"""Read a snapshot pickle without ever running code from it, in memory bounded by the file's size.

``torch.cuda.memory._dump_snapshot`` writes plain ``pickle.dump`` output made only of dicts, lists, tuples, strings,
numbers, booleans and None.  Such a pickle needs no global at all, so the unpickler below refuses every one of them
(``find_class``) and every persistent id: a file that asks for ``os.system`` or any other callable is reported as
unsafe and nothing in it runs.  It subclasses the C unpickler, so loading keeps the speed of ``pickle.load``.

The C unpickler trusts the numbers in the file: a 9-byte pickle whose ``LONG_BINPUT`` names memo slot 2**29 makes
it allocate and clear 8 GB before anything is checked.  Two guards bound every file:

- an opcode walk (:func:`check_opcodes`, for files up to :data:`SCAN_LIMIT` and wherever the second guard is not
  available) refuses memo indexes, string lengths and frames larger than the file could hold, with the offset;
- on Linux the unpickler runs under an address-space limit of :data:`MEMORY_FACTOR` times the file's size plus
  :data:`MEMORY_BASE` (``RLIMIT_AS``, the previous limit put back right after): whatever a large file asks for
  beyond that is refused as ``MemoryError`` in the allocation that asks, before memory is touched.  Reads are
  capped at the bytes the file has left, so a huge length never allocates a huge buffer.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import re
import sys
from collections.abc import Iterator
from typing import Any

from nbdebug.errors import SnapshotError

__all__ = ["UnsafePickleError", "SafeUnpickler", "read_pickle", "check_opcodes", "no_gc", "SCAN_LIMIT", "MEMORY_FACTOR",
           "MEMORY_BASE"]

SCAN_LIMIT = 8 << 20  # files up to this size get the exact opcode walk (about 0.1 s at 8 MiB)
MEMORY_FACTOR = 32  # real snapshots unpickle into 5-8x their size
MEMORY_BASE = 1 << 30


class UnsafePickleError(pickle.UnpicklingError):
    """The pickle asked for a global (a class or function), which a memory snapshot never contains."""


class SafeUnpickler(pickle.Unpickler):
    """A C ``pickle.Unpickler`` that refuses every global and every persistent id."""

    def find_class(self, module: str, name: str) -> Any:  # noqa: D102
        raise UnsafePickleError(f"the pickle asks for the global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:  # noqa: D102
        raise UnsafePickleError(f"the pickle asks for the persistent object {pid!r}")


class _Bounded:
    """A binary file whose reads never ask for more than it has left (the C unpickler allocates what it asks)."""

    def __init__(self, fh: Any, size: int) -> None:
        self._fh = fh
        self._left = size

    def read(self, n: int = -1) -> bytes:
        n = self._left if n < 0 else min(n, self._left)
        data = self._fh.read(n)
        self._left -= len(data)
        return bytes(data)

    def peek(self, n: int = 0) -> bytes:
        # the C unpickler prefetches through peek (one call per buffer, not one per opcode of an unframed pickle)
        fh = self._fh
        if hasattr(fh, "peek"):
            data = fh.peek(n)
        else:
            pos = fh.tell()
            data = fh.read(max(n, 1))
            fh.seek(pos)
        return bytes(data[:self._left])

    def readinto(self, buf: Any) -> int:
        view = memoryview(buf).cast("B")
        got = self._fh.readinto(view[:self._left])
        self._left -= got
        return int(got)

    def readline(self, limit: int = -1) -> bytes:
        limit = self._left if limit < 0 else min(limit, self._left)
        data = self._fh.readline(limit)
        self._left -= len(data)
        return bytes(data)


# --- the opcode walk -------------------------------------------------------------------------------------------
# Runs of the opcodes that make up nearly all of a snapshot and need no check (containers, marks, memo gets and
# MEMOIZE, small ints, floats, small longs) are skipped by one regular expression at C speed; everything else is
# looked at one opcode at a time.
_SIMPLE = re.compile(
    rb"(?:h[\s\S]|[}\])(\x94useaN\x88\x89\x85\x86\x87t0l1d2]|j[\s\S]{4}|[Kq][\s\S]|M[\s\S]{2}|J[\s\S]{4}|G[\s\S]{8}|"
    + b"|".join(b"\\x8a" + re.escape(bytes([k])) + (b"[\\s\\S]{%d}" % k if k else b"") for k in range(9))
    + rb")*+")
_LINE, _PAIR = -1, -9  # argument up to a newline; two such lines (GLOBAL, INST)
_PREFIXED = {-2: (1, False), -3: (4, True), -4: (4, False), -5: (8, False)}  # pickletools' length-prefix codes
_TABLE: dict[int, tuple[str, int]] = {}


def _table() -> dict[int, tuple[str, int]]:
    """opcode byte -> (name, argument width or one of the codes above), from the standard library's own table."""
    if not _TABLE:
        import pickletools

        for op in pickletools.opcodes:
            width = 0 if op.arg is None else op.arg.n
            if op.name in ("GLOBAL", "INST"):
                width = _PAIR
            _TABLE[ord(op.code.encode("latin-1"))] = (op.name, width)
    return _TABLE


def check_opcodes(data: bytes | memoryview, name: str = "the pickle") -> None:
    """Walk the opcodes of ``data`` and refuse any that asks for more than the file could hold.

    A memo index (``PUT``/``BINPUT``/``LONG_BINPUT``) beyond the file's length, a string, bytes or long whose
    length runs past the end, a ``FRAME`` longer than what is left, an unknown opcode or a missing ``STOP`` raise
    :class:`SnapshotError` naming the opcode and its offset.  Globals are left to :class:`SafeUnpickler`, which
    refuses them with their name.
    """
    table = _table()
    view = memoryview(data).cast("B")
    n = len(view)
    raw = bytes(view) if not isinstance(data, bytes) else data
    run = _SIMPLE.match
    pos = 0

    def refuse(what: str) -> SnapshotError:
        return SnapshotError(f"{name} is not a readable snapshot: {what} at byte {pos} of a {n}-byte file; a pickle "
                             "written by torch.cuda.memory._dump_snapshot never does this, so it was refused unread")

    while True:
        pos = run(raw, pos).end()  # type: ignore[union-attr]  # a possessive * always matches
        if pos >= n:
            raise SnapshotError(f"{name} is truncated (the pickle ends at byte {n} without its STOP opcode); "
                                "expected a complete snapshot file")
        code = raw[pos]
        entry = table.get(code)
        if entry is None:
            raise refuse(f"byte {code:#04x} is not a pickle opcode")
        opname, width = entry
        start = pos + 1
        if opname == "STOP":
            return
        if width >= 0:
            end = start + width
            if end > n:
                raise SnapshotError(f"{name} is truncated (its {opname} at byte {pos} needs {width} more bytes); "
                                    "expected a complete snapshot file")
            if opname == "LONG_BINPUT":
                index = int.from_bytes(raw[start:end], "little")
                if index > n:
                    raise refuse(f"LONG_BINPUT asks for memo slot {index:,}, more than a {n}-byte pickle could fill,")
            elif opname == "FRAME":
                length = int.from_bytes(raw[start:end], "little")
                if length > n - end:
                    raise refuse(f"a FRAME of {length:,} bytes (only {n - end:,} follow)")
            pos = end
        elif width in _PREFIXED:
            k, signed = _PREFIXED[width]
            if start + k > n:
                raise SnapshotError(f"{name} is truncated (in the {opname} at byte {pos}); expected a complete "
                                    "snapshot file")
            length = int.from_bytes(raw[start:start + k], "little", signed=signed)
            if length < 0 or length > n - start - k:
                raise refuse(f"{opname} of {length:,} bytes (only {n - start - k:,} follow)")
            pos = start + k + length
        else:  # text arguments (protocol 0): one line, or two for GLOBAL and INST
            end = raw.find(b"\n", start)
            if width == _PAIR and end >= 0:
                end = raw.find(b"\n", end + 1)
            if end < 0:
                raise SnapshotError(f"{name} is truncated (its {opname} at byte {pos} has no end of line); "
                                    "expected a complete snapshot file")
            if opname == "PUT":
                digits = raw[start:end].strip()
                if not digits.isdigit() or len(digits) > 20 or int(digits) > n:
                    raise refuse(f"PUT asks for memo slot {digits[:24]!r}, more than a {n}-byte pickle could fill,")
            pos = end + 1


# --- the address-space guard -----------------------------------------------------------------------------------
def _guard_available() -> bool:
    return sys.platform.startswith("linux") and os.path.exists("/proc/self/statm")


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector (unpickling a million dicts otherwise spends two thirds of its time in
    collections that find nothing: a snapshot has no cycles); its previous state is put back."""
    import gc

    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@contextlib.contextmanager
def _memory_guard(size: int) -> Iterator[int]:
    """Limit this process's address space to what it uses now plus a budget for a ``size``-byte file."""
    import resource

    budget = MEMORY_BASE + MEMORY_FACTOR * size
    with open("/proc/self/statm", "rb") as fh:
        used = int(fh.read().split()[0]) * resource.getpagesize()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = used + budget
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    if soft != resource.RLIM_INFINITY and soft <= limit:
        yield budget  # a tighter limit is already in place
        return
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield budget
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


# --- reading ---------------------------------------------------------------------------------------------------
def _describe(source: str, data_head: bytes) -> str:
    if not data_head:
        return f"{source} is empty"
    if data_head[:1] in (b"{", b"["):
        return f"{source} looks like JSON or text, not a pickle"
    if data_head[:2] == b"PK":
        return f"{source} is a zip archive (a torch.save file?), not a snapshot pickle"
    return f"{source} does not start like a pickle (first bytes {data_head[:8]!r})"


def _size_text(size: int) -> str:
    from nbdebug._units import fmt_bytes

    return fmt_bytes(size)


def read_pickle(source: str | os.PathLike[str] | bytes | bytearray | memoryview, *, label: str | None = None) -> Any:
    """Unpickle ``source`` (a path or the bytes of a file) with :class:`SafeUnpickler`, in bounded memory.

    Raises
    ------
    SnapshotError
        Not a pickle, truncated, unsafe (asks for a global), or asks for more memory than its size could justify;
        the message names the file.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        name = label or "the given bytes"
        blob = source if isinstance(source, bytes) else bytes(source)  # any buffer, contiguous or not
        fh: Any = io.BytesIO(blob)
        size = len(blob)
    else:
        name = label or repr(os.fspath(source))
        try:
            fh = open(source, "rb")  # noqa: SIM115 - closed below
            size = os.fstat(fh.fileno()).st_size
        except OSError as e:
            raise SnapshotError(f"cannot read {name}: {e.strerror}; expected a memory snapshot pickle file") from e
    try:
        head = fh.read(8)
        fh.seek(0)
        if head[:1] in (b"{", b"["):  # PyTorch's own viewer accepts JSON snapshots too
            import json

            try:
                return json.loads(fh.read().decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError) as e:
                raise SnapshotError(f"{name} starts like JSON but is not valid JSON ({e}); expected a snapshot "
                                    "pickle, or the snapshot dict as JSON") from e
        if not head or head[:1] != b"\x80" and head[:1] not in (b"(", b"]", b"}", b"l", b"d"):
            raise SnapshotError(_describe(name, head) + "; expected a pickle written by torch.cuda.memory._dump_snapshot")
        guarded = _guard_available()
        if size <= SCAN_LIMIT or not guarded:
            data = fh.read()
            fh.close()
            fh = io.BytesIO(data)
            check_opcodes(data, name)
        budget = 0
        try:
            with no_gc():
                if guarded:
                    with _memory_guard(size) as budget:
                        return SafeUnpickler(_Bounded(fh, size)).load()
                return SafeUnpickler(_Bounded(fh, size)).load()
        except UnsafePickleError as e:
            raise SnapshotError(
                f"{name} is not a plain snapshot and was refused unread: {e}. A memory snapshot holds only dicts, "
                "lists, strings and numbers; this file could run code if loaded with pickle.load"
            ) from e
        except EOFError as e:
            raise SnapshotError(f"{name} is truncated (the pickle ends early); expected a complete snapshot file") from e
        except MemoryError as e:
            if not budget:
                raise
            raise SnapshotError(
                f"{name} asks for more than {_size_text(budget)} of memory while unpickling, which a "
                f"{_size_text(size)} snapshot cannot need ({MEMORY_FACTOR}x its size plus {_size_text(MEMORY_BASE)}); "
                "refused: a memo index, length or object count in it is larger than the file could hold") from e
        except (pickle.UnpicklingError, ValueError, TypeError, IndexError, KeyError, AttributeError,
                OverflowError, RecursionError, UnicodeDecodeError) as e:
            raise SnapshotError(f"{name} is not a readable pickle ({type(e).__name__}: {e}); "
                                "expected a pickle written by torch.cuda.memory._dump_snapshot") from e
    finally:
        fh.close()
