"""Render distributed results: the run, a rank, a hang, the checks, an NCCL log and the step report.

Each has a text and an HTML renderer; findings go through ``render.findings``, the one findings renderer.
"""

from __future__ import annotations

import re
from typing import Any

from nbdebug.core._findings import Finding
from nbdebug.core.dist._blame import ranks_text
from nbdebug.core.dist._checks import ConsistencyReport, DataOrderReport, StepReport
from nbdebug.core.dist._nccl import NcclLog
from nbdebug.core.dist._postmortem import PostMortem
from nbdebug.core.dist._types import FAILURE_KINDS, DistRun, Hang, RankResult
from nbdebug.render._html import code_block, esc, fmt_seconds, kv_table, panel, table
from nbdebug.render._registry import renders
from nbdebug.render.diagnosis import diagnosis_html, diagnosis_text
from nbdebug.render.findings import findings_html, findings_text, panel_kind

__all__ = ["dist_run_text", "dist_run_html", "hang_text", "hang_html", "rank_text", "rank_html", "check_text",
           "check_html", "nccl_log_text", "nccl_log_html", "step_report_text", "step_report_html", "clip",
           "postmortem_text", "postmortem_html", "rank_groups", "readable_error", "rank_output"]


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


_THREAD = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-fA-F]+ .*\(most recent call first\):$")
_OWN_FRAME = re.compile(r'^\s+File "(?:[^"]*[/\\]nbdebug[/\\]core[/\\]dist[/\\][^"]*|[^"]*[/\\]threading\.py|<frozen runpy>)"')


def rank_output(r: RankResult) -> str:
    """A rank's output as the user wants to read it.

    A fatal-error stack dump loses nbdebug's own threads, the launcher's frames below the user's code and the list
    of extension modules (the main thread's stack is in the report already).
    """
    out: list[str] = []
    block: list[str] = []

    def flush() -> None:
        frames = [ln for ln in block[1:] if ln.strip()]
        if block and frames and all(_OWN_FRAME.match(ln) for ln in frames):
            block.clear()  # one of nbdebug's own threads in the rank
            return
        out.extend(ln for ln in block if not _OWN_FRAME.match(ln))
        block.clear()

    for line in (r.stdout.rstrip("\n") + "\n" + r.stderr).splitlines():
        if _THREAD.match(line):
            flush()
            block.append(line)
        elif block and (line.startswith("  File ") or not line.strip()):
            block.append(line)
        else:
            flush()
            if not line.startswith("Extension modules: "):
                out.append(line)
    flush()
    return "\n".join(out).strip("\n")


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
        body += f"<details><summary>output</summary>{code_block(rank_output(r))}</details>"
    if r.failed:
        title, kind = f"rank {r.rank}: {r.error_kind or 'failed'} — {clip(readable_error(_rank_error(r)), 100)}", "error"
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
    head = "OK" if d.succeeded else ("HANG" if hang_first else "FAILED")
    if d.succeeded and bad_checks:
        head = f"OK, but {bad_checks} check(s) found a problem"
    out = [f"nbdebug torchrun: {head} - {d.nprocs} ranks, {d.backend}, {d.seconds:.1f} s (port {d.port})"]
    if d.primary_rank is not None:
        out += ["", f"Primary failure: rank {d.primary_rank}", f"  {readable_error(d.primary_reason)}"]
        if p is not None and p.traceback:
            out += ["", f"Traceback of rank {p.rank}:", p.traceback.rstrip()]
    elif d.primary_reason:  # every error is a consequence: the verdict names no rank, but says so
        out += ["", "Primary failure: not found", f"  {readable_error(d.primary_reason)}"]
    if more := _more(d):
        out += ["", findings_text(more)]
    if d.diagnosis is not None:
        out += ["", f"Diagnosis of rank {d.primary_rank}'s error:", diagnosis_text(d.diagnosis)]
    if d.hang is not None:
        out += ["", hang_text(d.hang)]
    out += ["", "Ranks:"]
    for r in d.ranks:
        mark = " <- primary" if r.rank == d.primary_rank else ""
        out.append(f"  rank {r.rank}: exit {r.exitcode}{', ' + r.error_kind if r.error_kind else ''}"
                   f"{': ' + clip(readable_error(r.error), 160) if r.error else ''}{mark}")
    for c in d.checks:
        out.append(f"  {c.kind}: {'ok' if c.ok else 'PROBLEM'} - {c.summary}")
    for n in d.notes:
        out.append(f"  note: {n}")
    return "\n".join(out)


def _more(d: DistRun) -> tuple[Finding, ...]:
    """The findings beyond the run's failure, which the panel already states first (primary failure, hang)."""
    return tuple(f for f in d.findings if f.kind not in FAILURE_KINDS)


def _dist_run_title(d: DistRun) -> tuple[str, str]:
    bad_checks = [c for c in d.checks if not c.ok]
    if d.succeeded and bad_checks:
        return (f"torchrun: {d.nprocs} ranks ran, {len(bad_checks)} check(s) found a problem: "
                f"{bad_checks[0].kind}"), panel_kind(d.findings, empty="warning")
    if d.succeeded:
        return f"torchrun: {d.nprocs} ranks OK ({d.seconds:.1f} s)", panel_kind(d.findings)
    p = d.primary
    if d.hang is not None and (p is None or p.error_kind != "cause"):
        return f"torchrun: {_hang_title(d.hang)}", "error"
    if p is None:
        seen = "only consequences were seen" if d.primary_reason else "no rank reported an error"
        return f"torchrun: FAILED — {d.nprocs} ranks, {seen}", "error"
    return f"torchrun: FAILED — rank {p.rank}: {clip(readable_error(_rank_error(p)), 120)}", "error"


@renders(DistRun, "html")
def dist_run_html(d: DistRun) -> str:
    """A panel: verdict and primary failure open, per-rank table, hang details and output one click away."""
    parts = []
    p = d.primary
    if d.primary_rank is not None:
        parts.append(f'<div class="nbd-first"><b>Primary failure: rank {esc(d.primary_rank)}</b> — '
                     f"{esc(readable_error(d.primary_reason))}</div>")
        if p is not None and p.traceback:
            parts.append(code_block(p.traceback))
    elif d.primary_reason:
        parts.append(f'<div class="nbd-first"><b>Primary failure: not found</b> — {esc(readable_error(d.primary_reason))}</div>')
    if more := _more(d):
        parts.append(findings_html(more))
    if d.diagnosis is not None:
        parts.append(diagnosis_html(d.diagnosis))
    if d.hang is not None:
        parts.append(_hang_body(d.hang))
    rows = [(r.rank, r.pid, r.exitcode, r.error_kind or "ok", clip(readable_error(r.error), 200),
             "primary" if r.rank == d.primary_rank else "") for r in d.ranks]
    parts.append("<h4>Ranks</h4>" + table(["rank", "pid", "exit", "kind", "error", ""], rows, numeric=(0, 1, 2)))
    if d.checks:
        parts.append("<h4>Checks</h4>" + table(["check", "result", "summary"],
                                               [(c.kind, "ok" if c.ok else "PROBLEM", c.summary) for c in d.checks]))
    if d.notes:
        parts.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in d.notes) + "</ul>")
    parts.append("".join(
        f"<details><summary>rank {r.rank} output</summary>{code_block(rank_output(r))}</details>"
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
    return panel(f"{c.kind}: {'OK' if c.ok else 'PROBLEM'}", body, kind=panel_kind(c.findings))


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
    out += ["", findings_text(log.findings, empty="no known failure pattern found")]
    return "\n".join(out)


@renders(NcclLog, "html")
def nccl_log_html(log: NcclLog) -> str:
    """An NCCL log summary panel."""
    facts = [("version", log.version or "?"), ("ranks seen", len(log.ranks)),
             ("interfaces", ", ".join(log.interfaces) or "-"), ("transports", ", ".join(log.transports) or "-")]
    body = kv_table(facts) + findings_html(log.findings, empty="no known failure pattern found")
    return panel(f"NCCL log: {len(log.findings)} finding(s)", body, kind=panel_kind(log.findings))


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
                 kind=panel_kind(s.findings))


# -- post-mortem ---------------------------------------------------------------------------------------------------

_NUMBERS = re.compile(r"\[[0-9.:]{1,60}\]:[0-9]{1,6}|0x[0-9a-fA-F]{1,16}|[0-9]{2,}")
# where torch was built, in front of a native error ("[/__w/pytorch/pytorch/third_party/gloo/.../unbound_buffer.cc:78]
# Timed out waiting ..."): a path on torch's build machine that says nothing to the user and, cut to fit a table,
# left no room for the words after it
_BUILD_PATH = re.compile(r"\[(?:enforce fail at )?(?:[A-Za-z]:)?[/\\][^\]\s]{0,300}?[/\\][\w.+-]{1,80}\.(?:cc|cpp|cxx|c|h|hpp|cu|cuh):[0-9]{1,7}\]\s?")


def readable_error(text: str) -> str:
    """A rank's error with torch's build paths taken out, so the words of the error come first."""
    return _BUILD_PATH.sub("", text)


def rank_groups(pm: PostMortem, limit: int = 40) -> list[tuple[str, tuple[int, ...], str, str]]:
    """Ranks grouped by (state, error with numbers blanked): ``(state, ranks, error, where)``, worst first.

    Thousands of ranks that failed the same way make one row; ports, addresses and counts do not split groups.
    """
    order = {s: i for i, s in enumerate(pm.by_state())}
    groups: dict[tuple[str, str], list[int]] = {}
    sample: dict[tuple[str, str], tuple[str, str]] = {}
    for r in pm.ranks:
        error = clip(readable_error(r.error), 160)
        key = (r.state, _NUMBERS.sub("N", error))
        groups.setdefault(key, []).append(r.rank)
        sample.setdefault(key, (error, r.where))
    rows = sorted(groups.items(), key=lambda kv: (order.get(kv[0][0], 99), -len(kv[1])))
    out = [(state, tuple(ranks), *sample[(state, sig)]) for (state, sig), ranks in rows]
    if len(out) > limit:  # past the limit, one row per state
        rest: dict[str, list[int]] = {}
        for state, ranks, _, _ in out[limit - 1:]:
            rest.setdefault(state, []).extend(ranks)
        out = out[:limit - 1] + [(state, tuple(sorted(rs)), "(various errors)", "") for state, rs in rest.items()]
    return out


def _by_place(where: dict[int, str] | Any) -> list[tuple[str, tuple[int, ...]]]:
    """Ranks that were at the same place, together: ``[(place, ranks)]``, most ranks first."""
    groups: dict[str, list[int]] = {}
    for r, w in where.items():
        if w:
            groups.setdefault(w, []).append(r)
    return sorted(((w, tuple(sorted(rs))) for w, rs in groups.items()), key=lambda x: (-len(x[1]), x[1]))


def _pm_headline(pm: PostMortem) -> tuple[str, str]:
    d = pm.divergence
    if d is not None and pm.primary_rank in d.missing and pm.diagnosis is None and not pm.mismatches:
        return (f"post-mortem: {pm.world_size} ranks — hang at collective #{d.seq}: rank(s) "
                f"{ranks_text(d.missing, 40)} never arrived"), "error"
    if pm.primary_rank is not None:
        return f"post-mortem: {pm.world_size} ranks — primary failure on rank {pm.primary_rank}", "error"
    if pm.divergence is not None:
        return f"post-mortem: {pm.world_size} ranks — hang at collective #{pm.divergence.seq}", "error"
    if pm.mismatches:
        return f"post-mortem: {pm.world_size} ranks — mismatched collective #{pm.mismatches[0].seq}", "error"
    if pm.finding("postmortem_no_cause") is not None:
        return f"post-mortem: {pm.world_size} ranks — failed; the first cause left no error here", "error"
    if not pm.ok:  # e.g. a bad node whose ranks did not fail (yet)
        return f"post-mortem: {pm.world_size} ranks — {(pm.errors() or list(pm.findings))[0].title.lower()}", panel_kind(pm.findings)
    return f"post-mortem: {pm.world_size} ranks — no failure found in the artifacts", panel_kind(pm.findings)


@renders(PostMortem, "text")
def postmortem_text(pm: PostMortem) -> str:
    """The full plain-text post-mortem: verdict, primary failure, hang, mismatches, nodes, ranks grouped, gaps."""
    title, _ = _pm_headline(pm)
    out = [title, "  read: " + ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in sorted(pm.files.items()))]
    if pm.primary_reason:
        out += ["", f"Primary failure: {readable_error(pm.primary_reason)}"]
    if pm.consequences:
        out.append(f"  as a consequence: rank(s) {ranks_text(pm.consequences)}")
    if pm.diagnosis is not None:
        out += ["", f"Diagnosis of rank {pm.primary_rank}'s error:", diagnosis_text(pm.diagnosis)]
    d = pm.divergence
    if d is not None:
        word = "Hang" if pm.diagnosis is None else "Ranks diverged"
        out += ["", f"{word}: collective #{d.seq} ({d.op or '?'}, process group {d.process_group})",
                f"  entered by rank(s) {ranks_text(d.entered)}" + (f" at {d.entered_where}" if d.entered_where else ""),
                f"  never by rank(s) {ranks_text(d.missing)}"]
        for w, ranks in _by_place(d.missing_where)[:8]:
            out.append(f"    rank(s) {ranks_text(ranks, 60)}: {w}")
    for m in pm.mismatches[:5]:
        sides = "; ".join(f"{v} on rank(s) {ranks_text(rs, 60)}" for v, rs in m.groups.items())
        out.append(f"\nMismatch at collective #{m.seq} ({m.field}): {sides}"
                   + (f" -> odd one(s): {ranks_text(m.culprits, 60)}" if m.culprits else " (a tie: no majority)"))
    bad = [h for h in pm.hosts if h.bad]
    if bad:
        out += [""] + [f"Bad node: {h.host} (rank(s) {ranks_text(h.ranks, 60)}): {h.reason}" for h in bad]
    if pm.hosts:
        out.append(f"\nHosts: {len(pm.hosts)}" + (f", {len(bad)} bad" if bad else ""))
    out += ["", "Ranks by state:"]
    for state, ranks, error, where in rank_groups(pm):
        out.append(f"  {state:<14} {len(ranks):>6}  rank(s) {ranks_text(ranks, 80)}"
                   + (f"  {error}" if error else "") + (f"  [{where}]" if where else ""))
    if pm.findings:
        out += ["", findings_text(pm.findings)]
    if pm.next_time:
        out += ["", "Set next time:"] + [f"  {k}={v}  # {why}" for k, v, why in pm.next_time]
    if pm.notes:
        out += ["", f"Skipped {len(pm.notes)} file(s):"] + [f"  {n}" for n in pm.notes[:10]]
    return "\n".join(out)


@renders(PostMortem, "html")
def postmortem_html(pm: PostMortem) -> str:
    """A panel: verdict and primary failure open; ranks grouped by state (one row per group, never per rank)."""
    title, kind = _pm_headline(pm)
    parts = []
    if pm.primary_reason:
        parts.append(f'<div class="nbd-first"><b>Primary failure</b> — {esc(readable_error(pm.primary_reason))}</div>')
    if pm.consequences:
        parts.append(f"<p>As a consequence: rank(s) {esc(ranks_text(pm.consequences))}</p>")
    if pm.diagnosis is not None:
        parts.append(diagnosis_html(pm.diagnosis))
    d = pm.divergence
    if d is not None:
        rows = [("collective", f"#{d.seq} {d.op} (process group {d.process_group})"),
                ("entered by", ranks_text(d.entered)), ("never by", ranks_text(d.missing))]
        if d.entered_where:
            rows.append(("waiting at", d.entered_where))
        parts.append("<h4>Hang</h4>" + kv_table(rows))
        for r, stack in list(d.missing_stack.items())[:4]:
            parts.append(f"<details><summary>stack of rank {esc(r)} (never arrived)</summary>"
                         f"{code_block(stack[-6000:])}</details>")
    if pm.mismatches:
        parts.append("<h4>Mismatched collectives</h4>" + table(
            ["seq", "what", "values (ranks)", "odd one(s)"],
            [(m.seq, m.field, "; ".join(f"{v}: {ranks_text(rs, 40)}" for v, rs in m.groups.items()),
              ranks_text(m.culprits, 40) if m.culprits else "tie") for m in pm.mismatches[:10]], numeric=(0,)))
    groups = rank_groups(pm)
    parts.append("<h4>Ranks by state</h4>" + table(
        ["state", "ranks", "which", "error", "where"],
        [(state, len(ranks), ranks_text(ranks, 80), error, where) for state, ranks, error, where in groups],
        numeric=(1,)))
    if pm.hosts:
        shown = [h for h in pm.hosts if h.bad] or list(pm.hosts[:10])
        parts.append(f"<h4>Hosts ({len(pm.hosts)})</h4>" + table(
            ["host", "ranks", "states", "bad node"],
            [(h.host, ranks_text(h.ranks, 40), ", ".join(f"{k} {v}" for k, v in h.states.items()),
              h.reason if h.bad else "") for h in shown]))
    if pm.findings:
        parts.append(findings_html(pm.findings))
    if pm.next_time:
        parts.append("<h4>Set next time</h4>" + table(["variable", "value", "why"], pm.next_time))
    info = [("artifacts read", ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in sorted(pm.files.items()))),
            ("ranks", pm.world_size)]
    if pm.notes:
        info.append(("files skipped", f"{len(pm.notes)} (first: {pm.notes[0]})"))
    parts.append(kv_table(info))
    return panel(title, "".join(parts), kind=kind)
