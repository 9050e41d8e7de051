"""The verdict of a local run: what each rank's end means, which rank failed first and why (``_blame``, the rule
order the post-mortem uses too), the failed checks and the names not shipped, as one ``DistRun``."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Sequence

from nbdebug._files import read_text
from nbdebug.core._findings import Finding, Fix, sort_findings
from nbdebug.core.dist._blame import RankRow, Stall, blame, own_failures, ranks_text, read_error
from nbdebug.core.dist._checks import check_finding
from nbdebug.core.dist._failures import classify, signal_name
from nbdebug.core.dist._supervise import Rank, Session
from nbdebug.core.dist._types import NAMES_THE_FAILURE, CheckRecord, DistRun, Hang, RankResult
from nbdebug.core.explain import Diagnosis, explain
from nbdebug.core.knowledge import finding
from nbdebug.errors import NbdebugError

__all__ = ["session_result", "pick_primary", "rank_rows"]

#: the most of a rank's error file read: its message and traceback (a deep recursion's is a few MiB at most)
_ERROR_FILE_CAP = 16 << 20


def session_result(self: Session, store_port: int) -> DistRun:
    """The ``DistRun`` of a finished session: each rank's end, the verdict, the checks, the steps."""
    results: list[RankResult] = []
    for r in self.ranks:
        results.append(_rank_result(self, r))
    primary, reason = pick_primary(results, self.hang)
    succeeded = all(x.exitcode == 0 for x in results) and self.hang is None and not self.interrupted
    checks = []
    seen = set()
    for r in self.ranks:
        for c in r.checks:
            key = (c.get("kind"), c.get("summary"))
            if key in seen:
                continue
            seen.add(key)
            checks.append(CheckRecord(kind=str(c.get("kind")), ok=bool(c.get("ok")),
                                      summary=str(c.get("summary", "")), details=str(c.get("details", "")),
                                      result=str(c.get("result", ""))))
    steps = tuple(
        {"rank": r.rank, "step": s.get("step"), "seconds": s.get("seconds"), "loss": s.get("loss"),
         "arrivals": tuple(tuple(a) for a in s.get("arrivals") or ())}
        for r in self.ranks for s in r.steps
    )
    findings = _name_errors(results) if self.spec.get("mode") == "cell" else []
    for check in checks:
        f = None if check.ok else check_finding(check.result, check.summary, check.details)
        if f is not None:
            findings.append(f)
    return DistRun(
        succeeded=succeeded, nprocs=self.nprocs, backend=str(self.spec["backend"]), ranks=tuple(results),
        primary_rank=primary, primary_reason=reason, hang=self.hang, seconds=time.time() - self.t0,
        port=store_port, notes=tuple(self.notes), checks=tuple(checks), steps=steps, run_dir=self.run_dir,
        findings=sort_findings(findings),
        # a finding that names the failure itself (a name not shipped to the ranks) says more than the explainer's
        # answer for any Python error in the user's file, which would point at the line rather than the launch
        diagnosis=None if primary is None or any(f.kind in NAMES_THE_FAILURE for f in findings)
        else _diagnose(results[primary]),
    )


def _rank_result(self: Session, r: Rank) -> RankResult:
    error_file = os.path.join(self.run_dir, f"rank_{r.rank}", "error.json")
    file_msg, file_tb, file_ts = "", "", None
    try:  # written by torch's @record in the rank: bounded, a regular file only, never a symlink
        data = json.loads(read_text(error_file, "a rank's torch error file (JSON)", cap=_ERROR_FILE_CAP,
                                    follow=False))
        msg = data.get("message", {})
        if isinstance(msg, dict):
            file_msg = str(msg.get("message", ""))
            extra = msg.get("extraInfo", {})
            file_tb = str(extra.get("py_callstack", ""))
            file_ts = float(extra.get("timestamp")) if extra.get("timestamp") else None
        else:
            file_msg = str(msg)
    except (OSError, ValueError, TypeError, AttributeError, NbdebugError):
        pass
    code = r.proc.returncode
    error, tb, when = "", "", None
    stderr = "\n".join(r.stderr)
    if r.exc is not None:
        error, tb, when = str(r.exc.get("message", "")), str(r.exc.get("traceback", "")), float(r.exc["t"])
    elif file_msg:
        error, tb, when = file_msg, file_tb, file_ts
    elif code not in (0, None) and not r.killed:
        sig = signal_name(code)
        line, tb = _crash_summary(r.stderr)
        error = f"{sig or f'exit code {code}'}" + (f": {line[:300]}" if line else "")
        when = r.exit_time
    if r.killed:
        kind, what = "killed", "ended by nbdebug (hang watchdog or interrupt); see the hang report"
        if not error:
            error = "killed by nbdebug after the hang watchdog fired" if not self.interrupted else \
                "killed by nbdebug after an interrupt"
    elif error:
        kind, what, _ = read_error(error, stderr[-4000:])
    else:
        kind, what = "", ""
    return RankResult(
        rank=r.rank, pid=r.proc.pid, exitcode=code, stdout="\n".join(r.stdout), stderr=self._rename(stderr),
        traceback=self._rename(tb), error=self._rename(error), error_time=when, error_kind=kind,
        error_meaning=what, error_file=error_file,
        ended_at=r.finished_t if r.finished_t is not None else r.exit_time,
    )


_NAME_ERROR = re.compile(r"NameError: name '(\w+)' is not defined")


def _name_errors(ranks: Sequence[RankResult]) -> list[Finding]:
    """Every rank that failed of its own error failed with ``NameError`` (the others as its consequence, e.g. a
    peer's Gloo connection error racing it): the ranks are fresh processes, without the notebook's names."""
    own = own_failures(rank_rows(ranks))
    names: dict[str, None] = {}
    for r in own:
        m = _NAME_ERROR.search(r.error)
        if m is None:
            return []
        names.setdefault(m.group(1))
    if not names:
        return []
    listed = ",".join(names)
    said = ", ".join(repr(n) for n in names)
    if len(own) == len(ranks):
        who = f"every rank failed with NameError ({said} is not defined there)"
    else:
        victims = [r.rank for r in ranks if r.error_kind == "victim"]
        who = (f"rank(s) {ranks_text([r.rank for r in own])} failed with NameError ({said} is not defined there) "
               f"and rank(s) {ranks_text(victims)} as a consequence")
    return [finding(
        "name_not_shipped",
        f"{who}: each rank is a fresh Python process that does not have the notebook's variables, functions or "
        "imports",
        where=tuple(names),
        fixes=[Fix("Ship the names from the notebook to the ranks", f"%%torchrun -n {len(ranks)} --use {listed}"),
               Fix("From Python, pass them with use=", f"nbdebug.dist.run(source, {len(ranks)}, use={list(names)!r})"),
               Fix("Or import / define them inside the cell itself")],
        evidence={"ranks": len(ranks)},
    )]


def _diagnose(rank: RankResult) -> Diagnosis | None:
    """The explainer's diagnosis of a rank's error (its traceback when there is one), None when unrecognised."""
    if not rank.error:
        return None
    try:
        diagnosis = explain(rank.traceback if rank.error in rank.traceback else f"{rank.traceback}\n{rank.error}")
    except Exception:  # the explainer must never cost the user the run's report
        return None
    return diagnosis if diagnosis.known else None


def _crash_summary(stderr: list[str]) -> tuple[str, str]:
    """For a rank killed by a signal: its most telling stderr line, and its main thread's stack when Python's
    fatal-error handler printed one (``Fatal Python error: Aborted`` followed by per-thread stacks)."""
    telling = ""
    for ln in stderr:
        if classify(ln)[1] is not None:
            telling = ln.strip()
            break
    if not telling:
        telling = next((ln.strip() for ln in stderr if ln.startswith(("Fatal Python error", "terminate called"))), "")
    if not telling:
        telling = next((ln.strip() for ln in reversed(stderr) if ln.strip()), "")
    text = "\n".join(stderr)
    blocks = re.split(r"^(?=(?:Current thread|Thread) 0x)", text, flags=re.M)
    main = next((b for b in blocks if "in run_user_code" in b or "_bootstrap.py" in b and " in main" in b), "")
    frames = [ln for ln in main.splitlines()[1:] if ln.strip().startswith("File ")
              and "nbdebug/core/dist/_bootstrap.py" not in ln and "<frozen runpy>" not in ln
              and "elastic/multiprocessing/errors" not in ln]
    tb = ""
    if frames:
        tb = "Stack of the main thread when the process died (most recent call first):\n" + "\n".join(frames)
        tb += f"\n{telling}"
    return telling, tb


def rank_rows(ranks: Sequence[RankResult]) -> list[RankRow]:
    """The launcher's evidence for ``_blame``: one row per rank, its error read as a cause or a consequence."""
    return [RankRow(rank=r.rank, role=r.error_kind, error=r.error, error_time=r.error_time, meaning=r.error_meaning,
                    culprit=read_error(r.error)[2] if r.error_kind == "victim" else None, traceback=r.traceback,
                    exitcode=r.exitcode, ended_at=r.ended_at) for r in ranks]


def pick_primary(ranks: Sequence[RankResult], hang: Hang | None) -> tuple[int | None, str]:
    """Which rank failed first and why (``_blame.blame``): the ranks' ends, and the ranks the watchdog found that
    never reached the collective the others waited in."""
    stall = None
    if hang is not None and hang.missing_ranks:
        stall = Stall(missing=hang.missing_ranks, entered=hang.waiting_ranks, op=hang.collective,
                      where=hang.missing_where)
    verdict = blame(rank_rows(ranks), world_size=len(ranks), stall=stall)
    return verdict.rank, verdict.reason
