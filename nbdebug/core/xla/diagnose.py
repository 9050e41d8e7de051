"""``diagnose``: what makes a torch_xla run slow, from a metrics report, a debug log and/or a per-step timeline.

Findings (``kind``): ``recompilation``, ``host_sync``, ``cpu_fallback``, ``missing_sync``.  Healthy runs stay
quiet: a couple of warm-up graphs, an lr warm-up from 0.0, or bucketed padding with a bounded number of
graphs give no warning or error (at most an ``info`` line).  Thresholds, titles, fixes and the ops known to
fall back to the CPU live in ``nbdebug.core.knowledge.xla``.
"""

from __future__ import annotations

from collections import Counter as _Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from nbdebug.core import knowledge
from nbdebug.core._findings import Finding, Fix, HasFindings, sort_findings
from nbdebug.core._result import Result
from nbdebug.core.knowledge import Entry
from nbdebug.core.xla.debuglog import DebugLog, parse_debug_log
from nbdebug.core.xla.report import MetricsReport, parse_report
from nbdebug.errors import InvalidArgumentError, ReportParseError

__all__ = ["StepStats", "XlaDiagnosis", "diagnose", "fallback_entry"]


@dataclass(frozen=True)
class StepStats:
    """What one training step (between two syncs) did; from the live API or a debug log."""

    step: int
    compiles: int
    executions: int = 0
    transfers_from_device: int = 0
    fallback_calls: int = 0
    compile_seconds: float | None = None  # None: not known (a debug log records no compile times)


@dataclass(frozen=True, repr=False)
class XlaDiagnosis(HasFindings, Result):
    """The diagnosis of a torch_xla run (or of one cell).

    Attributes
    ----------
    findings : tuple of Finding
        Most severe first (``nbdebug.core._findings.Finding``; ``where`` holds the user's source lines).
    compiles, cache_hits, executions, steps, transfers_from_device : int
        The headline counters (``steps`` is the caller's or ``MarkStep``).
    fallback_ops : dict
        ``aten::`` op -> calls that ran on the CPU (``aten::_local_scalar_dense`` excluded).
    compile_seconds : float
        Total compile time.
    per_step : tuple of StepStats
        Per-step numbers when known (live ``watch`` or a debug log).
    notes : tuple of str
        What the diagnosis could not see (e.g. no debug log: no source lines).
    """

    findings: tuple[Finding, ...]
    compiles: int
    cache_hits: int
    executions: int
    steps: int
    transfers_from_device: int
    fallback_ops: dict[str, int] = field(default_factory=dict)
    compile_seconds: float = 0.0
    per_step: tuple[StepStats, ...] = ()
    notes: tuple[str, ...] = ()
    profiler_lines: tuple[str, ...] = ()


    def _summary_line(self) -> str:
        worst = ", ".join(f"{f.severity} {f.kind}" for f in self.findings if f.severity != "info") or "no problem found"
        return f"{worst}; compiles={self.compiles} cache_hits={self.cache_hits} steps={self.steps}"

    def _records(self) -> list[dict[str, Any]]:
        return [f.record() for f in self.findings]


def _t(name: str) -> float:
    return knowledge.threshold(name)


def fallback_entry(op: str) -> Entry | None:
    """The knowledge entry for an ATen op that ran on the CPU (``aten::nonzero``), or None."""
    return knowledge.match("xla_fallback", op, anchored=True)


_SHORT_LAST_BATCH = (
    Fix("Give the last batch the full batch size", "DataLoader(ds, batch_size=bs, drop_last=True)"),
    Fix("Or pad the last batch to the full batch size and mask the padding out of the loss"),
)


def _finding(
    kind: str,
    severity: str,
    message: str,
    evidence: dict[str, Any],
    where: Sequence[str] = (),
    *,
    fixes: Sequence[Fix] | None = None,
) -> Finding:
    if severity == "info" and fixes is None:
        fixes = ()  # a remark ("bounded", "occasional"): nothing to fix
    return knowledge.finding(kind, message, where, severity=severity, fixes=fixes, evidence=evidence)


_ELSEWHERE = "(recorded on another machine)"


def _where(frame: Any) -> str:
    """``file:line in function``, or, for a file that is not on this machine, a sentence saying so.

    A log recorded elsewhere names files that are not here: such a path is never presented as the user's code.
    """
    import os

    if frame.file.startswith("<") or os.path.exists(frame.file):
        return str(frame)
    name = os.path.basename(frame.file.replace("\\", "/")) or frame.file
    return f"{name}:{frame.line} in {frame.function} {_ELSEWHERE}"


def _user_lines(events: Sequence[Any]) -> tuple[str, ...]:
    counts = _Counter(_where(e.user_frame) for e in events if e.user_frame is not None)
    return tuple(f"{loc} ({n}x)" if n > 1 else loc for loc, n in counts.most_common(5))


def _per_step_from_log(log: DebugLog) -> tuple[StepStats, ...]:
    if not log.events:
        return ()
    n = max(e.step for e in log.events) + 1
    compiles = [0] * n
    execs = [0] * n
    for e in log.events:
        if e.kind == "compile":
            compiles[e.step] += 1
        else:
            execs[e.step] += 1
    return tuple(StepStats(i, compiles[i], execs[i]) for i in range(n))


def _per_step_from_history(reports: Sequence[MetricsReport]) -> tuple[StepStats, ...]:
    # XLA_METRICS_FILE appends one cumulative report per sync: consecutive differences are per-step numbers
    rows = []
    prev: MetricsReport | None = None
    for i, r in enumerate(reports):
        rows.append(StepStats(
            i,
            r.compiles - (prev.compiles if prev else 0),
            r.executions - (prev.executions if prev else 0),
            r.transfers_from_device - (prev.transfers_from_device if prev else 0),
            sum(r.fallback_ops.values()) - (sum(prev.fallback_ops.values()) if prev else 0),
            r.compile_seconds - (prev.compile_seconds if prev else 0.0),
        ))
        prev = r
    return tuple(rows)


def _recompilation(
    compiles: int, hits: int | None, steps: int, per_step: Sequence[StepStats], log: DebugLog | None
) -> list[Finding]:
    warm = int(_t("warmup_graphs"))
    evidence: dict[str, Any] = {"compiles": compiles, "cache_hits": hits, "steps": steps}
    if compiles <= warm or steps < _t("min_steps") and not per_step:
        return []
    lines: tuple[str, ...] = ()
    if log is not None:
        lines = _user_lines([e for e in log.compiles if e.step >= warm])
    causes = (
        "new graphs keep appearing: dynamic input shapes (unpadded sequence lengths), a Python scalar baked into "
        "the graph as a constant (a changing exponent, threshold or schedule value), or data-dependent shapes"
    )
    if len(per_step) >= _t("min_steps"):
        per = [s.compiles for s in per_step]
        evidence["compiles_per_step"] = per
        after = per[warm:]
        late = sum(1 for c in after if c)
        if after and late / len(after) >= _t("storm_compiles_per_step"):
            return [_finding(
                "recompilation", "error",
                f"Recompiling in {late} of {len(after)} steps after warm-up ({compiles} graphs compiled in "
                f"{len(per)} steps): {causes}.", evidence, lines)]
        if late and per[-1] and not any(per[warm:-1]):
            return [_finding(
                "recompilation", "warning",
                f"The last step compiled {per[-1]} new graph(s) after {len(per) - 1 - warm} steps that only hit the "
                "cache: its input shape changed, typically a short last batch. It will recompile again at the "
                "end of every epoch that has a different remainder.", evidence, lines, fixes=_SHORT_LAST_BATCH)]
        if late:
            return [_finding(
                "recompilation", "info",
                f"{compiles} graphs for {len(per)} steps, a few after warm-up but not every step: bounded "
                "(e.g. one per padding bucket); fine as long as the number of shapes stays small.",
                evidence, lines)]
        return []
    if hits is None:  # cache hits unknown: only the compiles-per-step rule applies
        if steps and compiles >= max(warm + 2, _t("storm_compiles_per_step") * steps):
            return [_finding(
                "recompilation", "error",
                f"{compiles} graphs compiled in {steps} steps ({compiles / steps:.2f} per step): {causes}.",
                evidence, lines)]
        return []
    ratio = hits / (hits + compiles) if hits + compiles else 0.0
    evidence["cache_hit_ratio"] = round(ratio, 3)
    if steps and compiles >= max(warm + 2, _t("storm_compiles_per_step") * steps):
        return [_finding(
            "recompilation", "error",
            f"{compiles} graphs compiled in {steps} steps ({compiles / steps:.2f} per step; {hits} cache hits): "
            f"{causes}.", evidence, lines)]
    if ratio < _t("cache_hit_ratio") and hits + compiles >= 2 * warm + 2:
        return [_finding(
            "recompilation", "warning",
            f"Only {hits} of {hits + compiles} graph runs came from the compilation cache: {causes}.",
            evidence, lines)]
    return [_finding(
        "recompilation", "info",
        f"{compiles} graphs compiled for {steps or '?'} steps, {compiles - warm} more than a training step's "
        f"warm-up ({warm}) but bounded ({ratio:.0%} cache hits). Harmless if they come from a few padding "
        "buckets or an evaluation loop; if one appeared at the end of the epoch it is a short last batch "
        "(drop_last=True).", evidence, lines)]


def diagnose(
    report_or_text: MetricsReport | str | None = None,
    *,
    debug_log: str | DebugLog | None = None,
    steps: int | None = None,
    per_step: Sequence[StepStats] = (),
) -> XlaDiagnosis:
    """Diagnose a torch_xla run from its metrics report, and better with its debug log.

    Parameters
    ----------
    report_or_text : MetricsReport or str, optional
        A parsed report or the text of ``metrics_report()`` (any version).  May be None when only a debug log
        is available.
    debug_log : str or DebugLog, optional
        ``PT_XLA_DEBUG_LEVEL=2`` / ``PT_XLA_DEBUG=1`` output: gives the cause of each compile/execution and
        the user's source line behind it.
    steps : int, optional
        Training steps the report covers; defaults to the ``MarkStep`` counter.
    per_step : sequence of StepStats, optional
        Per-step numbers (``watch`` fills this in).

    Returns
    -------
    XlaDiagnosis

    Raises
    ------
    ReportParseError
        When the report text is not a torch_xla metrics report, or neither a report nor a log is given.
    InvalidArgumentError
        When an argument has the wrong type, or ``steps`` is negative.
    """
    if report_or_text is not None and not isinstance(report_or_text, (str, MetricsReport)):
        raise InvalidArgumentError(
            f"diagnose: got a {type(report_or_text).__name__} as the report; expected the text of "
            "torch_xla.debug.metrics.metrics_report(), a MetricsReport, or None")
    if debug_log is not None and not isinstance(debug_log, (str, DebugLog)):
        raise InvalidArgumentError(
            f"diagnose: got a {type(debug_log).__name__} as debug_log; expected the text of PT_XLA_DEBUG_LEVEL "
            "output, a DebugLog, or None")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 0):
        raise InvalidArgumentError(f"diagnose: steps={steps!r}; expected a number of training steps >= 0")
    if isinstance(report_or_text, str):
        report: MetricsReport | None = parse_report(report_or_text)
    else:
        report = report_or_text
    log = parse_debug_log(debug_log) if isinstance(debug_log, str) else debug_log
    if report is None and not log:
        raise ReportParseError(
            "diagnose needs a metrics report or a debug log; got neither (expected the text of "
            "torch_xla.debug.metrics.metrics_report() or PT_XLA_DEBUG_LEVEL output)"
        )
    notes: list[str] = []
    if log is not None and not per_step:
        per_step = _per_step_from_log(log) if log.executions else ()
    if report is not None and report.history and not per_step and steps is None:
        per_step = _per_step_from_history((*report.history, report))
    if report is not None:
        compiles, hits, executions = report.compiles, report.cache_hits, report.executions
        marks, transfers = report.steps, report.transfers_from_device
        fallbacks, scalar_reads = report.fallback_ops, report.local_scalar_reads
        compile_seconds = report.compile_seconds
    else:
        assert log is not None
        compiles, hits, executions = len(log.compiles), 0, len(log.executions)
        marks, fallbacks, scalar_reads, compile_seconds = log.steps, {}, 0, 0.0
        hits = max(0, executions - compiles)
        # every execution caused by reading a value is followed by a device->host transfer
        transfers = sum(1 for e in (log.executions or log.compiles) if e.is_host_read)
        notes.append("no metrics report: counts come from the debug log, which misses graphs run on threads "
                     "without Python frames (e.g. inside backward)")
    if log is not None:
        for line in log.profiler:
            if line.startswith("Op(s) not lowered:") and report is None:
                names = [n.strip() for n in line.split(":", 1)[1].split("Please")[0].split(",") if n.strip()]
                fallbacks = {n: 0 for n in names}
    n_steps = steps if steps is not None else marks
    findings: list[Finding] = []
    lines: tuple[str, ...]
    counters_unknown = report is not None and not report.counters
    if counters_unknown:
        # a pasted excerpt without its Counter blocks: MarkStep and CachedCompile are unknown, not zero
        notes.append("the report has no Counter blocks (cut short?): syncs and cache hits are unknown"
                     + ("" if steps is not None else "; pass steps=N"))

    # missing_sync ------------------------------------------------------------------------------------------
    if counters_unknown:
        pass
    elif marks == 0 and (executions or compiles) and (steps is None or steps >= 1):
        sev = "error" if steps and steps >= 2 else "warning"
        ev: dict[str, Any] = {"MarkStep": 0, "executions": executions, "compiles": compiles}
        if report is not None and report.metric("TensorsGraphSize"):
            g = report.metric("TensorsGraphSize")
            ev["largest_graph_nodes"] = g.max_retained if g else None
        lines = _user_lines(log.events) if log is not None else ()
        findings.append(_finding(
            "missing_sync", sev,
            "No torch_xla.sync() / mark_step() ran"
            + (f" in {steps} steps" if steps else "")
            + f": the lazy graph was only cut when a value was read ({executions} execution(s)), so every step of a "
            "loop is traced into one graph that grows with it and is compiled from scratch when finally read"
            + ("." if steps else " (a one-off computation or an inference cell needs no sync: ignore this there)."),
            ev, lines))
    elif steps and marks and marks < steps / 2:
        findings.append(_finding(
            "missing_sync", "warning",
            f"Only {marks} syncs for {steps} steps: the graph spans about {steps / marks:.0f} steps and grows "
            "with them.", {"MarkStep": marks, "steps": steps}))

    # cpu_fallback ------------------------------------------------------------------------------------------
    if fallbacks:
        per = {op: (n / n_steps if n_steps else None) for op, n in fallbacks.items()}
        parts = []
        op_fixes: list[Fix] = []
        for op, n in sorted(fallbacks.items(), key=lambda kv: -kv[1]):
            per_text = f", {per[op]:.1f}/step" if per[op] else ""
            entry = fallback_entry(op)
            parts.append(f"{op} ({n} calls{per_text}{'; ' + entry.summary if entry else ''})")
            if entry:
                op_fixes += [Fix(f"{op}: {x.title}", x.code) for x in entry.fixes]
        every_step = any(r is not None and r >= 1 for r in per.values())
        lines = ()
        if log is not None and not scalar_reads:
            lines = _user_lines([e for e in log.events if e.is_host_read])
        findings.append(_finding(
            "cpu_fallback", "error" if every_step else "warning",
            "Ops without an XLA lowering ran on the CPU: " + "; ".join(parts)
            + ". Each call copies its inputs to the host, cuts the graph and uploads the result.",
            {"fallback_ops": dict(fallbacks), "transfers_from_device": transfers, "executions": executions},
            lines, fixes=(*op_fixes, *knowledge.entry("cpu_fallback").fixes)))

    # host_sync ---------------------------------------------------------------------------------------------
    syncs = n_steps if counters_unknown else marks
    if n_steps and syncs:
        extra_exec = max(0, executions - syncs)
        reads = scalar_reads
        host_events = [e for e in log.events if e.is_host_read] if log is not None else []
        if not fallbacks:
            reads = max(reads, transfers)
        rate = reads / n_steps
        ev = {"transfers_from_device": transfers, "local_scalar_reads": scalar_reads,
              "extra_executions": extra_exec, "steps": n_steps, "reads_per_step": round(rate, 2)}
        lines = _user_lines(host_events)
        if rate >= _t("host_reads_per_step"):
            findings.append(_finding(
                "host_sync", "warning",
                f"{reads} device->host reads in {n_steps} steps ({rate:.1f} per step"
                + (f", {scalar_reads} of them .item()/bool()/print of a 0-dim tensor" if scalar_reads else "")
                + f"), with {extra_exec} graph executions beyond one per step: each read stops tracing, runs "
                "the graph so far and waits for it.", ev, lines))
        elif reads:
            findings.append(_finding(
                "host_sync", "info",
                f"{reads} device->host read(s) in {n_steps} steps: occasional (e.g. logging every few steps); "
                "fine.", ev, lines))

    # recompilation -----------------------------------------------------------------------------------------
    if marks or steps:
        findings.extend(_recompilation(compiles, None if counters_unknown else hits, n_steps, per_step, log))

    elsewhere = sorted({w.split(":", 1)[0] for f in findings for w in f.where if _ELSEWHERE in w})
    if elsewhere:
        notes.append(f"{', '.join(elsewhere)}: a file of the script that wrote this log, on the machine that ran it "
                     "(not here); its lines are named as that script has them")
    if log is None:
        notes.append("no debug log: findings come from the counters alone and cannot name your source lines; "
                     "run with PT_XLA_DEBUG_LEVEL=2 (set before the first XLA computation) for causes and lines")
    return XlaDiagnosis(
        findings=sort_findings(findings),
        compiles=compiles,
        cache_hits=hits,
        executions=executions,
        steps=n_steps,
        transfers_from_device=transfers,
        fallback_ops=dict(fallbacks),
        compile_seconds=compile_seconds,
        per_step=tuple(per_step),
        notes=tuple(notes),
        profiler_lines=tuple(log.profiler) if log is not None else (),
    )
