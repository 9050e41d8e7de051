"""Read a snapshot pickle without ever running code from it, in memory bounded by the file's size.

``torch.cuda.memory._dump_snapshot`` writes plain ``pickle.dump`` output made only of dicts, lists, tuples, strings,
numbers, booleans and None.  Such a pickle needs no global at all, so the unpickler below refuses every one of them
(``find_class``) and every persistent id: a file that asks for ``os.system`` or any other callable is reported as
unsafe and nothing in it runs.  It subclasses the C unpickler, so loading keeps the speed of ``pickle.load``.

The C unpickler trusts the numbers in the file: a 9-byte pickle whose ``LONG_BINPUT`` names memo slot 2**29 makes
it allocate and clear 8 GB before anything is checked.  Reads are capped at the bytes the file has left, so a huge
length never fills a huge buffer; the memo is the allocation left to bound, and two guards do it:

- an opcode walk (:func:`check_opcodes`, linear, over a memory map of the file so it adds no copy) refuses memo
  indexes, string lengths and frames larger than the file could hold, with the offset.  Every file up to
  :data:`SCAN_LIMIT` gets it, and every file at all where the second guard is not used;
- a file larger than that, read on the main thread of a Linux process where CUDA is not initialised, is unpickled
  under an address-space limit of :data:`MEMORY_FACTOR` times its size plus :data:`MEMORY_BASE` above what the
  process uses now (``RLIMIT_AS``, put back right after, one load at a time): the walk costs about as much as
  ``pickle.load`` itself on a 100 MB snapshot.  The limit is process-wide while it holds, which is why it is never
  used beside CUDA (whose address-space reservations it would break) or from another thread.
"""

from __future__ import annotations

import contextlib
import io
import mmap
import os
import pickle
import re
import sys
import threading
from collections.abc import Iterator
from typing import Any

from nbdebug._units import fmt_bytes
from nbdebug.errors import SnapshotError

__all__ = ["UnsafePickleError", "SafeUnpickler", "read_pickle", "check_opcodes", "no_gc", "SCAN_LIMIT",
           "MEMORY_FACTOR", "MEMORY_BASE"]

SCAN_LIMIT = 32 << 20  # files up to this size always get the opcode walk (about 0.35 s at 32 MiB)
MEMORY_FACTOR = 32  # real snapshots unpickle into 5-8x their size
MEMORY_BASE = 1 << 30
_GUARD_LOCK = threading.Lock()


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
    + rb")*" + (b"+" if sys.version_info >= (3, 11) else b""))  # possessive where the engine has it (3.11+)
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


def check_opcodes(data: bytes | memoryview | mmap.mmap, name: str = "the pickle", *,
                  kind: str = "snapshot", writer: str = "torch.cuda.memory._dump_snapshot") -> None:
    """Walk the opcodes of ``data`` and refuse any that asks for more than the file could hold.

    A memo index (``PUT``/``BINPUT``/``LONG_BINPUT``) beyond the file's length, a string, bytes or long whose
    length runs past the end, a ``FRAME`` longer than what is left, an unknown opcode or a missing ``STOP`` raise
    :class:`SnapshotError` naming the opcode and its offset.  Globals are left to :class:`SafeUnpickler`, which
    refuses them with their name.
    """
    table = _table()
    raw: Any = data if isinstance(data, (bytes, mmap.mmap)) else bytes(memoryview(data).cast("B"))
    n = len(raw)
    run = _SIMPLE.match
    pos = 0

    def refuse(what: str) -> SnapshotError:
        return SnapshotError(f"{name} is not a readable {kind}: {what} at byte {pos} of a {n}-byte file; a pickle "
                             f"written by {writer} never does this, so it was refused unread")

    while True:
        pos = run(raw, pos).end()  # type: ignore[union-attr]  # a * always matches
        if pos >= n:
            raise SnapshotError(f"{name} is truncated (the pickle ends at byte {n} without its STOP opcode); "
                                f"expected a complete {kind} file")
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
                                    f"expected a complete {kind} file")
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
                                    f"{kind} file")
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
                                    f"expected a complete {kind} file")
            if opname == "PUT":
                digits = raw[start:end].strip()
                if not digits.isdigit() or len(digits) > 20 or int(digits) > n:
                    raise refuse(f"PUT asks for memo slot {digits[:24]!r}, more than a {n}-byte pickle could fill,")
            pos = end + 1


# --- the address-space guard (large files only) ----------------------------------------------------------------
def _guard_usable() -> bool:
    if not sys.platform.startswith("linux") or not os.path.exists("/proc/self/statm"):
        return False
    if threading.current_thread() is not threading.main_thread():
        return False
    torch = sys.modules.get("torch")
    try:
        return not (torch is not None and torch.cuda.is_initialized())
    except Exception:  # noqa: BLE001 - a torch without a usable cuda module: treat as initialised, walk instead
        return False


@contextlib.contextmanager
def _memory_guard(size: int) -> Iterator[int]:
    """Limit the address space to what the process uses now plus a budget for a ``size``-byte file; the limit in
    effect (yielded) is the tighter of that and one already in place.  One guard at a time (a lock), so two loads
    can never leave each other's limit behind."""
    import resource

    with _GUARD_LOCK:
        with open("/proc/self/statm", "rb") as fh:
            used = int(fh.read().split()[0]) * resource.getpagesize()
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = used + MEMORY_BASE + MEMORY_FACTOR * size
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        if soft != resource.RLIM_INFINITY and soft <= limit:
            yield max(soft - used, 0)  # a tighter limit is already in place: that is the one that holds
            return
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
        try:
            yield limit - used
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


# --- reading ---------------------------------------------------------------------------------------------------
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


def _describe(source: str, data_head: bytes) -> str:
    if not data_head:
        return f"{source} is empty"
    if data_head[:1] in (b"{", b"["):
        return f"{source} looks like JSON or text, not a pickle"
    if data_head[:2] == b"PK":
        return f"{source} is a zip archive (a torch.save file?), not a snapshot pickle"
    return f"{source} does not start like a pickle (first bytes {data_head[:8]!r})"


def read_pickle(source: str | os.PathLike[str] | bytes | bytearray | memoryview, *, label: str | None = None) -> Any:
    """Unpickle ``source`` (a path or the bytes of a file) with :class:`SafeUnpickler`, in bounded memory.

    Raises
    ------
    SnapshotError
        Not a pickle, truncated, unsafe (asks for a global), or an opcode asks for more than the file could hold
        (a memo index, a length, a frame); the message names the file.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        name = label or "the given bytes"
        data = source if isinstance(source, bytes) else bytes(source)  # any buffer, contiguous or not
        blob: bytes | None = data
        fh: Any = io.BytesIO(data)
        size = len(data)
    else:
        name = label or repr(os.fspath(source))
        blob = None
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
        guarded = size > SCAN_LIMIT and _guard_usable()
        if guarded:
            pass
        elif blob is not None:
            check_opcodes(blob, name)
        else:
            try:
                mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)  # the walk adds no copy of the file
            except (OSError, ValueError):  # not a regular file (a pipe, a special file): read it whole
                blob = fh.read()
                fh = io.BytesIO(blob)
                check_opcodes(blob, name)
            else:
                with mapped:
                    check_opcodes(mapped, name)
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
            if budget:
                raise SnapshotError(
                    f"{name} asks for more than {fmt_bytes(budget)} of memory while unpickling, which a "
                    f"{fmt_bytes(size)} snapshot cannot need; refused: a memo index, length or object count in it "
                    "is larger than the file could hold") from e
            raise SnapshotError(f"{name} could not be read: the machine ran out of memory while unpickling "
                                "it; expected a snapshot that fits in memory") from e
        except (pickle.UnpicklingError, ValueError, TypeError, IndexError, KeyError, AttributeError,
                OverflowError, RecursionError, UnicodeDecodeError) as e:
            raise SnapshotError(f"{name} is not a readable pickle ({type(e).__name__}: {e}); "
                                "expected a pickle written by torch.cuda.memory._dump_snapshot") from e
    finally:
        fh.close()
