"""Read a snapshot pickle without ever running code from it, in memory bounded by the file's size.

``torch.cuda.memory._dump_snapshot`` writes plain ``pickle.dump`` output made only of dicts, lists, tuples, strings,
numbers, booleans and None.  Such a pickle needs no global at all, so the unpickler below refuses every one of them
(``find_class``) and every persistent id: a file that asks for ``os.system`` or any other callable is reported as
unsafe and nothing in it runs.  It subclasses the C unpickler, so loading keeps the speed of ``pickle.load``.

The file is read once, whole, through :func:`nbdebug._files.read_bytes` (regular files only, so a FIFO or
``/dev/zero`` is one error, never a hang; plain ``read()`` calls, never a memory map, so a file that shrinks while
it is read gives a truncated pickle, never SIGBUS), at most :data:`MAX_BYTES`.

The C unpickler trusts the numbers in the file: a 9-byte pickle whose ``LONG_BINPUT`` names memo slot 2**29 makes
it allocate and clear 8 GB before anything is checked.  Two checks over the bytes, before anything is unpickled,
bound what it may allocate; no process-wide limit is ever set (the reader runs inside the user's kernel, beside
its other threads):

- an opcode walk (:func:`check_opcodes`, linear) refuses memo indexes, string lengths and frames larger than the
  file could hold, with the offset;
- a count (:func:`check_budget`) of the opcodes that make a large object out of one byte (an empty dict, list or
  set) bounds the memory unpickling can take from above; a file whose bound passes :data:`MEMORY_FACTOR` times its
  size plus :data:`MEMORY_BASE` (real snapshots unpickle into 5-8 times their size) is refused unread.
"""

from __future__ import annotations

import contextlib
import io
import mmap
import os
import pickle
import re
import sys
from collections.abc import Iterator
from typing import Any

from nbdebug._files import read_bytes
from nbdebug._units import fmt_bytes
from nbdebug.errors import NbdebugError, SnapshotError

__all__ = ["UnsafePickleError", "SafeUnpickler", "read_pickle", "check_opcodes", "check_budget", "no_gc",
           "MAX_BYTES", "MEMORY_FACTOR", "MEMORY_BASE"]

MAX_BYTES = 16 << 30  # the largest snapshot file read (one of 16 GiB unpickles into about 100 GiB)
MEMORY_FACTOR = 32  # real snapshots unpickle into 5-8x their size
MEMORY_BASE = 1 << 30
# what unpickling can take per byte of the file at most, beside the objects counted by check_budget: a pointer
# on the stack, in a list or in the memo (with their growth), or a character of a string (4 bytes in UCS-4)
_PER_BYTE = 24
# opcodes that make a large object out of one byte, and a bound on its size: EMPTY_DICT, EMPTY_LIST, EMPTY_SET,
# FROZENSET, TUPLE1-3, and MARK (whose DICT, LIST or TUPLE makes one container out of two bytes)
_HEAVY = {b"}": 64, b"]": 56, b"\x8f": 216, b"\x91": 216, b"(": 64, b"\x85": 48, b"\x86": 56, b"\x87": 64}
_LIGHT = bytes(b for b in range(256) if bytes([b]) not in _HEAVY)


class UnsafePickleError(pickle.UnpicklingError):
    """The pickle asked for a global (a class or function), which a memory snapshot never contains."""


class SafeUnpickler(pickle.Unpickler):
    """A C ``pickle.Unpickler`` that refuses every global and every persistent id."""

    def find_class(self, module: str, name: str) -> Any:  # noqa: D102
        raise UnsafePickleError(f"the pickle asks for the global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:  # noqa: D102
        raise UnsafePickleError(f"the pickle asks for the persistent object {pid!r}")


class _BytesFile(io.BytesIO):
    """The bytes of a file, with the ``peek`` the C unpickler prefetches through (one call per buffer, not one per
    opcode of an unframed pickle).  A read never returns more than is left, so a huge length fills no buffer."""

    def peek(self, n: int = 0) -> bytes:
        pos = self.tell()
        data = self.read(max(n, 1))
        self.seek(pos)
        return data


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


def check_budget(data: bytes, name: str = "the pickle", *, kind: str = "snapshot") -> None:
    """Refuse ``data`` when unpickling it could take more than ``MEMORY_FACTOR`` times its size plus ``MEMORY_BASE``.

    The bound counts every byte that could be an opcode making a large object (an empty dict, list or set, a
    tuple) as one, and every other byte at ``_PER_BYTE``: an upper bound (a byte inside a string counts too), so a
    file it passes cannot take more, and real snapshots, whose bound is about 25 times their size, pass it.
    """
    size = len(data)
    budget = MEMORY_FACTOR * size + MEMORY_BASE
    if (_PER_BYTE + max(_HEAVY.values())) * size <= budget:  # small files: no count needed
        return
    heavy = data.translate(None, _LIGHT)  # one pass at memory speed; only those bytes are left to count
    counts = {op: heavy.count(op) for op in _HEAVY}
    bound = _PER_BYTE * size + sum(_HEAVY[op] * n for op, n in counts.items())
    if bound > budget:
        most = max(counts, key=lambda op: _HEAVY[op] * counts[op])
        raise SnapshotError(
            f"{name} could take up to {fmt_bytes(bound)} of memory to unpickle, more than {fmt_bytes(budget)} "
            f"({MEMORY_FACTOR}x its {fmt_bytes(size)} plus {fmt_bytes(MEMORY_BASE)}): it holds {counts[most]:,} "
            f"bytes {most!r}, each an opcode that makes an empty container out of one byte; a {kind} unpickles "
            "into 5-8 times its size, so it was refused unread")


def _check_head(name: str, head: bytes) -> None:
    """Refuse what cannot start a snapshot: a pickle (PROTO, or the first opcodes of protocol 0/1) or JSON."""
    if head[:1] in (b"{", b"["):
        return
    if not head or head[:1] != b"\x80" and head[:1] not in (b"(", b"]", b"}", b"l", b"d"):
        raise SnapshotError(_describe(name, head) + "; expected a pickle written by torch.cuda.memory._dump_snapshot")


def read_pickle(source: str | os.PathLike[str] | bytes | bytearray | memoryview, *, label: str | None = None) -> Any:
    """Unpickle ``source`` (a path or the bytes of a file) with :class:`SafeUnpickler`, in bounded memory.

    A path is read through :func:`nbdebug._files.read_bytes`: a regular file only, at most :data:`MAX_BYTES`.

    Raises
    ------
    SnapshotError
        Not a regular file, too large, not a pickle, truncated, unsafe (asks for a global), or an opcode asks for
        more than the file could hold (a memo index, a length, a frame, more empty containers than a snapshot
        has); the message names the file.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        name = label or "the given bytes"
        data = source if isinstance(source, bytes) else bytes(source)  # any buffer, contiguous or not
    else:
        name = label or repr(os.fspath(source))
        what = "a memory snapshot pickle file"
        try:
            # its first bytes say whether it can be a snapshot at all: 8 GiB of zeros is refused before it is read
            _check_head(name, read_bytes(source, what, cap=8))
            data = read_bytes(source, what, cap=MAX_BYTES + 1)
        except SnapshotError:
            raise
        except NbdebugError as e:
            raise SnapshotError(str(e)) from e
        except MemoryError as e:
            raise SnapshotError(f"{name} does not fit in this machine's memory to be read "
                                f"({fmt_bytes(os.stat(source).st_size)}); expected a smaller snapshot file") from e
        if len(data) > MAX_BYTES:
            raise SnapshotError(f"{name} is larger than {fmt_bytes(MAX_BYTES)}, the largest snapshot nbdebug reads "
                                f"(it would unpickle into several times that); expected a smaller snapshot file")
    head = data[:8]
    if head[:1] in (b"{", b"["):  # PyTorch's own viewer accepts JSON snapshots too
        import json

        try:
            return json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise SnapshotError(f"{name} starts like JSON but is not valid JSON ({e}); expected a snapshot "
                                "pickle, or the snapshot dict as JSON") from e
    _check_head(name, head)
    check_opcodes(data, name)
    check_budget(data, name)
    fh = _BytesFile(data)
    try:
        with no_gc():
            return SafeUnpickler(fh).load()
    except UnsafePickleError as e:
        raise SnapshotError(
            f"{name} is not a plain snapshot and was refused unread: {e}. A memory snapshot holds only dicts, "
            "lists, strings and numbers; this file could run code if loaded with pickle.load"
        ) from e
    except EOFError as e:
        raise SnapshotError(f"{name} is truncated (the pickle ends early); expected a complete snapshot file") from e
    except MemoryError as e:
        raise SnapshotError(f"{name} could not be read: the machine ran out of memory while unpickling "
                            "it; expected a snapshot that fits in memory") from e
    except (pickle.UnpicklingError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            OverflowError, RecursionError, UnicodeDecodeError) as e:
        raise SnapshotError(f"{name} is not a readable pickle ({type(e).__name__}: {e}); "
                            "expected a pickle written by torch.cuda.memory._dump_snapshot") from e
    finally:
        fh.close()
