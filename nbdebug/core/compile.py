"""torch.compile diagnostics: graph breaks (reason, user line), recompilations (failing guard), the recompile limit.

Built on torch's own tools, not a re-implementation: ``torch._dynamo.explain`` for the graph breaks of one call,
and torch's logging artifacts (``torch._logging.set_logs(recompiles=True, graph_breaks=True)``, captured with a
``logging.Handler``) for whatever a block of code compiles; the recompile-limit warning comes from
``torch._dynamo.convert_frame``.  The config is ``torch._dynamo.config.recompile_limit`` (``cache_size_limit`` in
torch < 2.6).  ``compile_check`` and ``capture_compile`` put the user's own logging settings (``TORCH_LOGS``,
``torch._logging.set_logs``) back when they finish.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from nbdebug.core import knowledge
from nbdebug.core._cells import is_cell_file, site_label
from nbdebug.core._findings import Finding, HasFindings, sort_findings
from nbdebug.core._recorder import Recorder
from nbdebug.core._result import Result
from nbdebug.errors import InvalidArgumentError

__all__ = [
    "GraphBreak",
    "Recompile",
    "LimitHit",
    "CompileReport",
    "compile_check",
    "capture_compile",
    "CompileCapture",
    "build_report",
    "recompile_limit",
]


def recompile_limit() -> tuple[str, int | None]:
    """The name and value of the recompile-limit config in the installed torch."""
    import torch._dynamo.config as config

    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(config, name):
            return name, int(getattr(config, name))
    return "recompile_limit", None


@dataclass(frozen=True)
class GraphBreak:
    """One graph break: why, and where in the user's code."""

    reason: str
    file: str = ""
    line: int = 0
    code: str = ""
    detail: str = ""

    @property
    def where(self) -> str:
        """The site as the user knows it: ``In [12], line 3: code`` for a cell, ``train.py:40: code`` for a file."""
        return site_label(self.file, self.line) if self.file else "?"


@dataclass(frozen=True)
class Recompile:
    """One recompilation of a function, with the guard that failed."""

    function: str
    file: str
    line: int
    guard: str
    user_line: str = ""
    #: the user's own code that made the call which recompiled (torch's frames skipped), and the compiled module
    #: when the function is torch's wrapper around an ``nn.Module`` (``Sequential``)
    user_file: str = ""
    user_lineno: int = 0
    module: str = ""


@dataclass(frozen=True)
class LimitHit:
    """Dynamo gave up compiling a function: the recompile limit was hit; it runs eagerly from now on."""

    function: str
    file: str
    line: int
    limit_name: str
    limit: int | None
    last_reason: str = ""
    user_file: str = ""
    user_lineno: int = 0
    module: str = ""


@dataclass(frozen=True, repr=False)
class CompileReport(HasFindings, Result):
    """What torch.compile did with a function or a cell.

    Attributes
    ----------
    graph_count, graph_break_count : int or None
        From ``torch._dynamo.explain`` (None when the report comes from logs only).
    breaks : tuple of GraphBreak
    recompiles : tuple of Recompile
    limit_hits : tuple of LimitHit
    findings : tuple of Finding
        One per distinct problem, most severe first (kinds ``graph_break``, ``compile_recompilation``,
        ``recompile_limit``), each with its fixes; ``where`` is the user's ``file:line``.
    limit_name : str
        ``recompile_limit`` (torch >= 2.6) or ``cache_size_limit``.
    limit : int or None
        Its value.
    """

    graph_count: int | None
    graph_break_count: int | None
    breaks: tuple[GraphBreak, ...]
    recompiles: tuple[Recompile, ...]
    limit_hits: tuple[LimitHit, ...]
    findings: tuple[Finding, ...]
    limit_name: str = "recompile_limit"
    limit: int | None = None
    ops_per_graph: tuple[int, ...] = field(default=())


    def _summary_line(self) -> str:
        graphs = f"{self.graph_count} graph(s), " if self.graph_count is not None else ""
        return (f"{graphs}{len(self.breaks)} graph break(s), {len(self.recompiles)} recompilation(s), "
                f"{len(self.limit_hits)} recompile-limit hit(s)")

    def _records(self) -> list[dict[str, Any]]:
        return [f.record() for f in self.findings]


# --- log parsing -----------------------------------------------------------------------------------------------

# line numbers and limits: ASCII digits, bounded, so that int() never sees "²" or 5000 digits
_BREAK_AT = re.compile(r"Graph break in user code at (.+):([0-9]{1,9})")
_RECOMPILING = re.compile(r"Recompiling function (\S+) in (.+):([0-9]{1,9})")
_GUARD_LINE = re.compile(r"^\s*-\s*[0-9]+/[0-9]+:\s*(.*?)\s*(?:#.*)?$")
_USER_FILE = re.compile(r'File "(.+)", line ([0-9]{1,9}), in (\S+)\n\s*-?\s*(.*)')
_LIMIT = re.compile(r"hit config\.(recompile_limit|cache_size_limit) \(([0-9]{1,9})\)")
_LIMIT_FN = re.compile(r"function: '(.+?)' \((.+):([0-9]{1,9})\)")
_LAST_REASON = re.compile(r"last reason: [0-9]+/[0-9]+:\s*(.*?)\s*(?:#.*)?$", re.M)


def _first_reason_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("Graph Break Reason", "Encountered graph break")):
            return line
    return text.strip().splitlines()[0] if text.strip() else ""


def _parse_break(msg: str) -> GraphBreak | None:
    m = _BREAK_AT.search(msg)
    if not m:
        return None
    body = msg.split("Graph Break Reason:", 1)[1] if "Graph Break Reason:" in msg else msg
    body = body.split("User code traceback:", 1)[0]
    code = ""
    tb = msg.split("User code traceback:", 1)[1] if "User code traceback:" in msg else ""
    frames = _USER_FILE.findall(tb)
    for file, line, _fn, text in frames:
        if file == m.group(1) and int(line) == int(m.group(2)):
            code = text.strip()
    return GraphBreak(_first_reason_line(body), m.group(1), int(m.group(2)), code, body.strip())


def _parse_recompile(msg: str) -> Recompile | None:
    m = _RECOMPILING.search(msg)
    if not m:
        return None
    guard = ""
    for line in msg.splitlines()[1:]:
        g = _GUARD_LINE.match(line)
        if g and not g.group(1).startswith(("User stack", "File")):
            guard = g.group(1)
            break
    user = _USER_FILE.search(msg)
    user_line = site_label(user.group(1), int(user.group(2)), code=False) + ": " + user.group(4).strip() if user else ""
    return Recompile(m.group(1), m.group(2), int(m.group(3)), guard, user_line)


def _parse_limit(msg: str) -> LimitHit | None:
    m = _LIMIT.search(msg)
    if not m:
        return None
    fn = _LIMIT_FN.search(msg)
    last = _LAST_REASON.search(msg)
    return LimitHit(fn.group(1) if fn else "?", fn.group(2) if fn else "", int(fn.group(3)) if fn else 0,
                    m.group(1), int(m.group(2)), last.group(1) if last else "")


class _CompileLog(logging.Handler):
    """The events of torch's ``graph_breaks`` and ``recompiles`` logs, parsed as they arrive."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.breaks: list[GraphBreak] = []
        self.recompiles: list[Recompile] = []
        self.limits: list[LimitHit] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._record(record.getMessage())
        except Exception:  # a malformed record must never break the user's code
            return

    def _record(self, msg: str) -> None:
        if "Graph break in user code" in msg:
            b = _parse_break(msg)
            if b and b not in self.breaks:
                self.breaks.append(b)
        elif "Recompiling function" in msg:
            r = _parse_recompile(msg)
            if r:
                r = replace(r, **_caller())
                if r.module and _library_file(r.file):  # torch's wrapper ("inner"): name the model's forward
                    r = replace(r, function=f"{r.module}.forward")
                self.recompiles.append(r)
        elif "hit config." in msg:
            h = _parse_limit(msg)
            if h:
                self.limits.append(replace(h, **_caller()))


def _library_file(filename: str) -> bool:
    """torch's, nbdebug's, IPython's or the standard library's own code: never the user's site."""
    import os
    import sysconfig

    if not filename or filename.startswith("<frozen"):
        return True
    if is_cell_file(filename):
        return False
    name = filename.replace("\\", "/")
    if "/site-packages/" in name or "/dist-packages/" in name or "/torch/" in name or "/nbdebug/" in name:
        return True
    stdlib = sysconfig.get_paths().get("stdlib", "")
    return bool(stdlib) and os.path.abspath(filename).startswith(os.path.abspath(stdlib) + os.sep)


def _caller() -> dict[str, Any]:
    """The user's line that made the call torch is recompiling for, and the compiled module's class.

    torch names the function it recompiles; for ``torch.compile(model)`` that is its own wrapper (``inner`` in
    ``torch/_dynamo/external_utils.py``), which tells the user nothing.  The log record is emitted inside that
    call, so the innermost frame outside torch, nbdebug, IPython and the standard library is the user's line,
    and the wrapper's ``fn`` is the module's bound ``__call__``.
    """
    import sys

    found: dict[str, Any] = {}
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if "module" not in found and code.co_name in ("inner", "_wrapped_call_impl", "_call_impl", "__call__"):
            owner = frame.f_locals.get("self", frame.f_locals.get("fn"))
            original = getattr(owner, "_orig_mod", None)  # torch.compile(model) is an OptimizedModule around it
            if original is not None:
                found["module"] = type(original).__name__
        if not _library_file(code.co_filename):
            found["user_file"], found["user_lineno"] = code.co_filename, frame.f_lineno
            break
        frame = frame.f_back  # type: ignore[assignment]
    return found


_LOGGERS = ("torch", "torch._dynamo")


def _enable_artifacts(names: tuple[str, ...]) -> Callable[[], None]:
    """Turn torch logging artifacts on, on top of the user's own settings; return what puts those back.

    ``torch._logging.set_logs(...)`` replaces every setting (and ``set_logs()`` wipes them), so the user's
    ``set_logs(dynamo=logging.INFO)`` would be lost.  torch keeps its settings in one ``LogState``; this saves
    it, installs a copy with ``names`` added, and restores the saved one on exit, then lets torch re-apply it
    (``_init_logs``), the way torch's own ``testing._internal.logging_utils.preserve_log_state`` does.  When
    ``TORCH_LOGS`` is set, torch reads the settings from it instead: the names are appended to it meanwhile.
    """
    import copy
    import os

    from torch._logging import _internal as tl

    env = os.environ.get("TORCH_LOGS")
    previous = tl._get_log_state()
    state = copy.deepcopy(previous)
    for name in names:
        state.enable_artifact(name)
    tl._set_log_state(state)
    if env is not None:
        os.environ["TORCH_LOGS"] = ",".join(filter(None, (env, *names)))
    tl._init_logs()

    def restore() -> None:
        if env is not None:
            os.environ["TORCH_LOGS"] = env
        tl._set_log_state(previous)
        tl._init_logs()

    return restore


class CompileCapture(Recorder):
    """Record graph breaks, recompilations and recompile-limit hits while a block of code runs (``capture_compile``).

    Turns on torch's ``recompiles`` and ``graph_breaks`` logging artifacts and listens to them; torch's own
    console output of those artifacts is held back while recording (unless ``quiet=False``).  ``.result`` is the
    ``CompileReport`` once the block has ended (None before).
    """

    _label = "CompileCapture"

    def __init__(self, *, quiet: bool = True) -> None:
        self.quiet = quiet
        self.log = _CompileLog()
        self._result: CompileReport | None = None
        self._removed: list[tuple[logging.Logger, logging.Handler]] = []
        self._restore_logs: Callable[[], None] | None = None

    @property
    def result(self) -> CompileReport | None:
        """The ``CompileReport`` of the block (None while it runs)."""
        return self._result

    def start(self) -> CompileCapture:
        """Start listening to torch's logs; returns ``self``."""
        if self._restore_logs is not None:
            return self
        self._result = None
        self._restore_logs = _enable_artifacts(("recompiles", "graph_breaks"))
        for name in _LOGGERS:
            logger = logging.getLogger(name)
            if self.quiet:
                for h in list(logger.handlers):
                    logger.removeHandler(h)
                    self._removed.append((logger, h))
            logger.addHandler(self.log)
        return self

    def stop(self) -> None:
        """Stop listening, put the user's logging settings back, and build ``result``."""
        restore, self._restore_logs = self._restore_logs, None
        if restore is None:
            return
        for name in _LOGGERS:
            logging.getLogger(name).removeHandler(self.log)
        for logger, h in self._removed:
            if h not in logger.handlers:
                logger.addHandler(h)
        self._removed.clear()
        restore()  # the user's own TORCH_LOGS / set_logs settings, and torch's handlers for them
        self._result = build_report(self.log.breaks, self.log.recompiles, self.log.limits)


def capture_compile(*, quiet: bool = True) -> CompileCapture:
    """Record what torch.compile does while a block runs: ``with capture_compile() as cap: ...``, then ``cap.result``.

    Parameters
    ----------
    quiet : bool
        Hold back torch's own console output of the same graph breaks and recompilations while recording.

    Returns
    -------
    CompileCapture
        A recorder; ``.result`` is the ``CompileReport`` once the block has ended.

    Examples
    --------
    >>> with nbdebug.capture_compile() as cap:             # doctest: +SKIP
    ...     compiled(x); compiled(x[:3])
    >>> cap.result.findings                                # doctest: +SKIP
    """
    return CompileCapture(quiet=quiet)


def build_report(
    breaks: Iterable[GraphBreak],
    recompiles: Iterable[Recompile],
    limits: Iterable[LimitHit],
    *,
    graph_count: int | None = None,
    graph_break_count: int | None = None,
    ops_per_graph: tuple[int, ...] = (),
) -> CompileReport:
    """Turn recorded events into a ``CompileReport`` with findings and fixes."""
    breaks, recompiles, limits = tuple(breaks), tuple(recompiles), tuple(limits)
    name, value = recompile_limit()
    findings: list[Finding] = []
    for h in limits:
        what, where = _compiled(h.function, h.file, h.line, h.user_file, h.user_lineno, h.module)
        findings.append(knowledge.finding(
            "recompile_limit",
            f"torch.compile gave up on {what}: it hit its limit of {h.limit} compiled versions ({h.limit_name}) and "
            f"now runs it EAGERLY (no speed-up). Last failing guard: {h.last_reason or '?'}",
            where, evidence={"limit_name": h.limit_name, "limit": h.limit}))
    by_fn: dict[tuple[str, str, int], list[Recompile]] = {}
    for r in recompiles:
        by_fn.setdefault((r.function, r.file, r.line), []).append(r)
    generic = knowledge.entry("compile_recompilation")
    for (fn, file, line), rs in by_fn.items():
        guard = rs[-1].guard
        what, where = _compiled(fn, file, line, rs[-1].user_file, rs[-1].user_lineno, rs[-1].module)
        matched = knowledge.match("guard", guard)
        title = matched.title if matched else "guard failed"
        sev = "warning" if len(rs) >= 2 or any(h.function == fn for h in limits) else "info"
        findings.append(knowledge.finding(
            "compile_recompilation",
            f"{what} was recompiled {len(rs)} time(s) ({title}); failing guard: {guard}"
            + (f" [{rs[-1].user_line}]" if rs[-1].user_line and not rs[-1].user_file else ""),
            where, severity=sev,
            fixes=(*matched.fixes, *generic.fixes[1:]) if matched else None,
            evidence={"recompilations": len(rs), "guard": guard}))
    generic = knowledge.entry("graph_break")
    seen: set[tuple[str, int]] = set()
    for b in breaks:
        if (b.file, b.line) in seen:
            continue
        seen.add((b.file, b.line))
        matched = knowledge.match("graph_break", b.detail or b.reason)
        what = matched.title if matched else "graph break"
        findings.append(knowledge.finding(
            "graph_break",
            f"Graph break ({what}): {b.reason}",
            (b.where,),
            fixes=(*matched.fixes, *generic.fixes) if matched else None))
    return CompileReport(graph_count, graph_break_count, breaks, recompiles, limits, sort_findings(findings), name,
                         value, ops_per_graph)


def _compiled(function: str, file: str, line: int, user_file: str, user_lineno: int,
              module: str) -> tuple[str, tuple[str, ...]]:
    """What was compiled, in the user's words, and where.

    The user's function at its ``def`` and the line that called it; for ``torch.compile(model)``, whose compiled
    function is torch's own wrapper, the model's class and the user's line that called it (torch's file is never
    the site).
    """
    called = (site_label(user_file, user_lineno),) if user_file else ()
    if _library_file(file):
        name = f"the compiled {module}" if module else "a compiled nn.Module"
        return name, called
    own = site_label(file, line) if file else ""
    return f"{function}()", tuple(dict.fromkeys(w for w in (own, *called) if w))


def _frame_of(user_stack: Any) -> tuple[str, int, str]:
    frames = list(user_stack or ())
    for fs in reversed(frames):
        fname = getattr(fs, "filename", "")
        if "/torch/" not in fname and "site-packages" not in fname:
            return fname, int(getattr(fs, "lineno", 0) or 0), (getattr(fs, "line", "") or "").strip()
    if frames:
        fs = frames[-1]
        return fs.filename, int(fs.lineno or 0), (fs.line or "").strip()
    return "", 0, ""


def compile_check(
    fn: Callable[..., Any],
    *args: Any,
    calls: Iterable[Any] | None = None,
    backend: str = "eager",
    **kwargs: Any,
) -> CompileReport:
    """Check how ``torch.compile`` handles ``fn``: graph breaks, recompilations, the recompile limit.

    Parameters
    ----------
    fn : callable
        The function or ``nn.Module`` to compile.
    *args, **kwargs
        One call's arguments: ``torch._dynamo.explain`` traces ``fn(*args, **kwargs)`` for graph breaks.
    calls : iterable, optional
        More calls to make on ``torch.compile(fn, backend=backend)`` after the first, to find recompilations:
        each item is a tuple of positional arguments, a dict of keyword arguments, or an ``(args, kwargs)``
        pair.  (``calls`` and ``backend`` are therefore not passed on to ``fn``.)
    backend : str
        Backend for the recompilation run; ``"eager"`` (default) traces with Dynamo only, fast and enough to
        see breaks and guards; use ``"inductor"`` to include code generation.

    Returns
    -------
    CompileReport

    Notes
    -----
    ``torch._dynamo.explain`` resets Dynamo's caches, so other compiled functions recompile on their next call.
    """
    if not callable(fn):
        raise InvalidArgumentError(f"compile_check: got a {type(fn).__name__} to check; expected a function or an "
                                   "nn.Module to compile")
    if not isinstance(backend, str):
        raise InvalidArgumentError(f"compile_check: backend={backend!r}; expected a backend name such as 'eager' "
                                   "or 'inductor'")
    import torch
    import torch._dynamo

    with capture_compile():  # holds back torch's own console output of the same breaks
        explained = torch._dynamo.explain(fn)(*args, **kwargs)
    breaks = []
    for br in explained.break_reasons:
        file, line, code = _frame_of(getattr(br, "user_stack", ()))
        reason = str(getattr(br, "reason", br))
        breaks.append(GraphBreak(_first_reason_line(reason), file, line, code, reason))
    recompiles: list[Recompile] = []
    limits: list[LimitHit] = []
    if calls is not None:
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend=backend)
        with capture_compile() as cap:
            compiled(*args, **kwargs)
            for call in calls:
                c_args, c_kwargs = _split_call(call)
                compiled(*c_args, **c_kwargs)
        recompiles = list(cap.log.recompiles)
        limits = list(cap.log.limits)
    return build_report(
        breaks, recompiles, limits,
        graph_count=int(explained.graph_count), graph_break_count=int(explained.graph_break_count),
        ops_per_graph=tuple(len(ops) for ops in (explained.ops_per_graph or ())),
    )


def _split_call(call: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if isinstance(call, dict):
        return (), call
    if isinstance(call, tuple) and len(call) == 2 and isinstance(call[0], tuple) and isinstance(call[1], dict):
        return call[0], call[1]
    if isinstance(call, tuple):
        return call, {}
    return (call,), {}
