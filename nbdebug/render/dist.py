"""Render distributed results: the run, a rank, a hang, the checks, an NCCL log and the step report.

Each has a text and an HTML renderer; findings go through ``render.findings``, the one findings renderer.
"""

from __future__ import annotations

from nbdebug.core.dist._checks import ConsistencyReport, DataOrderReport, StepReport
from nbdebug.core.dist._nccl import NcclLog
from nbdebug.core.dist._types import DistRun, Hang, RankResult
from nbdebug.render._html import code_block, esc, fmt_seconds, kv_table, panel, table
from nbdebug.render._registry import renders
from nbdebug.render.diagnosis import diagnosis_html, diagnosis_text
from nbdebug.render.findings import findings_html, findings_text

__all__ = ["dist_run_text", "dist_run_html", "hang_text", "hang_html", "rank_text", "rank_html", "check_text",
           "check_html", "nccl_log_text", "nccl_log_html", "step_report_text", "step_report_html", "clip"]


def clip(text: str, limit: int) -> str:
    """The first line of ``text``, cut at a word boundary before ``limit`` characters, with an ellipsis if cut."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if len(line) <= limit:
        return line
    cut = line[:limit]
    # cut where a word ends: at a space, or after punctuation that closes a part ("Foo(a=1, b=2)" -> "Foo(a=1,")
    at = max(cut.rfind(" "), *(cut.rfind(ch) + 1 for ch in ",;:)]"))
    if at < limit // 2:  # one very long word (a path): cut it, it is still clearly marked as cut
        at = limit
    return cut[:at].rstrip(" ,;:") + " …"


def _rank_error(r: RankResult) -> str:
    """What went wrong on a rank, never empty for a failed rank."""
    if r.error.strip():
        return r.error.strip()
    if r.exitcode not in (0, None):
        return f"exit code {r.exitcode}"
    return "no error message"


@renders(RankResult, "text")
def rank_text(r: RankResult) -> str:
    """One rank: status, error and traceback."""
    out = [f"rank {r.rank} (pid {r.pid}): exit code {r.exitcode}" + (f", {r.error_kind}" if r.error_kind else "")]
    if r.error:
        out.append(f"  error: {r.error}")
    if r.error_meaning:
        out.append(f"  meaning: {r.error_meaning}")
    if r.traceback:
        out += ["", r.traceback.rstrip()]
    return "\n".join(out)


@renders(RankResult, "html")
def rank_html(r: RankResult) -> str:
    """One rank as a panel: status and meaning open, traceback and output one click away."""
    facts: list[tuple[object, object]] = [("pid", r.pid), ("exit code", r.exitcode)]
    if r.error_kind:
        facts.append(("failure", r.error_kind))
    if r.error_meaning:
        facts.append(("meaning", r.error_meaning))
    body = ""
    if r.error:
        body += f'<div class="nbd-first">{esc(r.error)}</div>'
    body += kv_table(facts)
    if r.traceback:
        body += code_block(r.traceback)
    if r.stdout or r.stderr:
        body += f"<details><summary>output</summary>{code_block(r.stdout + chr(10) + r.stderr)}</details>"
    if r.failed:
        title, kind = f"rank {r.rank}: {r.error_kind or 'failed'} — {clip(_rank_error(r), 100)}", "error"
    else:
        title, kind = f"rank {r.rank}: ok", "ok"
    return panel(title, body, kind=kind)


@renders(Hang, "text")
def hang_text(h: Hang) -> str:
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


def _hang_body(h: Hang) -> str:
    parts = [f'<div class="nbd-first">{esc(h.explanation)}</div>']
    if h.missing_ranks:
        parts.append(table(["rank", "never reached it: where it was instead"],
                           [(r, h.missing_where.get(r, "?")) for r in h.missing_ranks], numeric=(0,)))
    rows = [(", ".join(map(str, g.ranks)), g.collective or "-", g.location, g.code) for g in h.groups]
    parts.append(f"<h4>Ranks grouped by stack ({esc(h.method or '?')})</h4>"
                 + table(["ranks", "collective", "where", "code"], rows))
    if h.flight_recorder:
        fr_rows = [(r, ", ".join(f"#{e.get('seq')} {e.get('op')} {e.get('sizes')}" for e in entries) or "(none)")
                   for r, entries in h.flight_recorder.items()]
        parts.append("<h4>Flight Recorder (last collectives)</h4>" + table(["rank", "entries"], fr_rows))
    parts.append("".join(
        f"<details><summary>rank {esc(r)} stack</summary>{code_block(s)}</details>" for r, s in h.stacks.items()
    ))
    return "".join(parts)


def _hang_title(h: Hang) -> str:
    where = h.collective or "user code"
    if h.missing_ranks:
        return f"HANG in {where} — rank(s) {list(h.missing_ranks)} never reached it"
    return f"HANG in {where} after {h.after_seconds:g} s without progress"


@renders(Hang, "html")
def hang_html(h: Hang) -> str:
    """The watchdog's findings as a panel: the explanation and the missing ranks open, stacks one click away."""
    return panel(_hang_title(h), _hang_body(h), kind="error")


@renders(DistRun, "text")
def dist_run_text(d: DistRun) -> str:
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
        if p is not None and p.traceback:
            out += ["", f"Traceback of rank {p.rank}:", p.traceback.rstrip()]
    if d.findings:
        out += ["", findings_text(d.findings)]
    if d.diagnosis is not None:
        out += ["", f"Diagnosis of rank {d.primary_rank}'s error:", diagnosis_text(d.diagnosis)]
    if d.hang is not None:
        out += ["", hang_text(d.hang)]
    out += ["", "Ranks:"]
    for r in d.ranks:
        mark = " <- primary" if r.rank == d.primary_rank else ""
        out.append(f"  rank {r.rank}: exit {r.exitcode}{', ' + r.error_kind if r.error_kind else ''}"
                   f"{': ' + clip(r.error, 160) if r.error else ''}{mark}")
    for c in d.checks:
        out.append(f"  {c.kind}: {'ok' if c.ok else 'PROBLEM'} - {c.summary}")
    for n in d.notes:
        out.append(f"  note: {n}")
    return "\n".join(out)


def _dist_run_title(d: DistRun) -> tuple[str, str]:
    bad_checks = [c for c in d.checks if not c.ok]
    if d.ok and bad_checks:
        return (f"torchrun: {d.nprocs} ranks ran, {len(bad_checks)} check(s) found a problem: "
                f"{bad_checks[0].kind}"), "warning"
    if d.ok:
        return f"torchrun: {d.nprocs} ranks OK ({d.seconds:.1f} s)", "ok"
    p = d.primary
    if d.hang is not None and (p is None or p.error_kind != "cause"):
        return f"torchrun: {_hang_title(d.hang)}", "error"
    if p is None:
        return f"torchrun: FAILED — {d.nprocs} ranks, no rank reported an error", "error"
    return f"torchrun: FAILED — rank {p.rank}: {clip(_rank_error(p), 120)}", "error"


@renders(DistRun, "html")
def dist_run_html(d: DistRun) -> str:
    """A panel: verdict and primary failure open, per-rank table, hang details and output one click away."""
    parts = []
    p = d.primary
    if d.primary_rank is not None:
        parts.append(f'<div class="nbd-first"><b>Primary failure: rank {esc(d.primary_rank)}</b> — '
                     f"{esc(d.primary_reason)}</div>")
        if p is not None and p.traceback:
            parts.append(code_block(p.traceback))
    if d.findings:
        parts.append(findings_html(d.findings))
    if d.diagnosis is not None:
        parts.append(diagnosis_html(d.diagnosis))
    if d.hang is not None:
        parts.append(_hang_body(d.hang))
    rows = [(r.rank, r.pid, r.exitcode, r.error_kind or "ok", clip(r.error, 200),
             "primary" if r.rank == d.primary_rank else "") for r in d.ranks]
    parts.append("<h4>Ranks</h4>" + table(["rank", "pid", "exit", "kind", "error", ""], rows, numeric=(0, 1, 2)))
    if d.checks:
        parts.append("<h4>Checks</h4>" + table(["check", "result", "summary"],
                                               [(c.kind, "ok" if c.ok else "PROBLEM", c.summary) for c in d.checks]))
    if d.notes:
        parts.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in d.notes) + "</ul>")
    parts.append("".join(
        f"<details><summary>rank {r.rank} output</summary>{code_block(r.stdout + chr(10) + r.stderr)}</details>"
        for r in d.ranks
    ))
    parts.append(kv_table([("backend", d.backend), ("wall time", fmt_seconds(d.seconds)), ("port", d.port)]))
    title, kind = _dist_run_title(d)
    return panel(title, "".join(parts), kind=kind)


@renders(ConsistencyReport, "text")
@renders(DataOrderReport, "text")
def check_text(c: ConsistencyReport | DataOrderReport) -> str:
    """A cross-rank check result."""
    if c.findings:
        return f"{c.kind}: PROBLEM\n\n{findings_text(c.findings)}"
    out = [f"{c.kind}: {'OK' if c.ok else 'PROBLEM'} - {c.summary}"]
    if c.details:
        out += ["", c.details]
    return "\n".join(out)


@renders(ConsistencyReport, "html")
@renders(DataOrderReport, "html")
def check_html(c: ConsistencyReport | DataOrderReport) -> str:
    """A cross-rank check as a panel."""
    if c.findings:  # the details are the findings' evidence
        body = findings_html(c.findings)
    else:
        body = f"<div>{esc(c.summary)}</div>" + (code_block(c.details) if c.details else "")
    return panel(f"{c.kind}: {'OK' if c.ok else 'PROBLEM'}", body, kind="ok" if c.ok else "warning")


@renders(NcclLog, "text")
def nccl_log_text(log: NcclLog) -> str:
    """What an NCCL_DEBUG=INFO log says."""
    out = [f"NCCL log: version {log.version or '?'}, {len(log.ranks)} rank(s) seen"]
    if log.interfaces:
        out.append(f"  socket interfaces: {', '.join(log.interfaces)}")
    if log.transports:
        out.append(f"  transports: {', '.join(log.transports)}")
    if log.cuda_driver:
        out.append(f"  CUDA driver: {log.cuda_driver}")
    out += ["", findings_text(log.problems, empty="no known failure pattern found")]
    return "\n".join(out)


@renders(NcclLog, "html")
def nccl_log_html(log: NcclLog) -> str:
    """An NCCL log summary panel."""
    facts = [("version", log.version or "?"), ("ranks seen", len(log.ranks)),
             ("interfaces", ", ".join(log.interfaces) or "-"), ("transports", ", ".join(log.transports) or "-")]
    body = kv_table(facts) + findings_html(log.problems, empty="no known failure pattern found")
    kind = "ok" if log.ok else "error"
    if log.ok and any(p.severity.value == "warning" for p in log.problems):
        kind = "warning"
    return panel(f"NCCL log: {len(log.problems)} problem(s)", body, kind=kind)


@renders(StepReport, "text")
def step_report_text(s: StepReport) -> str:
    """Straggler and loss-dispersion report."""
    out = [f"Steps: {s.steps} per rank; slowest rank {s.slowest_rank} is {s.slowdown:.2f}x the median rank"]
    for r in s.per_rank:
        out.append(f"  rank {r['rank']}: median step {fmt_seconds(r['median_s'])}, last loss {r['last_loss']}")
    out.append(f"  loss spread across ranks (last common step): {s.loss_spread:.4g} (relative {s.loss_rel_spread:.2%})")
    out += ["", findings_text(s.findings, empty="no straggler, losses agree")]
    return "\n".join(out)


@renders(StepReport, "html")
def step_report_html(s: StepReport) -> str:
    """Straggler report panel."""
    rows = [(r["rank"], fmt_seconds(r["median_s"]), r["last_loss"]) for r in s.per_rank]
    body = table(["rank", "median step", "last loss"], rows, numeric=(0,))
    body += findings_html(s.findings, empty="no straggler, losses agree")
    return panel(f"Steps: slowest rank {s.slowest_rank} at {s.slowdown:.2f}x median", body,
                 kind="warning" if s.findings else "ok")
