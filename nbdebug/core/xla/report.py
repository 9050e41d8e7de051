"""``parse_report``: torch_xla ``metrics_report()`` / ``short_metrics_report()`` text -> ``MetricsReport``.

Handles every layout seen from 2019 to 2.9: the 2.x two-registry report (lazy-tensor core block, then the
runtime block), the 1.x single block, 1.x XRT server blocks (``Mean``/``StdDev``, ``25%=`` percentiles,
``nanB``), the 2019 ``Counter:`` accumulator line inside metric blocks, ``XLA_METRICS_FILE`` files with several
``[MetricsData; step=N]`` reports, and old metric names (``TransferFromServerTime`` is read as
``TransferFromDeviceTime``).  Time values are decoded exactly (see ``_units``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nbdebug.core._result import Result
from nbdebug.core.xla._units import parse_value, shorten
from nbdebug.errors import ReportParseError

__all__ = ["Metric", "Counter", "MetricsReport", "parse_report", "RENAMED", "FALLBACK_EXEMPT"]

# old name -> current name (commit 5ac722a109, first in 2.3.0; the 2019 sync counters predate Cached/UncachedCompile)
RENAMED: Mapping[str, str] = {
    "TransferFromServerTime": "TransferFromDeviceTime",
    "TransferToServerTime": "TransferToDeviceTime",
    "TransferToServerTransformTime": "TransferToDeviceTransformTime",
    "CachedSyncTensors": "CachedCompile",
    "UncachedSyncTensors": "UncachedCompile",
}
# `aten::` counters that are not missing lowerings: `.item()` / `bool()` / formatting of a 0-dim tensor
FALLBACK_EXEMPT = frozenset({"aten::_local_scalar_dense"})

_HEADER = re.compile(r"^(Metric|Counter):\s*(\S.*?)\s*$")
_FIELD = re.compile(r"^\s+(TotalSamples|Accumulator|Counter|ValueRate|Rate|Mean|StdDev|Value|Percentiles):\s*(.*?)\s*$")
_SAVED_STEP = re.compile(r"^\s*\[MetricsData; step=([0-9]+)\]\s*$")
_PERCENTILE = re.compile(r"^\s*([0-9]{1,3}(?:\.[0-9]{1,9})?)%=(\S+)\s*$")
_COUNT = re.compile(r"-?[0-9]{1,20}")  # ASCII digits, at most int64's 19 (and a sign)
_MAX_STEP_DIGITS = 18


def _count(field: str, text: str) -> int:
    if not _COUNT.fullmatch(text):
        raise ValueError(f"{field} {shorten(text)!r} is not a count (at most 20 ASCII digits)")
    return int(text)


@dataclass(frozen=True)
class Metric:
    """One ``Metric:`` block.

    Values are in seconds for time metrics, bytes for byte metrics, plain numbers otherwise (``unit`` says
    which: ``"s"``, ``"B"`` or ``""``).  ``percentiles`` are ``(percent, value)`` pairs over the retained
    samples (the last 1024 by default); ``total_samples`` and ``accumulator`` cover the whole run.
    """

    name: str
    total_samples: int
    accumulator: float | None
    unit: str = ""
    value_rate: float | None = None
    rate: float | None = None
    mean: float | None = None
    stddev: float | None = None
    percentiles: tuple[tuple[float, float], ...] = ()
    section: str = "lazy"
    raw_name: str = ""

    def percentile(self, percent: float) -> float | None:
        """The value at ``percent`` (e.g. 50 or 99) if the report printed it."""
        for p, v in self.percentiles:
            if abs(p - percent) < 1e-9:
                return v
        return None

    @property
    def max_retained(self) -> float | None:
        """The highest printed percentile value (the 99% one by default)."""
        return max((v for _, v in self.percentiles if not math.isnan(v)), default=None)


@dataclass(frozen=True)
class Counter:
    """One ``Counter:`` block."""

    name: str
    value: int
    section: str = "lazy"
    raw_name: str = ""


@dataclass(frozen=True, repr=False)
class MetricsReport(Result):
    """A parsed torch_xla metrics report.

    Attributes
    ----------
    metrics, counters : tuple
        ``Metric`` and ``Counter`` entries in report order (names normalized, see ``RENAMED``).
    layout : str
        ``"2.x"`` (two registries), ``"1.x"`` (one block), ``"1.x-xrt"`` (with XRT server metrics),
        ``"2019"`` (``Counter:`` accumulators), ``"short"`` (``short_metrics_report()``) or ``"live"`` (read
        through the torch_xla API).
    saved_step : int or None
        The ``step=N`` of the last ``[MetricsData; step=N]`` header (``XLA_METRICS_FILE``), if any.
    history : tuple of MetricsReport
        Earlier reports of the same file (``XLA_METRICS_FILE`` appends one per sync), oldest first.
    """

    metrics: tuple[Metric, ...]
    counters: tuple[Counter, ...]
    layout: str = "2.x"
    saved_step: int | None = None
    history: tuple[MetricsReport, ...] = field(default=(), compare=False)


    # --- lookup -------------------------------------------------------------------------------------------
    def counter(self, name: str, default: int = 0) -> int:
        """Value of counter ``name`` (old names accepted); absent counters are zero in torch_xla reports."""
        name = RENAMED.get(name, name)
        for c in self.counters:
            if c.name == name:
                return c.value
        return default

    def metric(self, name: str) -> Metric | None:
        """The metric ``name`` (old names accepted), or None when the report has no samples of it."""
        name = RENAMED.get(name, name)
        for m in self.metrics:
            if m.name == name:
                return m
        return None

    def samples(self, name: str) -> int:
        """TotalSamples of metric ``name`` (0 when absent)."""
        m = self.metric(name)
        return m.total_samples if m else 0

    # --- the numbers a diagnosis needs --------------------------------------------------------------------
    @property
    def compiles(self) -> int:
        """XLA compilations: ``CompileTime`` samples, else ``UncachedCompile``, else ``CreateCompileHandles``."""
        return self.samples("CompileTime") or self.counter("UncachedCompile") or self.counter("CreateCompileHandles")

    @property
    def cache_hits(self) -> int:
        """Graphs found in the compilation cache (``CachedCompile``)."""
        return self.counter("CachedCompile")

    @property
    def executions(self) -> int:
        """Graph executions (``ExecuteTime`` / ``ExecuteReplicatedTime`` samples, else the counters)."""
        return (
            self.samples("ExecuteTime") + self.samples("ExecuteReplicatedTime")
            or self.counter("ExecuteComputation") + self.counter("ExecuteReplicated")
        )

    @property
    def steps(self) -> int:
        """``MarkStep`` counter: calls of ``torch_xla.sync()`` / ``xm.mark_step()``."""
        return self.counter("MarkStep")

    @property
    def transfers_from_device(self) -> int:
        """Device-to-host transfers (``TransferFromDeviceTime`` samples)."""
        return self.samples("TransferFromDeviceTime")

    @property
    def compile_seconds(self) -> float:
        """Total compile time in seconds."""
        m = self.metric("CompileTime")
        return float(m.accumulator or 0.0) if m else 0.0

    @property
    def fallback_ops(self) -> dict[str, int]:
        """``aten::`` counters that went through the CPU fallback (missing lowerings), name -> calls."""
        return {
            c.name: c.value for c in self.counters if c.name.startswith("aten::") and c.name not in FALLBACK_EXEMPT
        }

    @property
    def local_scalar_reads(self) -> int:
        """``aten::_local_scalar_dense`` calls: ``.item()``, ``bool(t)``, ``if t:``, printing a 0-dim tensor."""
        return self.counter("aten::_local_scalar_dense")

    # --- Result protocol ----------------------------------------------------------------------------------
    def _summary_line(self) -> str:
        return (
            f"{len(self.metrics)} metrics, {len(self.counters)} counters ({self.layout}); "
            f"compiles={self.compiles} cache_hits={self.cache_hits} executions={self.executions} steps={self.steps}"
        )

    def _records(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for c in self.counters:
            rows.append({"kind": "counter", "name": c.name, "section": c.section, "value": c.value})
        for m in self.metrics:
            row: dict[str, Any] = {
                "kind": "metric",
                "name": m.name,
                "section": m.section,
                "unit": m.unit,
                "total_samples": m.total_samples,
                "accumulator": m.accumulator,
                "value_rate": m.value_rate,
                "rate": m.rate,
                "mean": m.mean,
                "stddev": m.stddev,
            }
            for p, v in m.percentiles:
                row[f"p{p:g}"] = v
            rows.append(row)
        return rows

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (without the history)."""
        d = super().to_dict()
        d.pop("history", None)
        d["n_history"] = len(self.history)
        return d


_UNIT = {"time": "s", "bytes": "B", "value": ""}


def _number(text: str) -> float | None:
    text = text.strip()
    if text.endswith("/ second"):
        text = text[: -len("/ second")].strip()
    if not text:
        return None
    return parse_value(text)[1]


def _finish_metric(name: str, fields: dict[str, str], section: str) -> Metric:
    acc_text = fields.get("Accumulator", fields.get("Counter", ""))
    kinds = []
    acc = None
    if acc_text:
        kind, acc = parse_value(acc_text)
        kinds.append(kind)
    percentiles: list[tuple[float, float]] = []
    for part in fields.get("Percentiles", "").split(";"):
        if not part.strip():
            continue
        m = _PERCENTILE.match(part)
        if not m:
            raise ValueError(f"bad percentile {part.strip()!r}")
        kind, value = parse_value(m.group(2))
        kinds.append(kind)
        percentiles.append((float(m.group(1)), value))
    # `nanB` makes an empty XRT metric look like bytes; trust a real value's kind first
    real = [k for k in kinds if k != "bytes"] or kinds or ["value"]
    unit = _UNIT[real[0]]
    if "TotalSamples" not in fields:
        raise ValueError("no TotalSamples line")
    canonical = RENAMED.get(name, name)
    return Metric(
        name=canonical,
        total_samples=_count("TotalSamples", fields["TotalSamples"]),
        accumulator=acc,
        unit=unit,
        value_rate=_number(fields["ValueRate"]) if "ValueRate" in fields else None,
        rate=_number(fields["Rate"]) if "Rate" in fields else None,
        mean=_number(fields["Mean"]) if "Mean" in fields else None,
        stddev=_number(fields["StdDev"]) if "StdDev" in fields else None,
        percentiles=tuple(percentiles),
        section=section,
        raw_name=name,
    )


def _parse_one(lines: list[tuple[int, str]], saved_step: int | None) -> MetricsReport:
    metrics: list[Metric] = []
    counters: list[Counter] = []
    current: tuple[str, str, int] | None = None  # (kind, name, line number)
    fields: dict[str, str] = {}
    section = "lazy"
    sections_seen = {"lazy"}
    last_kind = ""
    layout_2019 = False

    def flush() -> None:
        nonlocal current, fields, section, layout_2019
        if current is None:
            return
        kind, name, lineno = current
        try:
            if kind == "Metric":
                if "Counter" in fields and "Accumulator" not in fields:
                    layout_2019 = True
                m = _finish_metric(name, fields, section)
                if m.mean is not None or m.stddev is not None:
                    m = _replace_section(m, "server")
                    sections_seen.add("server")
                metrics.append(m)
            else:
                if "Value" not in fields:
                    raise ValueError("no Value line")
                counters.append(Counter(RENAMED.get(name, name), _count("Value", fields["Value"]), section, name))
        except ValueError as e:
            raise ReportParseError(
                f"line {lineno}: the {kind} block {shorten(name)!r} is malformed ({e}); expected the torch_xla "
                f"metrics report layout ('{kind}: NAME' followed by indented 'Field: value' lines)"
            ) from e
        current, fields = None, {}

    for lineno, line in lines:
        header = _HEADER.match(line)
        if header:
            flush()
            kind, name = header.groups()
            # a Metric after Counters starts the next registry (runtime in 2.x, XRT server in 1.x)
            if kind == "Metric" and last_kind == "Counter":
                section = "runtime" if section == "lazy" else section
                sections_seen.add(section)
            last_kind = kind
            current = (kind, name, lineno)
            continue
        fld = _FIELD.match(line)
        if fld and current is not None:
            fields[fld.group(1)] = fld.group(2)
            continue
        if current is not None and line.strip():
            # a stray line ends the block (logging interleaved with a pasted report)
            flush()
    flush()
    if not metrics and not counters:
        raise ReportParseError("no 'Metric:' or 'Counter:' block")
    if layout_2019:
        layout = "2019"
    elif "server" in sections_seen:
        layout = "1.x-xrt"
    elif _looks_short(metrics, counters):
        layout = "short"
    elif "runtime" in sections_seen and _two_registry(metrics, counters):
        layout = "2.x"
    else:
        layout = "1.x"
    return MetricsReport(tuple(metrics), tuple(counters), layout, saved_step)


def _two_registry(metrics: list[Metric], counters: list[Counter]) -> bool:
    # in 2.x the runtime block holds CompileTime/ExecuteTime; in 1.x everything is in the first block
    runtime = {m.name for m in metrics if m.section == "runtime"}
    return bool(runtime & {"CompileTime", "ExecuteTime", "TransferToDeviceTime", "TransferFromDeviceTime"})


def _looks_short(metrics: list[Metric], counters: list[Counter]) -> bool:
    short_metrics = {"CompileTime", "ExecuteTime", "ExecuteReplicatedTime", "TransferToDeviceTime", "TransferFromDeviceTime"}
    short_counters = {"CachedCompile", "MarkStep", "DynamoSyncInputExecuteTime"}
    if not metrics and not counters:
        return False
    # short_metrics_report(): only its default metrics and counters, plus every non-zero aten:: counter
    return bool(metrics) and all(m.name in short_metrics for m in metrics) and all(
        c.name in short_counters or c.name.startswith("aten::") for c in counters
    )


def _replace_section(m: Metric, section: str) -> Metric:
    import dataclasses

    return dataclasses.replace(m, section=section)


def parse_report(text: str) -> MetricsReport:
    """Parse a torch_xla metrics report (any version from 2019 to 2.9+, full or short).

    Parameters
    ----------
    text : str
        The output of ``torch_xla.debug.metrics.metrics_report()`` or ``short_metrics_report()``, a log that
        contains one pasted in it, or an ``XLA_METRICS_FILE`` file (the last report is returned; earlier ones
        are in ``.history``).

    Returns
    -------
    MetricsReport

    Raises
    ------
    ReportParseError
        When the text holds no ``Metric:``/``Counter:`` block, or a block is malformed.
    """
    if not isinstance(text, str):
        raise ReportParseError(
            f"parse_report expects the report text (str), got {type(text).__name__}; "
            "pass torch_xla.debug.metrics.metrics_report() or the contents of a saved report"
        )
    chunks: list[tuple[int | None, list[tuple[int, str]]]] = [(None, [])]
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#"):
            continue
        saved = _SAVED_STEP.match(line)
        if saved:
            digits = saved.group(1)
            if len(digits) > _MAX_STEP_DIGITS:
                raise ReportParseError(
                    f"line {lineno}: '[MetricsData; step={shorten(digits, 20)}]' has a step number of {len(digits)} "
                    f"digits; expected the step count (at most {_MAX_STEP_DIGITS} digits) of a torch_xla metrics "
                    "report file (XLA_METRICS_FILE)")
            chunks.append((int(digits), []))
            continue
        chunks[-1][1].append((lineno, line))
    reports = []
    errors = []
    for step, lines in chunks:
        if not any(line.strip() for _, line in lines):
            continue
        try:
            reports.append(_parse_one(lines, step))
        except ReportParseError as e:
            errors.append(e)
    if not reports:
        head = text.strip().splitlines()[0][:80] if text.strip() else ""
        reason = f" ({errors[0]})" if errors else ""
        raise ReportParseError(
            f"not a torch_xla metrics report{reason}: the text starts with {head!r}; expected the output of "
            "torch_xla.debug.metrics.metrics_report() ('Metric: NAME' / 'Counter: NAME' blocks)"
        ) from (errors[0] if errors else None)
    last = reports[-1]
    if len(reports) > 1:
        import dataclasses

        last = dataclasses.replace(last, history=tuple(reports[:-1]))
    return last
