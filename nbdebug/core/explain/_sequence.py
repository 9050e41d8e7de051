"""What came first in a text: a worker's error before its launcher's report, a Python exception before a native
abort at exit, an exception Python only ignored.

A log is read in the order things happened.  A Python traceback that ends in its exception, followed by
``free(): invalid pointer`` or ``Aborted (core dumped)``, is a program stopped by that exception whose native
libraries then crashed while the interpreter shut down: the exception is the error to answer, not the crash.  An
exception printed under ``Exception ignored in:`` was raised where Python could not propagate it (a ``__del__``, a
generator closed at exit, a callback); it stopped nothing, and at exit the modules it used may already be torn down
(their globals ``None``), so what it says of a value is no error of the user's code.
"""

from __future__ import annotations

import re

from nbdebug.core.explain._structure import Structure, read

__all__ = ["exception_before_crash", "ignored_exception", "child_error"]

_HEADER = "Traceback (most recent call last)"
_IGNORED = "Exception ignored in"
# a crash or a kill reported on an exception's own line: that exception is the crash's report, not an earlier error
# how many lines may come between the exception's line and the crash's (its message may go on over a few)
_SHUTDOWN_LINES = 8
_CRASH_WORDS = re.compile(r"(?i:segmentation fault|core dumped|\bsig(?:segv|abrt|bus|kill)\b|killed|abort)")


def exception_before_crash(line: str, raw: str) -> bool:
    """Whether a native crash's line (``line``) comes after a whole Python traceback ending in its exception.

    The exception stopped the program first; the crash is its native libraries failing at shutdown.
    """
    tail = raw[-20_000:]
    s = read(tail)
    if not s.exc_type or s.cut or not s.frames or _CRASH_WORDS.search(s.exc_type + " " + s.message.split("\n", 1)[0]):
        return False
    at = tail.rfind(s.exc_type)
    crash = tail.rfind(line[:200]) if line else -1
    # right after it, as at shutdown (a crash many lines later came from a run that went on after a logged exception)
    return at != -1 and crash > at and tail.count("\n", at, crash) <= _SHUTDOWN_LINES and tail.rfind(_HEADER, 0, at) != -1


def ignored_exception(raw: str, line: str = "") -> bool:
    """Whether the text's last exception is one Python printed under ``Exception ignored in:`` (no traceback after);
    with ``line``, also whether that line is the ignored exception's (not an earlier error's)."""
    tail = raw[-20_000:]
    at = tail.rfind(_IGNORED)
    # the ignored exception's own traceback follows its notice; a second one is an error that stopped the program
    return at != -1 and tail.count(_HEADER, at) <= 1 and (not line or tail.find(line[:200], at) != -1)


# a traceback's header, also behind a launcher's rank prefix ("[rank0]: Traceback ...")
_TRACEBACK_HEADER = re.compile(r"^[ \t]*(?:\[[^\]\n]{0,40}\]:?[ \t]*)?Traceback \(most recent call last\):", re.MULTILINE)
# the wrappers' own classes: a launcher's traceback ending in its report is no child's error
_WRAPPER_CLASS = re.compile(r"ChildFailedError|ProcessRaisedException|ProcessExitedException|CalledProcessError")


def child_error(raw: str) -> Structure | None:
    """The first complete traceback of a text holding several: a worker's own error, printed before its launcher's.

    torchrun, ``fabric run`` or a notebook's kernel print the child's traceback (frames, then its exception line) and
    then their own report (``failed (exitcode: 1)``, a launcher's traceback ending in ChildFailedError).  The child's
    exception line is the root error, as the first part of a chained traceback is: a launcher's answer yields to it.
    """
    starts = [m.start() for m in _TRACEBACK_HEADER.finditer(raw)]
    for a, b in zip(starts, starts[1:] + [len(raw)]):
        s = read(raw[a:b])
        if s.exc_type and s.frames and not s.cut and not _WRAPPER_CLASS.search(s.exc_type):
            return s
    return None
