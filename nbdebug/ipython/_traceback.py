"""``%nbdebug traceback short``: tracebacks that put the user's frames and the diagnosis where the eye is.

A shape error inside a ``nn.Sequential`` prints a dozen frames of ``torch/nn/modules`` internals (about 1,400 px
in JupyterLab) before the error line, and the diagnosis panel below it starts off screen.  In short mode:

- the first line names the diagnosis (category and title), so the answer is the first thing seen;
- the user's own frames (notebook cells, the user's files) are shown in full, exactly as IPython formats them;
- each run of library frames (site-packages, the standard library, IPython, nbdebug) is folded into one line naming
  them, except the innermost frame, where the error was raised, which stays in full;
- the error line is unchanged.

Nothing is lost: the full traceback is in the diagnosis panel one click away (and ``%tb`` prints it again), and
``%debug`` works as usual.  Errors with no known diagnosis keep IPython's full traceback.  The handler is an
IPython custom exception handler for ``Exception``; one that was set before nbdebug loaded is put back on unload.
"""

from __future__ import annotations

import builtins
import os
import re
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["ShortTracebacks", "fold_library_frames", "classify_entry", "is_library_path", "colours_on"]

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_FILE = re.compile(r"^File (?P<path>.+?):(?P<line>\d+)(?:, in (?P<func>[^\n(]+))?")
_CELL = re.compile(r"^(?:Cell In ?\[\d*\]|Input In ?\[\d*\]|<ipython-input-)")


def _ipython_root() -> str:
    import IPython

    return os.path.normpath(os.path.dirname(os.path.abspath(IPython.__file__))) + os.sep


_IPYTHON: str | None = None


def is_library_path(path: str) -> bool:
    """True for a file of the standard library, an installed package, IPython or nbdebug; False for the user's
    own code (notebook cells, ``<...>`` sources, the user's files).  The rule is core's (``is_library_file``)
    plus IPython's own folder, wherever IPython is installed."""
    global _IPYTHON
    if path.startswith("<"):
        return False
    if _IPYTHON is None:
        _IPYTHON = _ipython_root()
    from nbdebug.core.explain._evidence import is_library_file

    return is_library_file(path) or os.path.normpath(path).startswith(_IPYTHON)


def classify_entry(entry: str) -> tuple[str, str]:
    """``("user" | "library" | "other", short location)`` of one entry of IPython's structured traceback."""
    text = _ANSI.sub("", entry).lstrip()
    if _CELL.match(text):
        return "user", text.split("\n", 1)[0]
    m = _FILE.match(text)
    if m is None:
        return "other", ""
    path = m.group("path")
    if not is_library_path(path):
        return "user", f"{path}:{m.group('line')}"
    norm = os.path.normpath(path)
    short = norm
    for marker in ("site-packages" + os.sep, "dist-packages" + os.sep):
        if marker in norm:
            short = norm.split(marker, 1)[1]
            break
    else:
        short = os.path.basename(norm)
    func = (m.group("func") or "").strip()
    return "library", f"{short}:{m.group('line')}" + (f" {func.split('.')[-1]}" if func else "")


def colours_on(shell: Any, stream: Any = None) -> bool:
    """Whether colour codes may be printed: a kernel's front end renders them; a terminal only when IPython's
    colours are on, the stream is a terminal and neither ``NO_COLOR`` nor ``TERM=dumb`` says otherwise."""
    scheme = str(getattr(shell, "colors", "") or "").lower()
    if scheme in ("nocolor", "none"):
        return False
    if type(shell).__name__ == "ZMQInteractiveShell":
        return True
    stream = stream if stream is not None else sys.stdout
    try:
        tty = bool(stream.isatty())
    except Exception:  # noqa: BLE001 - a replaced stream without isatty
        tty = False
    return tty and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def _styled(text: str, code: str, colour: bool) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if colour else text


def fold_library_frames(stb: list[str], *, headline: str = "", keep_innermost: bool = True,
                        colour: bool = True) -> list[str]:
    """The structured traceback with runs of library frames folded into one line each (see the module doc);
    ``colour=False`` prints no colour codes (a terminal without colours, a captured stream)."""
    kinds = [classify_entry(e) for e in stb]
    frames = [i for i, (k, _) in enumerate(kinds) if k in ("user", "library")]
    innermost = frames[-1] if frames and keep_innermost else -1
    out: list[str] = []
    if headline:
        out.append(headline)
    run: list[str] = []

    def flush() -> None:
        if not run:
            return
        where = " → ".join(run) if len(run) <= 3 else f"{run[0]} → … → {run[-1]}"
        n = len(run)
        line = (f"   ⋯ {n} library frame{'s' if n > 1 else ''} folded: {where}"
                "  (full traceback: the panel below, %tb, or %nbdebug traceback full)")
        out.append(_styled(line, "2", colour) + "\n")
        run.clear()

    for i, (entry, (kind, where)) in enumerate(zip(stb, kinds)):
        if kind == "library" and i != innermost:
            run.append(where)
            continue
        flush()
        out.append(entry)
    flush()
    return out


class ShortTracebacks:
    """The custom exception handler behind ``%nbdebug traceback short``."""

    def __init__(self, shell: Any, diagnose: Callable[[BaseException], Any], wanted: Callable[[Any], bool],
                 keep_full: Callable[[BaseException, str], None],
                 show_panel: Callable[[BaseException], None] | None = None) -> None:
        self.shell = shell
        self.diagnose = diagnose  # exception -> Diagnosis (cached for the panel)
        self.wanted = wanted  # Diagnosis -> will a panel be shown for it?
        self.keep_full = keep_full  # (exception, full traceback text): the panel shows it one click away
        self.show_panel = show_panel  # the panel, right under the traceback (scripts run silently get no event)
        self.on = False
        self._previous: tuple[tuple[type, ...], Any] | None = None
        self.folded = 0  # tracebacks shortened so far (for tests and %nbdebug status)

    def enable(self) -> None:
        if self.on:
            return
        if self.shell.custom_exceptions:  # someone else's handler: leave it alone, stay off
            raise RuntimeError("another custom exception handler is set (shell.set_custom_exc); "
                               "nbdebug leaves it in place, so short tracebacks stay off")
        self._previous = (self.shell.custom_exceptions, self.shell.CustomTB)
        self.shell.set_custom_exc((Exception,), self._handler)
        self.on = True

    def disable(self) -> None:
        if not self.on:
            return
        self.on = False
        if self._previous is not None:
            self.shell.custom_exceptions, self.shell.CustomTB = self._previous
            self._previous = None

    def _handler(self, shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: Any = None) -> None:
        try:
            stb = self._short(shell, etype, value, tb, tb_offset)
        except Exception:  # never lose the user's traceback: fall back to IPython's own
            stb = None
        if stb is None:
            shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        else:
            shell._get_exc_info((etype, value, tb))  # sys.last_* for %debug and %tb
            shell._showtraceback(etype, value, stb)
            if shell.call_pdb:
                shell.debugger(force=True)
        if self.show_panel is not None:
            try:
                self.show_panel(value)
            except Exception:  # the panel is extra; the traceback above is what matters
                pass
        return None

    def _short(self, shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: Any) -> list[str] | None:
        from IPython.core.error import UsageError

        if issubclass(etype, (SyntaxError, UsageError)) or hasattr(value, "_render_traceback_"):
            return None
        group = getattr(builtins, "BaseExceptionGroup", None)  # Python >= 3.11
        if group is not None and isinstance(value, group):  # IPython formats exception groups its own way
            return None
        diagnosis = self.diagnose(value)
        if diagnosis is None or not diagnosis.known or not self.wanted(diagnosis):
            return None
        stb = shell.InteractiveTB.structured_traceback(etype, value, tb, tb_offset=tb_offset)
        # bold in the terminal's own colour: readable on every theme's error background
        colour = colours_on(shell)
        headline = _styled(f"nbdebug ▸ [{diagnosis.kind}] {diagnosis.title} — explained below the traceback", "1",
                           colour) + "\n"
        short = fold_library_frames(stb, headline=headline, colour=colour)
        if len(short) >= len(stb) + 1:  # nothing folded: the headline alone is not worth a different traceback
            return [headline, *stb]
        self.keep_full(value, _ANSI.sub("", shell.InteractiveTB.stb2text(stb)))
        self.folded += 1
        return short
