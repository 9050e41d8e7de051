"""Text and HTML for torch_xla results: ``MetricsReport``, ``XlaDiagnosis``, ``XlaCellReport``, ``DebugLog``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nbdebug.core.xla.debuglog import DebugLog
from nbdebug.core.xla.diagnose import StepStats, XlaDiagnosis
from nbdebug.core.xla.live import XlaCellReport
from nbdebug.core.xla.report import MetricsReport
from nbdebug.render._html import esc, fmt_bytes, fmt_seconds, kv_table, panel, table
from nbdebug.render._registry import renders
from nbdebug.render.findings import findings_html, findings_text, panel_kind

__all__ = ["report_text", "report_html", "diagnosis_text", "diagnosis_html", "cell_text", "cell_html", "debuglog_text",
           "debuglog_html"]

_HEADLINE = (
    ("compiles", "compiles"),
    ("cache_hits", "cache hits"),
    ("executions", "executions"),
    ("steps", "steps"),
    ("transfers_from_device", "device->host transfers"),
)


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return fmt_seconds(value)
    if unit == "B":
        return fmt_bytes(value)
    return f"{value:g}"


def _metric_rows(report: MetricsReport) -> list[tuple[Any, ...]]:
    return [
        (m.name, m.section, m.total_samples, _fmt(m.accumulator, m.unit), _fmt(m.percentile(50), m.unit),
         _fmt(m.max_retained, m.unit))
        for m in report.metrics
    ]


@renders(MetricsReport, "text")
def report_text(report: MetricsReport) -> str:
    """Plain-text summary of a parsed report."""
    lines = [f"torch_xla metrics report ({report.layout}): " + ", ".join(
        f"{label}: {getattr(report, key)}" for key, label in _HEADLINE)]
    if report.fallback_ops:
        lines.append("CPU fallbacks: " + ", ".join(f"{k} x{v}" for k, v in report.fallback_ops.items()))
    lines.append("")
    lines.append(f"{'metric':32} {'section':8} {'samples':>9} {'total':>12} {'p50':>12} {'max':>12}")
    for row in _metric_rows(report):
        lines.append(f"{row[0]:32} {row[1]:8} {row[2]:>9} {row[3]:>12} {row[4]:>12} {row[5]:>12}")
    interesting = [c for c in report.counters if not c.name.startswith("xla::")]
    if interesting:
        lines.append("")
        lines.append("counters: " + ", ".join(f"{c.name} {c.value}" for c in interesting))
    return "\n".join(lines)


@renders(MetricsReport, "html")
def report_html(report: MetricsReport) -> str:
    """HTML panel for a parsed report."""
    head = kv_table([(label, getattr(report, key)) for key, label in _HEADLINE])
    metrics = table(["metric", "section", "samples", "total", "p50", "max"], _metric_rows(report), numeric=(2, 3, 4, 5))
    counters = table(["counter", "section", "value"], [(c.name, c.section, c.value) for c in report.counters], numeric=(2,))
    body = head + "<h4>Metrics</h4>" + metrics + f"<details><summary>{len(report.counters)} counters</summary>{counters}</details>"
    return panel(f"torch_xla metrics report ({report.layout})", body)


_HEALTHY = "No problem found: the graphs are compiled once and then reused."


@renders(XlaDiagnosis, "text")
def diagnosis_text(d: XlaDiagnosis) -> str:
    """Plain-text diagnosis."""
    lines = ["torch_xla diagnosis: " + ", ".join(f"{label}: {getattr(d, key)}" for key, label in _HEADLINE)
             + f", compile time: {fmt_seconds(d.compile_seconds)}"]
    if d.fallback_ops:
        lines.append("CPU fallbacks: " + ", ".join(f"{k} x{v}" for k, v in d.fallback_ops.items()))
    if d.ok:
        lines.append(_HEALTHY)
    if d.findings:
        lines.append(findings_text(d.findings))
    for n in d.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines)


def _findings_html(d: XlaDiagnosis) -> str:
    parts = []
    if d.ok:
        parts.append(f'<div class="nbd-first">{esc(_HEALTHY)}</div>')
    if d.findings:
        parts.append(findings_html(d.findings))
    for n in d.notes:
        parts.append(f'<div class="nbd-muted">{esc(n)}</div>')
    return "".join(parts)


@renders(XlaDiagnosis, "html")
def diagnosis_html(d: XlaDiagnosis) -> str:
    """HTML panel for a diagnosis."""
    head = kv_table([(label, getattr(d, key)) for key, label in _HEADLINE]
                    + [("compile time", fmt_seconds(d.compile_seconds)),
                       ("CPU fallbacks", ", ".join(f"{k} x{v}" for k, v in d.fallback_ops.items()) or "none")])
    return panel("torch_xla diagnosis", _findings_html(d) + head + _per_step_html(d.per_step), kind=panel_kind(d.findings))


def _per_step_html(per_step: Sequence[StepStats]) -> str:
    if not per_step:
        return ""
    rows = [(s.step, s.compiles, s.executions, s.transfers_from_device, s.fallback_calls,
             "—" if s.compile_seconds is None else fmt_seconds(s.compile_seconds)) for s in per_step]
    note = ('<div class="nbd-muted">compile time per step: — where the source (a debug log) does not record it; '
            "the total above comes from the metrics report</div>"
            if any(s.compile_seconds is None for s in per_step) else "")
    return "<h4>Per step</h4>" + table(
        ["step", "compiles", "executions", "transfers", "fallback calls", "compile time"], rows,
        numeric=(0, 1, 2, 3, 4, 5)) + note


@renders(XlaCellReport, "text")
def cell_text(r: XlaCellReport) -> str:
    """Plain-text report of what a cell did."""
    lines = [f"XLA cell report ({fmt_seconds(r.seconds)} wall)", diagnosis_text(r.diagnosis)]
    if r.per_step:
        lines.append("per step: " + " ".join(
            f"[{s.step}: {s.compiles}c {s.executions}e {s.transfers_from_device}t]" for s in r.per_step))
    if r.debug_status:
        lines.append(f"debug: {r.debug_status}")
    return "\n".join(lines)


@renders(XlaCellReport, "html")
def cell_html(r: XlaCellReport) -> str:
    """HTML panel of what a cell did."""
    d = r.diagnosis
    head = kv_table([(label, getattr(d, key)) for key, label in _HEADLINE]
                    + [("compile time", fmt_seconds(d.compile_seconds)), ("wall time", fmt_seconds(r.seconds)),
                       ("CPU fallbacks", ", ".join(f"{k} x{v}" for k, v in d.fallback_ops.items()) or "none")])
    debug = f'<div class="nbd-muted">debug: {esc(r.debug_status)}</div>' if r.debug_status else ""
    return panel("What this cell did on the XLA device",
                 _findings_html(d) + head + _per_step_html(r.per_step) + debug, kind=panel_kind(d.findings))


_MAX_EVENTS = 200


def _event_rows(log: DebugLog) -> list[tuple[Any, ...]]:
    return [
        (e.step, e.kind, e.cause, e.graph_hash[:12], "-" if e.n_inputs is None else e.n_inputs,
         str(e.user_frame) if e.user_frame is not None else "-")
        for e in log.events[:_MAX_EVENTS]
    ]


def _log_head(log: DebugLog) -> list[tuple[str, Any]]:
    return [("compiles", len(log.compiles)), ("executions", len(log.executions)), ("steps", log.steps),
            ("host reads", sum(1 for e in log.events if e.is_host_read))]


@renders(DebugLog, "text")
def debuglog_text(log: DebugLog) -> str:
    """Plain-text summary of a parsed debug log: one line per compile/execution, with its cause and user line."""
    lines = ["torch_xla debug log: " + ", ".join(f"{k}={v}" for k, v in _log_head(log))]
    for step, kind, cause, _hash, _inputs, where in _event_rows(log):
        lines.append(f"  step {step:<3} {kind:<10} {cause}" + (f"  at {where}" if where != "-" else ""))
    if len(log.events) > _MAX_EVENTS:
        lines.append(f"  ... {len(log.events) - _MAX_EVENTS} more events")
    lines += [f"profiler: {p}" for p in log.profiler]
    return "\n".join(lines)


@renders(DebugLog, "html")
def debuglog_html(log: DebugLog) -> str:
    """HTML panel of a parsed debug log."""
    body = kv_table(_log_head(log))
    if log.events:
        body += "<h4>Compilations and executions</h4>" + table(
            ["step", "kind", "cause", "graph hash", "inputs", "your line"], _event_rows(log), numeric=(0, 4))
        if len(log.events) > _MAX_EVENTS:
            body += f'<div class="nbd-muted">... {len(log.events) - _MAX_EVENTS} more events</div>'
    if log.profiler:
        body += "<h4>torch_xla's own analysis</h4>" + "".join(
            f'<div class="nbd-muted">{esc(p)}</div>' for p in log.profiler)
    return panel("torch_xla debug log", body)
