"""One way a magic reads its arguments: IPython's ``parse_argstring``, and any failure as one ``UsageError`` line."""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import parse_argstring

__all__ = ["parse_args"]


def parse_args(magic: Any, line: str, name: str) -> Any:
    """The parsed arguments of ``line`` for ``magic`` (a method with ``@magic_arguments``).

    argparse's own errors are already ``UsageError``; shlex's (an unclosed quote) are not, and would show a
    traceback of IPython's internals: both become one line that repeats what was typed (``name`` is how the user
    wrote the magic, ``%%memtrace``).
    """
    try:
        return parse_argstring(magic, line)
    except UsageError:
        raise
    except Exception as e:  # shlex errors on odd quoting
        raise UsageError(f"{name} {line!r}: {e}") from e
