"""Read a snapshot pickle without ever running code from it.

``torch.cuda.memory._dump_snapshot`` writes plain ``pickle.dump`` output made only of dicts, lists, tuples, strings,
numbers, booleans and None.  Such a pickle needs no global at all, so the unpickler below refuses every one of them
(``find_class``) and every persistent id: a file that asks for ``os.system`` or any other callable is reported as
unsafe and nothing in it runs.  It subclasses the C unpickler, so loading keeps the speed of ``pickle.load``.
"""

from __future__ import annotations

import io
import os
import pickle
from typing import Any

from nbdebug.errors import SnapshotError

__all__ = ["UnsafePickleError", "SafeUnpickler", "read_pickle"]


class UnsafePickleError(pickle.UnpicklingError):
    """The pickle asked for a global (a class or function), which a memory snapshot never contains."""


class SafeUnpickler(pickle.Unpickler):
    """A C ``pickle.Unpickler`` that refuses every global and every persistent id."""

    def find_class(self, module: str, name: str) -> Any:  # noqa: D102
        raise UnsafePickleError(f"the pickle asks for the global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:  # noqa: D102
        raise UnsafePickleError(f"the pickle asks for the persistent object {pid!r}")


def _describe(source: str, data_head: bytes) -> str:
    if not data_head:
        return f"{source} is empty"
    if data_head[:1] in (b"{", b"["):
        return f"{source} looks like JSON or text, not a pickle"
    if data_head[:2] == b"PK":
        return f"{source} is a zip archive (a torch.save file?), not a snapshot pickle"
    return f"{source} does not start like a pickle (first bytes {data_head[:8]!r})"


def read_pickle(source: str | os.PathLike[str] | bytes | bytearray | memoryview, *, label: str | None = None) -> Any:
    """Unpickle ``source`` (a path or the bytes of a file) with :class:`SafeUnpickler`.

    Raises
    ------
    SnapshotError
        Not a pickle, truncated, or unsafe (asks for a global); the message names the file.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        name = label or "the given bytes"
        fh: Any = io.BytesIO(bytes(source))
    else:
        name = label or repr(os.fspath(source))
        try:
            fh = open(source, "rb")  # noqa: SIM115 - closed below
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
        try:
            return SafeUnpickler(fh).load()
        except UnsafePickleError as e:
            raise SnapshotError(
                f"{name} is not a plain snapshot and was refused unread: {e}. A memory snapshot holds only dicts, "
                "lists, strings and numbers; this file could run code if loaded with pickle.load"
            ) from e
        except EOFError as e:
            raise SnapshotError(f"{name} is truncated (the pickle ends early); expected a complete snapshot file") from e
        except (pickle.UnpicklingError, ValueError, TypeError, IndexError, KeyError, AttributeError,
                OverflowError, MemoryError, RecursionError, UnicodeDecodeError) as e:
            raise SnapshotError(f"{name} is not a readable pickle ({type(e).__name__}: {e}); "
                                "expected a pickle written by torch.cuda.memory._dump_snapshot") from e
    finally:
        fh.close()
