"""Live torch_xla metrics: read them through ``torch_xla.debug.metrics`` and measure what a block of code did.

``watch()`` snapshots every counter and metric on entry, records one snapshot per step (a step closure that
re-registers itself, so every ``torch_xla.sync()`` / ``mark_step()`` is seen, including MpDeviceLoader's),
captures torch_xla's debug analysis output while the block runs, and on exit diagnoses the difference.

Debug output in torch_xla 2.9 (verified): ``PT_XLA_DEBUG_LEVEL`` / ``PT_XLA_DEBUG`` / ``PT_XLA_DEBUG_FILE`` are
read once, at the first graph execution of the process, and cached (C++ function statics).  So the analysis
can be switched on from inside a session only before anything has run on the XLA device; after that it needs
a restart with the variable set.  The blocks are written by C++ to file descriptor 2 (``pt-xla-profiler``
lines, with ``PT_XLA_DEBUG=1``, to descriptor 1) or appended to ``PT_XLA_DEBUG_FILE``.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from nbdebug._files import DEFAULT_CAP, read_text
from nbdebug.core._findings import Finding, HasFindings
from nbdebug.core._recorder import Recorder
from nbdebug.core._result import Result
from nbdebug.core.xla.diagnose import StepStats, XlaDiagnosis, diagnose
from nbdebug.core.xla.report import Counter, Metric, MetricsReport
from nbdebug.errors import NbdebugError, require

__all__ = ["available", "read_live", "Snapshot", "take_snapshot", "XlaCellReport", "XlaWatch", "watch", "debug_status"]

_BYTE_METRICS = frozenset({"InboundData", "OutboundData"})
_VALUE_METRICS = frozenset({"TensorsGraphSize", "InputOutputAliasCount"})
_PERCENTILES = (1, 5, 10, 20, 50, 80, 90, 95, 99)
_DEBUG_MARKERS = ("Analysis: ", "Computation hash: ", "pt-xla-profiler: ")


def available() -> bool:
    """True when torch_xla is imported already, or importable (without importing it)."""
    if "torch_xla" in sys.modules:
        return True
    import importlib.util

    return importlib.util.find_spec("torch_xla") is not None


def _metrics_module() -> Any:
    require("torch_xla", "xla", "Live torch_xla metrics")
    import torch_xla.debug.metrics as met

    return met


def _unit(name: str) -> str:
    if name in _BYTE_METRICS:
        return "B"
    if name in _VALUE_METRICS:
        return ""
    return "s"


@dataclass(frozen=True)
class Snapshot:
    """Every counter and metric at one moment (metric samples as ``(timestamp, value)``, times in ns)."""

    time: float
    counters: dict[str, int]
    metrics: dict[str, tuple[int, float, tuple[tuple[float, float], ...]]]

    def samples(self, name: str) -> int:
        """TotalSamples of metric ``name`` (0 when it has none)."""
        m = self.metrics.get(name)
        return m[0] if m else 0

    def accumulator(self, name: str) -> float:
        """Accumulator of metric ``name`` in raw units (ns for times)."""
        m = self.metrics.get(name)
        return m[1] if m else 0.0


_STEP_METRICS = ("CompileTime", "TransferFromDeviceTime")


def take_snapshot(met: Any = None, *, light: bool = False) -> Snapshot:
    """Read all counters and metrics through the torch_xla API.

    ``light`` (used once per step) reads only the counters that a step row needs and the sample counts of
    ``CompileTime`` / ``TransferFromDeviceTime``, without their sample lists.
    """
    met = met or _metrics_module()
    if light:
        counters = {n: int(met.counter_value(n) or 0) for n in met.counter_names()
                    if n.startswith("aten::") or n in ("ExecuteComputation", "ExecuteReplicated")}
    else:
        counters = {n: int(met.counter_value(n) or 0) for n in met.counter_names()}
    metrics = {}
    for n in _STEP_METRICS if light else met.metric_names():
        data = met.metric_data(n)
        if data is None:
            continue
        total, acc, samples = data
        kept = () if light else tuple((float(t), float(v)) for t, v in samples)
        metrics[n] = (int(total), float(acc), kept)
    return Snapshot(time.time(), counters, metrics)


def _percentiles(values: list[float]) -> tuple[tuple[float, float], ...]:
    if not values:
        return ()
    values = sorted(values)
    n = len(values)
    # torch_xla: sorted_samples[floor(p * n)], no interpolation
    return tuple((float(p), values[min(n - 1, math.floor(p / 100 * n))]) for p in _PERCENTILES)


def _to_report(after: Snapshot, before: Snapshot | None = None) -> MetricsReport:
    counters = []
    for name, value in after.counters.items():
        diff = value - (before.counters.get(name, 0) if before else 0)
        if diff > 0:
            counters.append(Counter(name, diff, "live", name))
    metrics = []
    for name, (total, acc, samples) in after.metrics.items():
        b_total, b_acc = (before.samples(name), before.accumulator(name)) if before else (0, 0.0)
        n = total - b_total
        if n <= 0:
            continue
        unit = _unit(name)
        scale = 1e-9 if unit == "s" else 1.0
        t0 = before.time if before else -math.inf
        kept = [v * scale for t, v in samples if t >= t0]
        metrics.append(Metric(name, n, (acc - b_acc) * scale, unit, percentiles=_percentiles(kept),
                              section="live", raw_name=name))
    return MetricsReport(tuple(metrics), tuple(counters), "live")


def read_live() -> MetricsReport:
    """The process's metrics so far, read through ``torch_xla.debug.metrics`` (no text parsing)."""
    return _to_report(take_snapshot())


def _step_stats(i: int, a: Snapshot, b: Snapshot) -> StepStats:
    def cdiff(name: str) -> int:
        return b.counters.get(name, 0) - a.counters.get(name, 0)

    fallback = sum(
        v - a.counters.get(k, 0) for k, v in b.counters.items() if k.startswith("aten::") and k != "aten::_local_scalar_dense"
    )
    return StepStats(
        step=i,
        compiles=b.samples("CompileTime") - a.samples("CompileTime"),
        executions=cdiff("ExecuteComputation") + cdiff("ExecuteReplicated"),
        transfers_from_device=b.samples("TransferFromDeviceTime") - a.samples("TransferFromDeviceTime"),
        fallback_calls=fallback,
        compile_seconds=(b.accumulator("CompileTime") - a.accumulator("CompileTime")) / 1e9,
    )


def debug_status(before: Snapshot | None = None, *, enable: bool = True) -> tuple[bool, str]:
    """Whether torch_xla's debug analysis is (or can now be made) active, and a sentence saying so."""
    level = os.environ.get("PT_XLA_DEBUG_LEVEL", "")
    legacy = os.environ.get("PT_XLA_DEBUG", "0")
    if (level.isdigit() and int(level) >= 1) or (legacy.isdigit() and int(legacy) >= 1):
        return True, (
            f"debug analysis on (PT_XLA_DEBUG_LEVEL={level or '-'} PT_XLA_DEBUG={legacy}); torch_xla read it at "
            "its first execution, so it counts only if it was set before that"
        )
    nothing_ran = before is not None and not (
        before.samples("CompileTime") or before.samples("ExecuteTime") or before.counters.get("ExecuteComputation")
    )
    if enable and nothing_ran:
        os.environ["PT_XLA_DEBUG_LEVEL"] = "2"
        if not os.environ.get("PT_XLA_DEBUG_FILE"):
            # read at the same moment as the level: every later analysis goes to this file, not to the
            # notebook's stderr, and each watch() reads only what its own block appended
            fd, path = tempfile.mkstemp(prefix="nbdebug_pt_xla_debug_", suffix=".log")
            os.close(fd)
            os.environ["PT_XLA_DEBUG_FILE"] = path
        return True, (
            "debug analysis switched on (PT_XLA_DEBUG_LEVEL=2, written to "
            f"{os.environ['PT_XLA_DEBUG_FILE']}): nothing had run on the XLA device yet, and torch_xla reads the "
            "setting at its first execution; it now stays on for this process"
        )
    return False, (
        "debug analysis is off, and torch_xla 2.9 reads PT_XLA_DEBUG_LEVEL only once, at the first execution in "
        "the process: restart the kernel and run `%env PT_XLA_DEBUG_LEVEL=2` (or export it before starting "
        "Python) before the first XLA computation to get the cause and source line of every compile"
    )


class _FdCapture:
    """Redirect file descriptors 1 and 2 into temporary files (C++ writes there, not to sys.stderr)."""

    def __init__(self) -> None:
        self.saved: dict[int, int] = {}
        self.files: dict[int, Any] = {}

    def start(self) -> None:
        for fd, stream in ((1, sys.__stdout__), (2, sys.__stderr__)):
            try:
                if stream is not None:
                    stream.flush()
                tmp = tempfile.TemporaryFile(mode="w+b")
                self.saved[fd] = os.dup(fd)
                os.dup2(tmp.fileno(), fd)
                self.files[fd] = tmp
            except OSError:  # no such descriptor (embedded interpreters): capture what we can
                continue

    def stop(self) -> str:
        captured = []
        for fd, saved in self.saved.items():
            stream = sys.__stdout__ if fd == 1 else sys.__stderr__
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):
                pass
            os.dup2(saved, fd)
            os.close(saved)
            tmp = self.files[fd]
            tmp.seek(0)
            text = tmp.read().decode("utf-8", "replace")
            tmp.close()
            keep: list[str] = []
            for line in text.splitlines(keepends=True):
                if any(m in line for m in _DEBUG_MARKERS):
                    captured.append(line)
                elif line.strip() or keep:
                    keep.append(line)
            rest = "".join(keep).strip("\n")
            if rest.strip():  # give back everything that was not debug output
                os.write(fd, (rest + "\n").encode())
        self.saved.clear()
        self.files.clear()
        return "".join(captured)


@dataclass(frozen=True, repr=False)
class XlaCellReport(HasFindings, Result):
    """What a block of code (a notebook cell) did on the XLA device, and the diagnosis.

    Attributes
    ----------
    diagnosis : XlaDiagnosis
        Findings, headline counts and per-step numbers.
    report : MetricsReport
        The difference of every counter and metric between the start and the end of the block.
    per_step : tuple of StepStats
        One row per ``torch_xla.sync()`` inside the block.
    debug_log : str
        The captured debug analysis text (empty when the analysis is off).
    debug_status : str
        Whether the analysis was on, and how to turn it on when it was not.
    seconds : float
        Wall time of the block.
    """

    diagnosis: XlaDiagnosis
    report: MetricsReport
    per_step: tuple[StepStats, ...] = ()
    debug_log: str = ""
    debug_status: str = ""
    seconds: float = 0.0


    def _summary_line(self) -> str:
        return self.diagnosis._summary_line()

    @property
    def findings(self) -> tuple[Finding, ...]:
        """The diagnosis's findings."""
        return self.diagnosis.findings

    def _records(self) -> list[dict[str, Any]]:
        return [
            {"step": s.step, "compiles": s.compiles, "executions": s.executions,
             "transfers_from_device": s.transfers_from_device, "fallback_calls": s.fallback_calls,
             "compile_seconds": s.compile_seconds}
            for s in self.per_step
        ]


class XlaWatch(Recorder):
    """Measure what a block of code does on the XLA device and diagnose it (built by ``watch``).

    ``.result`` is the ``XlaCellReport`` once the block has ended (None before).
    """

    _label = "XlaWatch"

    def __init__(self, steps: int | None = None, debug: bool = True) -> None:
        self.steps = steps
        self.debug = debug
        self._result: XlaCellReport | None = None
        self._met: Any = None
        self._before: Snapshot | None = None
        self._marks: list[Snapshot] = []
        self._active = False
        self._capture: _FdCapture | None = None
        self._debug_file: tuple[str, int] | None = None
        self._status = ""
        self._t0 = 0.0

    @property
    def result(self) -> XlaCellReport | None:
        """The ``XlaCellReport`` of the block (None while it runs)."""
        return self._result

    def start(self) -> XlaWatch:
        """Snapshot every counter and metric, and start recording one snapshot per step; returns ``self``."""
        if self._active:
            return self
        self._met = _metrics_module()
        import torch_xla.core.xla_model as xm

        self._result = None
        self._before = take_snapshot(self._met)
        self._marks = []
        self._active = True

        def on_step() -> None:
            if not self._active:
                return
            self._marks.append(take_snapshot(self._met, light=True))
            xm.add_step_closure(on_step)

        xm.add_step_closure(on_step)
        if self.debug:
            on, self._status = debug_status(self._before)
            if on:
                path = os.environ.get("PT_XLA_DEBUG_FILE")
                if path:
                    self._debug_file = (path, os.path.getsize(path) if os.path.exists(path) else 0)
                else:
                    self._capture = _FdCapture()
                    self._capture.start()
        else:
            self._status = "debug capture not requested"
        self._t0 = time.perf_counter()
        return self

    def stop(self) -> None:
        """Stop recording, give the captured output back, and diagnose the difference (``result``)."""
        if not self._active:
            return
        seconds = time.perf_counter() - self._t0
        self._active = False  # the closure still pending for the next step does nothing
        log = ""
        if self._capture is not None:
            log = self._capture.stop()
            self._capture = None
        elif self._debug_file is not None:
            path, offset = self._debug_file
            try:  # what was appended since the start: the file's last (size now - size then) bytes, bounded
                grown = max(0, os.path.getsize(path) - offset)  # 0 for a FIFO or a device: refused below
                log = read_text(path, "the PT_XLA_DEBUG_FILE log", cap=min(grown, DEFAULT_CAP), tail=True)
            except (OSError, NbdebugError) as e:  # a FIFO or a device is refused at once, never read on and on
                log = ""
                self._status += f"; PT_XLA_DEBUG_FILE was not read ({e})"
        after = take_snapshot(self._met)
        assert self._before is not None
        report = _to_report(after, self._before)
        points = [self._before, *self._marks]
        per_step = tuple(_step_stats(i, a, b) for i, (a, b) in enumerate(zip(points, points[1:])))
        status = self._status
        if self.debug and not log and report.compiles and "off" not in status:
            status += "; no analysis output was captured (it was probably set after torch_xla's first execution)"
        diagnosis = diagnose(report, debug_log=log or None, steps=self.steps, per_step=per_step)
        if not log and self.debug:
            diagnosis = _with_note(diagnosis, status)
        self._result = XlaCellReport(diagnosis, report, per_step, log, status, seconds)


def watch(steps: int | None = None, debug: bool = True) -> XlaWatch:
    """Measure what a block of code does on the XLA device and diagnose it: ``with watch() as w:``, then ``w.result``.

    Parameters
    ----------
    steps : int, optional
        Training steps the block runs (default: the ``torch_xla.sync()`` calls seen).
    debug : bool
        Capture torch_xla's debug analysis (and switch it on if nothing has run on the device yet).

    Returns
    -------
    XlaWatch
        A recorder; ``.result`` is the ``XlaCellReport`` once the block has ended.

    Examples
    --------
    >>> with nbdebug.xla.watch() as w:          # doctest: +SKIP
    ...     for batch in loader:
    ...         train_step(batch); torch_xla.sync()
    >>> w.result.diagnosis.findings              # doctest: +SKIP
    """
    return XlaWatch(steps=steps, debug=debug)


def _with_note(diagnosis: XlaDiagnosis, note: str) -> XlaDiagnosis:
    import dataclasses

    notes = tuple(n for n in diagnosis.notes if not n.startswith("no debug log")) + (note,)
    return dataclasses.replace(diagnosis, notes=notes)
