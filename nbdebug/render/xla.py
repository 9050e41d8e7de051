"""Text and HTML for torch_xla results: ``MetricsReport``, ``XlaDiagnosis``, ``XlaCellReport``."""

from __future__ import annotations

from typing import Any

from nbdebug.core.xla.diagnose import XlaDiagnosis
from nbdebug.core.xla.live import XlaCellReport
from nbdebug.core.xla.report import MetricsReport
from nbdebug.render._html import esc, fmt_bytes, fmt_seconds, kv_table, panel, table
from nbdebug.render._registry import renders

__all__ = ["report_text", "report_html", "diagnosis_text", "diagnosis_html", "cell_text", "cell_html"]

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


def _metric_rows(report: Any) -> list[tuple[Any, ...]]:
    return [
        (m.name, m.section, m.total_samples, _fmt(m.accumulator, m.unit), _fmt(m.percentile(50), m.unit),
         _fmt(m.max_retained, m.unit))
        for m in report.metrics
    ]


@renders(MetricsReport, "text")
def report_text(report: Any) -> str:
    """Plain-text summary of a parsed report."""
    lines = [f"torch_xla metrics report ({report.layout}): " + ", ".join(
        f"{label}={getattr(report, key)}" for key, label in _HEADLINE)]
    if report.fallback_ops:
        lines.append("CPU fallbacks: " + ", ".join(f"{k} x{v}" for k, v in report.fallback_ops.items()))
    lines.append("")
    lines.append(f"{'metric':32} {'section':8} {'samples':>9} {'total':>12} {'p50':>12} {'max':>12}")
    for row in _metric_rows(report):
        lines.append(f"{row[0]:32} {row[1]:8} {row[2]:>9} {row[3]:>12} {row[4]:>12} {row[5]:>12}")
    interesting = [c for c in report.counters if not c.name.startswith("xla::")]
    if interesting:
        lines.append("")
        lines.append("counters: " + ", ".join(f"{c.name}={c.value}" for c in interesting))
    return "\n".join(lines)


@renders(MetricsReport, "html")
def report_html(report: Any) -> str:
    """HTML panel for a parsed report."""
    head = kv_table([(label, getattr(report, key)) for key, label in _HEADLINE])
    metrics = table(["metric", "section", "samples", "total", "p50", "max"], _metric_rows(report), numeric=(2, 3, 4, 5))
    counters = table(["counter", "section", "value"], [(c.name, c.section, c.value) for c in report.counters], numeric=(2,))
    body = head + "<h4>Metrics</h4>" + metrics + f"<details><summary>{len(report.counters)} counters</summary>{counters}</details>"
    return panel(f"torch_xla metrics report ({report.layout})", body)


def _finding_text(f: Any) -> list[str]:
    out = [f"[{f.severity}] {f.kind}: {f.message}"]
    for line in f.lines:
        out.append(f"    at {line}")
    if f.evidence:
        out.append("    evidence: " + ", ".join(f"{k}={v}" for k, v in f.evidence.items()))
    if f.severity != "info":
        out.append(f"    fix: {f.fix}")
    return out


@renders(XlaDiagnosis, "text")
def diagnosis_text(d: Any) -> str:
    """Plain-text diagnosis."""
    lines = ["torch_xla diagnosis: " + ", ".join(f"{label}={getattr(d, key)}" for key, label in _HEADLINE)
             + f", compile time={fmt_seconds(d.compile_seconds)}"]
    if d.fallback_ops:
        lines.append("CPU fallbacks: " + ", ".join(f"{k} x{v}" for k, v in d.fallback_ops.items()))
    if not d.findings or d.ok:
        lines.append("No problem found: the graphs are compiled once and then reused.")
    for f in d.findings:
        lines.extend(_finding_text(f))
    for n in d.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines)


def _findings_html(d: Any) -> str:
    parts = []
    if not d.findings or d.ok:
        parts.append('<div class="nbd-first">No problem found: the graphs are compiled once and then reused.</div>')
    for f in d.findings:
        where = "".join(f"<div><code>{esc(line)}</code></div>" for line in f.lines)
        evidence = ", ".join(f"{esc(k)}={esc(v)}" for k, v in f.evidence.items())
        fix = f"<div><b>Fix:</b> {esc(f.fix)}</div>" if f.severity != "info" else ""
        parts.append(
            f'<div><span class="sev-{esc(f.severity)}">{esc(f.severity)}</span> <b>{esc(f.kind)}</b>: {esc(f.message)}'
            f'{where}<div class="nbd-muted">{evidence}</div>{fix}</div>'
        )
    for n in d.notes:
        parts.append(f'<div class="nbd-muted">{esc(n)}</div>')
    return "".join(parts)


def _severity_kind(d: Any) -> str:
    sevs = {f.severity for f in d.findings}
    return "error" if "error" in sevs else "warning" if "warning" in sevs else "ok"


@renders(XlaDiagnosis, "html")
def diagnosis_html(d: Any) -> str:
    """HTML panel for a diagnosis."""
    head = kv_table([(label, getattr(d, key)) for key, label in _HEADLINE]
                    + [("compile time", fmt_seconds(d.compile_seconds)),
                       ("CPU fallbacks", ", ".join(f"{k} x{v}" for k, v in d.fallback_ops.items()) or "none")])
    return panel("torch_xla diagnosis", _findings_html(d) + head + _per_step_html(d.per_step), kind=_severity_kind(d))


def _per_step_html(per_step: Any) -> str:
    if not per_step:
        return ""
    rows = [(s.step, s.compiles, s.executions, s.transfers_from_device, s.fallback_calls, fmt_seconds(s.compile_seconds))
            for s in per_step]
    return "<h4>Per step</h4>" + table(
        ["step", "compiles", "executions", "transfers", "fallback calls", "compile time"], rows, numeric=(0, 1, 2, 3, 4, 5))


@renders(XlaCellReport, "text")
def cell_text(r: Any) -> str:
    """Plain-text report of what a cell did."""
    lines = [f"XLA cell report ({fmt_seconds(r.seconds)} wall)", diagnosis_text(r.diagnosis)]
    if r.per_step:
        lines.append("per step: " + " ".join(
            f"[{s.step}: {s.compiles}c {s.executions}e {s.transfers_from_device}t]" for s in r.per_step))
    if r.debug_status:
        lines.append(f"debug: {r.debug_status}")
    return "\n".join(lines)


@renders(XlaCellReport, "html")
def cell_html(r: Any) -> str:
    """HTML panel of what a cell did."""
    d = r.diagnosis
    head = kv_table([(label, getattr(d, key)) for key, label in _HEADLINE]
                    + [("compile time", fmt_seconds(d.compile_seconds)), ("wall time", fmt_seconds(r.seconds)),
                       ("CPU fallbacks", ", ".join(f"{k} x{v}" for k, v in d.fallback_ops.items()) or "none")])
    debug = f'<div class="nbd-muted">debug: {esc(r.debug_status)}</div>' if r.debug_status else ""
    return panel("What this cell did on the XLA device",
                 _findings_html(d) + head + _per_step_html(r.per_step) + debug, kind=_severity_kind(d))
