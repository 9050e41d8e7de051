"""Render distributed results: ``DistRun`` (text and HTML panel), ``Hang``, ``RankResult`` and the checks."""

from __future__ import annotations

from typing import Any

from nbdebug.core.dist._checks import ConsistencyReport, DataOrderReport, StepReport
from nbdebug.core.dist._nccl import NcclLog
from nbdebug.core.dist._types import DistRun, Hang, RankResult
from nbdebug.render._html import code_block, esc, fmt_seconds, kv_table, panel, table
from nbdebug.render._registry import renders

__all__ = ["dist_run_text", "dist_run_html", "hang_text", "rank_text", "check_text", "check_html",
           "nccl_log_text", "nccl_log_html", "step_report_text", "step_report_html"]


@renders(RankResult, "text")
def rank_text(r: Any) -> str:
    """One rank: status, error and traceback."""
    out = [f"rank {r.rank} (pid {r.pid}): exit code {r.exitcode}" + (f", {r.error_kind}" if r.error_kind else "")]
    if r.error:
        out.append(f"  error: {r.error}")
    if r.error_meaning:
        out.append(f"  meaning: {r.error_meaning}")
    if r.traceback:
        out += ["", r.traceback.rstrip()]
    return "\n".join(out)


@renders(Hang, "text")
def hang_text(h: Any) -> str:
    """The watchdog's findings."""
    out = [f"HANG: no rank made progress for {h.after_seconds:g} s", "", h.explanation, ""]
    if h.collective:
        out.append(f"  waiting in {h.collective} at {h.location}: ranks {list(h.waiting_ranks)}")
    for r in h.missing_ranks:
        out.append(f"  rank {r} never reached it: {h.missing_where.get(r, '?')}")
    out += ["", f"Ranks grouped by stack (taken with {h.method or '?'}):"]
    for g in h.groups:
        out.append(f"  ranks {list(g.ranks)}: {g.collective + ' at ' if g.collective else ''}{g.location}")
        if g.code:
            out.append(f"      {g.code}")
    if h.flight_recorder:
        out += ["", "Flight Recorder (last collectives per rank):"]
        for r, entries in h.flight_recorder.items():
            seq = ", ".join(f"#{e.get('seq')} {e.get('op')}" for e in entries) or "(none)"
            out.append(f"  rank {r}: {seq}")
    return "\n".join(out)


@renders(DistRun, "text")
def dist_run_text(d: Any) -> str:
    """The full plain-text report of a run."""
    p = d.primary
    hang_first = d.hang is not None and (p is None or p.error_kind != "cause")
    bad_checks = sum(1 for c in d.checks if not c.ok)
    head = "OK" if d.ok else ("HANG" if hang_first else "FAILED")
    if d.ok and bad_checks:
        head = f"OK, but {bad_checks} check(s) found a problem"
    out = [f"nbdebug torchrun: {head} - {d.nprocs} ranks, {d.backend}, {d.seconds:.1f} s (port {d.port})"]
    if d.primary_rank is not None:
        out += ["", f"Primary failure: rank {d.primary_rank}", f"  {d.primary_reason}"]
        p = d.primary
        if p is not None and p.traceback:
            out += ["", f"Traceback of rank {p.rank}:", p.traceback.rstrip()]
    if d.hang is not None:
        out += ["", hang_text(d.hang)]
    out += ["", "Ranks:"]
    for r in d.ranks:
        mark = " <- primary" if r.rank == d.primary_rank else ""
        out.append(f"  rank {r.rank}: exit {r.exitcode}{', ' + r.error_kind if r.error_kind else ''}"
                   f"{': ' + r.error[:160] if r.error else ''}{mark}")
    for c in d.checks:
        out.append(f"  {c.kind}: {'ok' if c.ok else 'PROBLEM'} - {c.summary}")
    for n in d.notes:
        out.append(f"  note: {n}")
    return "\n".join(out)


def _hang_html(h: Any) -> str:
    parts = [f"<div>{esc(h.explanation)}</div>"]
    rows = [(", ".join(map(str, g.ranks)), g.collective or "-", g.location, g.code) for g in h.groups]
    parts.append(f"<h4>Ranks grouped by stack ({esc(h.method)})</h4>"
                 + table(["ranks", "collective", "where", "code"], rows))
    if h.flight_recorder:
        fr_rows = [(r, ", ".join(f"#{e.get('seq')} {e.get('op')} {e.get('sizes')}" for e in entries))
                   for r, entries in h.flight_recorder.items()]
        parts.append("<h4>Flight Recorder (last collectives)</h4>" + table(["rank", "entries"], fr_rows))
    stacks = "".join(
        f"<details><summary>rank {esc(r)} stack</summary>{code_block(s)}</details>" for r, s in h.stacks.items()
    )
    parts.append(stacks)
    return "".join(parts)


@renders(DistRun, "html")
def dist_run_html(d: Any) -> str:
    """A panel: verdict and primary failure open, per-rank table, hang details and output one click away."""
    parts = []
    if d.primary_rank is not None:
        parts.append(f'<div class="nbd-first"><b>Primary failure: rank {esc(d.primary_rank)}</b> — '
                     f"{esc(d.primary_reason)}</div>")
        p = d.primary
        if p is not None and p.traceback:
            parts.append(code_block(p.traceback))
    if d.hang is not None:
        parts.append(_hang_html(d.hang))
    rows = [(r.rank, r.pid, r.exitcode, r.error_kind or "ok", r.error[:200],
             "primary" if r.rank == d.primary_rank else "") for r in d.ranks]
    parts.append("<h4>Ranks</h4>" + table(["rank", "pid", "exit", "kind", "error", ""], rows, numeric=(0, 1, 2)))
    if d.checks:
        parts.append("<h4>Checks</h4>" + table(["check", "result", "summary"],
                                               [(c.kind, "ok" if c.ok else "PROBLEM", c.summary) for c in d.checks]))
    if d.notes:
        parts.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in d.notes) + "</ul>")
    outputs = "".join(
        f"<details><summary>rank {r.rank} output</summary>{code_block(r.stdout + chr(10) + r.stderr)}</details>"
        for r in d.ranks
    )
    parts.append(outputs)
    parts.append(kv_table([("backend", d.backend), ("wall time", fmt_seconds(d.seconds)), ("port", d.port)]))
    bad_checks = [c for c in d.checks if not c.ok]
    if d.ok and bad_checks:
        title, kind = f"torchrun: {d.nprocs} ranks ran, {len(bad_checks)} check(s) found a problem: {bad_checks[0].kind}", "warning"
    elif d.ok:
        title, kind = f"torchrun: {d.nprocs} ranks OK ({d.seconds:.1f} s)", "ok"
    elif d.hang is not None and (d.primary is None or d.primary.error_kind != "cause"):
        title, kind = (f"torchrun: HANG in {d.hang.collective or 'user code'} — rank(s) "
                       f"{list(d.hang.missing_ranks)} never reached it"), "error"
    else:
        p = d.primary
        title, kind = f"torchrun: FAILED — rank {d.primary_rank}: {p.error[:120] if p else '?'}", "error"
    return panel(title, "".join(parts), kind=kind)


@renders(ConsistencyReport, "text")
@renders(DataOrderReport, "text")
def check_text(c: Any) -> str:
    """A cross-rank check result."""
    out = [f"{c.kind}: {'OK' if c.ok else 'PROBLEM'} - {c.summary}"]
    if c.details:
        out += ["", c.details]
    return "\n".join(out)


@renders(ConsistencyReport, "html")
@renders(DataOrderReport, "html")
def check_html(c: Any) -> str:
    """A cross-rank check as a panel."""
    body = f"<div>{esc(c.summary)}</div>" + (code_block(c.details) if c.details else "")
    return panel(f"{c.kind}: {'OK' if c.ok else 'PROBLEM'}", body, kind="ok" if c.ok else "warning")


@renders(NcclLog, "text")
def nccl_log_text(log: Any) -> str:
    """What an NCCL_DEBUG=INFO log says."""
    out = [f"NCCL log: version {log.version or '?'}, {len(log.ranks)} rank(s) seen"]
    if log.interfaces:
        out.append(f"  socket interfaces: {', '.join(log.interfaces)}")
    if log.transports:
        out.append(f"  transports: {', '.join(log.transports)}")
    if log.cuda_driver:
        out.append(f"  CUDA driver: {log.cuda_driver}")
    for p in log.problems:
        out += ["", f"PROBLEM [{p.name}] {p.title}", f"  line: {p.line}", f"  fix: {p.fix}"]
    if not log.problems:
        out.append("  no known failure pattern found")
    return "\n".join(out)


@renders(NcclLog, "html")
def nccl_log_html(log: Any) -> str:
    """An NCCL log summary panel."""
    facts = [("version", log.version or "?"), ("ranks seen", len(log.ranks)),
             ("interfaces", ", ".join(log.interfaces) or "-"), ("transports", ", ".join(log.transports) or "-")]
    body = kv_table(facts)
    if log.problems:
        body += table(["problem", "meaning", "fix", "line"], [(p.name, p.title, p.fix, p.line) for p in log.problems])
    kind = "error" if log.problems else "ok"
    return panel(f"NCCL log: {len(log.problems)} problem(s)", body, kind=kind)


@renders(StepReport, "text")
def step_report_text(s: Any) -> str:
    """Straggler and loss-dispersion report."""
    out = [f"Steps: {s.steps} per rank; slowest rank {s.slowest_rank} is {s.slowdown:.2f}x the median rank"]
    for r in s.per_rank:
        out.append(f"  rank {r['rank']}: median step {fmt_seconds(r['median_s'])}, last loss {r['last_loss']}")
    out.append(f"  loss spread across ranks (last common step): {s.loss_spread:.4g} (relative {s.loss_rel_spread:.2%})")
    out += [f"  - {f}" for f in s.findings] or ["  no straggler, losses agree"]
    return "\n".join(out)


@renders(StepReport, "html")
def step_report_html(s: Any) -> str:
    """Straggler report panel."""
    rows = [(r["rank"], fmt_seconds(r["median_s"]), r["last_loss"]) for r in s.per_rank]
    body = table(["rank", "median step", "last loss"], rows, numeric=(0,))
    body += "<ul>" + "".join(f"<li>{esc(f)}</li>" for f in s.findings) + "</ul>" if s.findings else ""
    return panel(f"Steps: slowest rank {s.slowest_rank} at {s.slowdown:.2f}x median", body,
                 kind="warning" if s.findings else "ok")
