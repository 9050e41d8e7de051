"""Post-mortem of a distributed job from the artifacts its ranks left: who failed first, who died because of it,
where the ranks diverged, which collectives disagreed, which node was bad, and what was missing to say more.

``postmortem(path_or_paths)`` reads any mix of Flight Recorder dumps, torchelastic error files, stack dumps,
``NCCL_DEBUG`` logs and ``[rankN]:`` logs (``_artifacts.collect``), then:

- the primary failure is the earliest error that is a *cause* (``classify``: the knowledge entries tell a cause
  from a victim, e.g. ``Connection closed by peer`` is a victim), with the explainer's diagnosis of it;
- a hang is found in the Flight Recorder: per process group, the first collective sequence id that not every rank
  reached; the ranks that never entered it, with their stacks where a dump exists;
- a mismatch: the ranks that issued a collective with the same sequence id but another op, sizes or dtypes than
  the majority (a tie names both sides);
- ranks are grouped by host; a host whose ranks all failed first, all stalled, or whose logs hold NCCL network /
  GPU (Xid, ECC) errors while others' do not, is named a bad node.

Works on thousands of ranks: one pass over the files, and per rank only the last collectives are compared.
"""

from __future__ import annotations

import glob
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nbdebug.core._findings import Finding, HasFindings, sort_findings
from nbdebug.core._result import Result
from nbdebug.core.dist._artifacts import Collected, RankEvidence, absent_ranks, collect, plausible_world
from nbdebug.core.dist._blame import (
    FIELD_WORDS,
    Mismatch,
    RankRow,
    Stall,
    Verdict,
    blame,
    first_line,
    groups_text,
    rank_ranges,
    ranks_text,
    read_error,
)
from nbdebug.core.dist._failures import signal_name
from nbdebug.core.dist._hang import collective_of, user_frame
from nbdebug.core.explain import Diagnosis, explain
from nbdebug.core.knowledge import finding
from nbdebug.errors import DistUsageError

__all__ = ["postmortem", "PostMortem", "RankState", "HostState", "Divergence", "Mismatch", "rank_ranges"]

# a rank's state, worst first (the panel groups ranks by it)
STATES = ("primary", "mismatched", "never arrived", "exited early", "failed", "consequence", "waiting", "killed",
          "finished", "no error seen", "no artifact")


@dataclass(frozen=True)
class RankState:
    """One rank, as the artifacts tell it."""

    rank: int
    host: str
    state: str
    error: str = ""
    error_time: float | None = None
    exitcode: int | None = None
    last_seq: int | None = None
    last_op: str = ""
    where: str = ""
    artifacts: tuple[str, ...] = ()


@dataclass(frozen=True)
class HostState:
    """The ranks of one host and what happened to them."""

    host: str
    ranks: tuple[int, ...]
    states: Mapping[str, int]
    bad: bool = False
    reason: str = ""


@dataclass(frozen=True)
class Divergence:
    """The first collective (by sequence id) that not every rank of a process group reached."""

    seq: int
    op: str
    process_group: str
    entered: tuple[int, ...]
    missing: tuple[int, ...]
    missing_where: Mapping[int, str] = field(default_factory=dict)
    missing_stack: Mapping[int, str] = field(default_factory=dict)
    entered_where: str = ""


@dataclass(frozen=True, repr=False)
class PostMortem(HasFindings, Result):
    """What a job's per-rank artifacts say.

    Every way the job failed is an error finding (a primary failure, a divergence, a mismatched collective, a
    bad node, only consequences, ranks ended by a signal), so ``ok`` (no error or warning finding) means the
    artifacts show no failure.

    Attributes
    ----------
    paths : tuple of str
        What was read.
    world_size : int
        Ranks in the job (from the dumps, the logs, or the highest rank seen).
    ranks : tuple of RankState
        One per rank seen, by rank (``to_pandas()`` gives one row each).
    primary_rank : int or None
        The rank whose failure came first and caused the rest (or that never reached the collective).
    primary_reason : str
        Why, in one paragraph.
    diagnosis : Diagnosis or None
        The explainer's diagnosis of the primary rank's error.
    consequences : tuple of int
        Ranks that failed or were killed because of the primary failure.
    divergence : Divergence or None
        Where the ranks stopped issuing the same collectives (a hang), from the Flight Recorder.
    mismatches : tuple of Mismatch
        Collectives issued differently by some ranks (op, sizes, dtypes), earliest first.
    hosts : tuple of HostState
        Ranks grouped by host; ``bad`` hosts first.
    findings : tuple of Finding
        The same conclusions as findings with fixes (primary failure, divergence, mismatch, bad node, gaps).
    missing : tuple of str
        What was missing to say more.
    next_time : tuple of (str, str, str)
        Environment variables to set on the next run: name, value, why.
    files : dict
        Artifacts read, by kind.
    notes : tuple of str
        Files skipped and why.
    """

    paths: tuple[str, ...]
    world_size: int
    ranks: tuple[RankState, ...]
    primary_rank: int | None
    primary_reason: str
    diagnosis: Diagnosis | None
    consequences: tuple[int, ...]
    divergence: Divergence | None
    mismatches: tuple[Mismatch, ...]
    hosts: tuple[HostState, ...]
    findings: tuple[Finding, ...]
    missing: tuple[str, ...]
    next_time: tuple[tuple[str, str, str], ...]
    files: Mapping[str, int]
    notes: tuple[str, ...] = ()

    @property
    def bad_hosts(self) -> tuple[str, ...]:
        """Hosts named as bad nodes."""
        return tuple(h.host for h in self.hosts if h.bad)

    def by_state(self) -> dict[str, tuple[int, ...]]:
        """Ranks grouped by state, worst state first."""
        groups: dict[str, list[int]] = {}
        for r in self.ranks:
            groups.setdefault(r.state, []).append(r.rank)
        return {s: tuple(groups[s]) for s in sorted(groups, key=lambda s: STATES.index(s) if s in STATES else 99)}

    def _summary_line(self) -> str:
        head = f"{self.world_size} ranks"
        if self.primary_rank is not None:
            return f"{head}, primary failure on rank {self.primary_rank}"
        if self.divergence is not None:
            return f"{head}, hang at collective #{self.divergence.seq}"
        if self.finding("postmortem_no_cause") is not None:
            return f"{head}, failed; the first cause left no error"
        if not self.ok:
            return f"{head}, {(self.errors() or list(self.findings))[0].title.lower()}"
        return f"{head}, no failure found"

    def _records(self) -> list[dict[str, Any]]:
        return [{"rank": r.rank, "host": r.host, "state": r.state, "error": r.error, "error_time": r.error_time,
                 "exitcode": r.exitcode, "last_seq": r.last_seq, "last_op": r.last_op, "where": r.where,
                 "artifacts": ", ".join(r.artifacts)} for r in self.ranks]


# -- input ------------------------------------------------------------------------------------------------------

def _paths(path_or_paths: Any) -> tuple[str, ...]:
    if isinstance(path_or_paths, (str, os.PathLike)):
        items = [path_or_paths]
    elif isinstance(path_or_paths, Iterable) and not isinstance(path_or_paths, (bytes, Mapping)):
        items = list(path_or_paths)
    else:
        raise DistUsageError(f"path_or_paths={path_or_paths!r:.80}: expected a folder, a file, a glob, or a list "
                             "of them")
    out: list[str] = []
    for item in items:
        if not isinstance(item, (str, os.PathLike)):
            raise DistUsageError(f"{item!r:.80} in path_or_paths: expected a path (str), got {type(item).__name__}")
        p = os.fspath(item)
        if not isinstance(p, str):
            raise DistUsageError(f"{p!r:.80}: expected a path as str, not bytes")
        if any(ch in p for ch in "*?["):
            matched = sorted(glob.glob(p, recursive=True))
            if not matched:
                raise DistUsageError(f"{p!r}: the pattern matches no file; expected a folder of per-rank artifacts")
            out += matched
        elif os.path.exists(p):
            out.append(p)
        else:
            raise DistUsageError(f"{p!r} does not exist; expected a folder (or files) of per-rank artifacts")
    if not out:
        raise DistUsageError("no path given; expected a folder of per-rank artifacts")
    return tuple(out)


def postmortem(path_or_paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> PostMortem:
    """Read a job's per-rank artifacts and say what went wrong: the primary failure, its consequences, a hang's
    divergence, mismatched collectives, bad nodes, and what to collect next time.

    Parameters
    ----------
    path_or_paths : path, glob or list of them
        Folders are walked; files are recognised by content (Flight Recorder dumps, torchelastic error files,
        faulthandler / py-spy stacks, NCCL_DEBUG logs, ``[rankN]:`` logs, torchrun's output).

    Returns
    -------
    PostMortem
        ``str()`` is the text report; in a notebook it shows as a panel; ``to_pandas()`` has one row per rank.

    Raises
    ------
    DistUsageError
        A path that does not exist, or nothing recognisable in any file.
    """
    paths = _paths(path_or_paths)
    c = collect(paths)
    if not c.ranks:
        shown = ", ".join(paths[:3]) + (" ..." if len(paths) > 3 else "")
        raise DistUsageError(
            f"{shown}: no per-rank artifact recognised ({len(c.notes)} file(s) skipped); expected Flight Recorder "
            "dumps, torchelastic error files, faulthandler or py-spy stacks, NCCL_DEBUG logs or [rankN]: logs "
            "(nbdebug.dist.instrument() writes them all)")
    return _analyse(paths, c)


# -- analysis ---------------------------------------------------------------------------------------------------

def _error_of(ev: RankEvidence) -> tuple[float | None, str, str, str] | None:
    if not ev.errors:
        return None
    timed = [e for e in ev.errors if e[0] is not None]
    if timed:
        return min(timed, key=lambda e: e[0])  # type: ignore[arg-type,return-value]
    return ev.errors[0]


def _where(frames: Sequence[Mapping[str, Any]]) -> str:
    f = user_frame(frames)
    if not f:
        return ""
    coll = collective_of(frames)
    return f"{f.get('file')}:{f.get('line')} in {f.get('func')}" + (f" (in {coll})" if coll else "")


def _divergence(c: Collected, world: int) -> tuple[Divergence | None, list[Mismatch], dict[int, tuple[int, str]]]:
    """From the Flight Recorder: per process group, the first sequence id not every dumped rank reached, and the
    collectives whose op/sizes/dtypes differ between ranks."""
    last: dict[int, tuple[int, str]] = {}
    per_pg: dict[str, dict[int, dict[int, dict[str, Any]]]] = {}  # pg -> rank -> seq -> entry
    for r, ev in c.ranks.items():
        for e in ev.fr:
            if e["is_p2p"] or not e["seq"]:
                continue
            per_pg.setdefault(e["pg"], {}).setdefault(r, {})[e["seq"]] = e
        coll = [e for e in ev.fr if not e["is_p2p"] and e["seq"]]
        if coll:
            top = max(coll, key=lambda e: (e["pg"] == "0", e["seq"]))
            last[r] = (top["seq"], top["op"])
    mismatches: list[Mismatch] = []
    divergence: Divergence | None = None
    for pg in sorted(per_pg, key=lambda p: (p != "0", p)):
        by_rank = per_pg[pg]
        if len(by_rank) < 2 and world > 1 and pg != "0":
            continue
        tops = {r: max(seqs) for r, seqs in by_rank.items()}
        # mismatches: only among the sequence ids every dumped rank still holds (the ring buffer drops old ones)
        low = max(min(seqs) for seqs in by_rank.values())
        high = max(tops.values())
        # the ids that exist, in order (never every integer between low and high: ids come from the files, and
        # [1] against [1, 10**18] is two entries)
        by_seq: dict[int, dict[int, dict[str, Any]]] = {}  # one pass over the entries, ranks in by_rank's order
        for r, seqs in by_rank.items():
            for seq, e in seqs.items():
                if low <= seq <= high:
                    by_seq.setdefault(seq, {})[r] = e
        for seq in sorted(by_seq):
            here = by_seq[seq]
            if len(here) < 2:
                continue
            for fld in ("op", "sizes", "dtypes"):
                values = Counter(e[fld] for e in here.values())
                if len(values) < 2:
                    continue
                (top_value, top_n), (_, second_n) = values.most_common(2)
                groups: dict[str, list[int]] = {}
                for r, e in here.items():
                    groups.setdefault(e[fld], []).append(r)
                culprits = () if top_n == second_n else tuple(sorted(r for v, rs in groups.items() if v != top_value
                                                                     for r in rs))
                any_culprit = culprits[0] if culprits else min(here)
                mismatches.append(Mismatch(
                    seq=seq, process_group=pg, field=fld, expected=top_value if culprits else "",
                    groups={v: tuple(sorted(rs)) for v, rs in groups.items()}, culprits=culprits,
                    where=_where(here[any_culprit]["frames"]),
                ))
                break
            if len(mismatches) >= 10:
                break
        if divergence is None and len(set(tops.values())) > 1:
            first_gap = min(tops.values()) + 1
            entered = tuple(sorted(r for r, t in tops.items() if t >= first_gap))
            missing = tuple(sorted(r for r, t in tops.items() if t < first_gap))
            sample = by_rank[entered[0]][first_gap] if first_gap in by_rank[entered[0]] else None
            divergence = Divergence(
                seq=first_gap, op=sample["op"] if sample else "", process_group=pg, entered=entered, missing=missing,
                entered_where=_where(sample["frames"]) if sample else "",
            )
    return divergence, mismatches, last


def _nccl_divergence(c: Collected) -> Divergence | None:
    """Without Flight Recorder dumps: NCCL's watchdog lines say which SeqNum each rank timed out in; ranks stuck
    at a lower SeqNum never reached the collective the others waited in."""
    seqs = {r: ev.nccl_timeout for r, ev in c.ranks.items() if ev.nccl_timeout is not None}
    if len({s for s, _ in seqs.values()}) < 2:
        return None
    top = max(s for s, _ in seqs.values())
    op = next(o for s, o in seqs.values() if s == top)
    return Divergence(
        seq=top, op=op, process_group="(from NCCL's watchdog)",
        entered=tuple(sorted(r for r, (s, _) in seqs.items() if s == top)),
        missing=tuple(sorted(r for r, (s, _) in seqs.items() if s < top)),
    )


def _placed(divergence: Divergence, c: Collected, last: Mapping[int, tuple[int, str]]) -> Divergence:
    """The divergence with where each missing rank was, and its stack: the ranks without a dump never showed they
    entered it either (say so, do not count them in)."""
    where, stacks = {}, {}
    for r in divergence.missing:
        ev = c.ranks[r]
        err = _error_of(ev)
        # a rank that raised: its traceback says where it was; a stack dump may have been taken later, while
        # it was already handling the error (or being terminated)
        where[r] = ((_where(_tb_frames(err[2])) if err and err[2] else "") or _where(ev.stack_frames)
                    or (f"last collective #{last[r][0]} ({last[r][1]})" if r in last else ""))
        if err is not None and err[2]:
            stacks[r] = err[2]
        elif ev.stack:
            stacks[r] = ev.stack
    return Divergence(divergence.seq, divergence.op, divergence.process_group, divergence.entered,
                      divergence.missing, where, stacks, divergence.entered_where)


def _rows(c: Collected, last: Mapping[int, tuple[int, str]]) -> dict[int, RankRow]:
    """Each rank's evidence for the verdict: its earliest error, read as a cause or a consequence."""
    rows: dict[int, RankRow] = {}
    for r, ev in c.ranks.items():
        seen = f"collective #{last[r][0]} ({last[r][1]})" if r in last else ""
        first = _error_of(ev)
        if first is None:
            rows[r] = RankRow(rank=r, exitcode=ev.exitcode, last_collective=seen)
            continue
        t, msg, tb, _ = first
        role, what, culprit = read_error(msg, tb[-2000:])
        rows[r] = RankRow(rank=r, role=role, error=msg, error_time=t, meaning=what, culprit=culprit, traceback=tb,
                          exitcode=ev.exitcode, last_collective=seen)
    return rows


def _analyse(paths: tuple[str, ...], c: Collected) -> PostMortem:
    world = max([c.world_size or 0, max(c.ranks) + 1, *(ev.world_size or 0 for ev in c.ranks.values())])
    divergence, mismatches, last = _divergence(c, world)
    if divergence is None:
        divergence = _nccl_divergence(c)
    if divergence is not None:
        divergence = _placed(divergence, c, last)
    rows = _rows(c, last)
    stall = None if divergence is None else Stall(divergence.missing, divergence.entered, divergence.op,
                                                  divergence.seq, divergence.missing_where)
    verdict = blame(list(rows.values()), world_size=world, stall=stall, mismatches=mismatches)
    states, consequences = _states(c, world, rows, verdict, divergence, last)
    primary = verdict.rank
    hosts = _hosts(states, c, primary)
    diagnosis = None
    if primary is not None and primary in rows and rows[primary].failed:
        diagnosis = _diagnose(rows[primary].error, rows[primary].traceback)
    missing, next_time = _gaps(c, world, divergence)
    findings = _findings(verdict, divergence, mismatches, hosts, missing, states, consequences)
    return PostMortem(
        paths=paths, world_size=world, ranks=tuple(states), primary_rank=primary, primary_reason=verdict.reason,
        diagnosis=diagnosis, consequences=tuple(sorted(consequences)), divergence=divergence,
        mismatches=tuple(mismatches), hosts=hosts, findings=findings, missing=tuple(missing),
        next_time=tuple(next_time), files=dict(c.files), notes=tuple(c.notes[:200]),
    )


def _state(row: RankRow, verdict: Verdict, divergence: Divergence | None) -> str:
    """A rank's state (``STATES``) from its evidence and the verdict."""
    mismatched = verdict.mismatch.culprits if verdict.mismatch is not None else ()
    if row.rank == verdict.rank:
        return "primary"
    if row.rank in mismatched:
        return "mismatched"
    if divergence is not None and row.rank in divergence.missing and not row.failed:
        return "exited early" if row.rank in verdict.exited else "never arrived"
    if row.rank in verdict.exited:
        return "exited early"
    if row.role == "cause" and not mismatched:
        return "failed"
    if row.failed:
        return "consequence"
    if row.exitcode in (-15, -9):
        return "killed"
    if divergence is not None and row.rank in divergence.entered:
        return "waiting"
    return "finished" if row.exitcode == 0 else "no error seen"


def _states(c: Collected, world: int, rows: Mapping[int, RankRow], verdict: Verdict, divergence: Divergence | None,
            last: Mapping[int, tuple[int, str]]) -> tuple[list[RankState], set[int]]:
    """One ``RankState`` per rank, and the ranks that failed or were stopped as a consequence."""
    consequences: set[int] = set()
    states: list[RankState] = []
    # every rank of the job gets a row (those without an artifact too), unless the job size is implausible
    # next to what was seen (a hostile or mislabelled file): then only the ranks seen
    for r in range(world) if plausible_world(world, c) else sorted(c.ranks):
        ev = c.ranks.get(r)
        if ev is None:
            states.append(RankState(rank=r, host="", state="no artifact"))
            continue
        row = rows[r]
        state = _state(row, verdict, divergence)
        if state in ("consequence", "killed", "waiting") and (verdict.rank is not None or divergence is not None):
            consequences.add(r)
        msg = row.error if row.failed else (f"exit code {ev.exitcode} {signal_name(ev.exitcode)}".strip()
                                            if ev.exitcode not in (None, 0) else "")
        states.append(RankState(
            rank=r, host=ev.host, state=state, error=first_line(msg, 500),
            error_time=row.error_time if row.failed else None, exitcode=ev.exitcode,
            last_seq=last[r][0] if r in last else None, last_op=last[r][1] if r in last else "",
            where=(_where(_tb_frames(row.traceback)) if row.traceback else "") or _where(ev.stack_frames),
            artifacts=tuple(sorted(ev.kinds)),
        ))
    return states, consequences


def _tb_frames(tb: str) -> list[dict[str, Any]]:
    from nbdebug.core.dist._hang import parse_traceback

    return parse_traceback(tb[-20_000:])


def _diagnose(message: str, tb: str) -> Diagnosis | None:
    try:
        d = explain(tb[-20_000:] if message in tb else f"{tb[-20_000:]}\n{message}")
    except Exception:  # the explainer must never cost the user the post-mortem
        return None
    return d if d.known else None


_NODE_FAULT = re.compile(r"NVRM: Xid|\bXid \(PCI:|uncorrectable ECC|ECC error|NCCL WARN NET/|NET/IB : Got completion "
                         r"from peer|ibv_poll_cq|Network is unreachable|No route to host|Connection timed out")


def _hosts(states: list[RankState], c: Collected, primary: int | None) -> tuple[HostState, ...]:
    by_host: dict[str, list[RankState]] = {}
    for s in states:
        if s.host:
            by_host.setdefault(s.host, []).append(s)
    if not by_host:
        return ()
    out = []
    bad_states = {"primary", "failed", "never arrived", "exited early", "mismatched"}
    for host, rs in by_host.items():
        counts = Counter(s.state for s in rs)
        faults = [ln for s in rs for ln in c.ranks[s.rank].nccl if _NODE_FAULT.search(ln)]
        bad, why = False, ""
        if len(by_host) > 1:
            if faults:
                bad, why = True, f"hardware or network errors in its logs: {first_line(faults[0], 200)}"
            elif len(rs) > 1 and all(s.state in bad_states for s in rs):
                bad, why = True, f"all {len(rs)} of its ranks failed first or never arrived"
        out.append(HostState(host=host, ranks=tuple(s.rank for s in rs), states=dict(counts), bad=bad, reason=why))
    # a host is only "bad" when it stands out: if most hosts look bad, the problem is not one node
    if sum(h.bad for h in out) > max(1, len(out) // 2):
        out = [HostState(h.host, h.ranks, h.states) for h in out]
    return tuple(sorted(out, key=lambda h: (not h.bad, h.host)))


def _places(where: Mapping[int, str]) -> tuple[str, ...]:
    """``rank(s) 40-47: train.py:33 in <module>``: ranks at the same place together, most ranks first."""
    groups: dict[str, list[int]] = {}
    for r, w in where.items():
        if w:
            groups.setdefault(w, []).append(r)
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), min(kv[1])))
    return tuple(f"rank(s) {rank_ranges(rs)}: {w}" for w, rs in ordered[:8])


def _gaps(c: Collected, world: int, divergence: Divergence | None) -> tuple[list[str], list[tuple[str, str, str]]]:
    missing: list[str] = []
    nxt: list[tuple[str, str, str]] = []
    have = {k for ev in c.ranks.values() for k in ev.kinds}
    fr_ranks = [r for r, ev in c.ranks.items() if ev.fr]
    if not fr_ranks:
        missing.append("no Flight Recorder dump: which collective each rank was in cannot be compared")
        nxt.append(("TORCH_FR_BUFFER_SIZE", "2000", "record the last collectives of every rank (gloo's default is 0)"))
        nxt.append(("TORCH_NCCL_DUMP_ON_TIMEOUT", "1", "NCCL writes the dumps when its watchdog fires"))
        nxt.append(("TORCH_FR_DUMP_TEMP_FILE", "/shared/fr/rank_", "where the dumps go (one file per rank)"))
    elif len(fr_ranks) < world:
        missing.append(f"no Flight Recorder dump from rank(s) {absent_ranks(fr_ranks, world)}: they were killed or aborted "
                       "before dumping, or dumped elsewhere")
        nxt.append(("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3", "abort without racing the dump (pytorch#121055)"))
    if divergence is not None:
        no_stack = [r for r in divergence.missing if r not in divergence.missing_stack
                    and c.ranks[r].exitcode in (None, -15, -9)]
        if no_stack:
            missing.append(f"no stack dump from rank(s) {rank_ranges(no_stack)} that never arrived: where they were "
                           "cannot be shown")
            nxt.append(("(in the script)", "nbdebug.dist.instrument()", "stacks on SIGUSR1 and when a rank stalls "
                        "(or: py-spy dump --pid PID on each stuck rank)"))
    if "error_file" not in have:
        missing.append("no torchelastic error file: exception times have only the logs' order")
        nxt.append(("TORCHELASTIC_ERROR_FILE", "/shared/errors/rank_${RANK}.json", "with @record on main(): each "
                    "rank's exception, traceback and timestamp"))
    hostless = [r for r, ev in c.ranks.items() if not ev.host]
    if hostless and len(hostless) == len(c.ranks):
        missing.append("no host names: bad nodes cannot be told apart")
        nxt.append(("NCCL_DEBUG", "INFO", "NCCL's log lines carry host:pid (also NCCL_DEBUG_FILE=/shared/nccl.%h.%p)"))
    if "nccl_log" not in have and not any(ev.nccl for ev in c.ranks.values()):
        nxt.append(("NCCL_DEBUG", "WARN", "NCCL's own errors (network, IB, Xid) in the logs; INFO for the topology"))
    seen = set()
    uniq = []
    for item in nxt:
        if item[0] not in seen:
            seen.add(item[0])
            uniq.append(item)
    return missing, uniq


def _findings(verdict: Verdict, divergence: Divergence | None, mismatches: list[Mismatch],
              hosts: tuple[HostState, ...], missing: list[str], states: Sequence[RankState],
              consequences: set[int]) -> tuple[Finding, ...]:
    """The verdict, the divergence, the mismatches, the bad nodes and the gaps as findings.  Every way the job
    failed is an error finding (a rank that only ended by a signal too), so ``ok`` is "nothing failed"."""
    out: list[Finding] = []
    primary, reason = verdict.rank, verdict.reason
    if primary is not None:
        stopped = sorted(consequences - set(verdict.victims) - {primary})
        after = f"; rank(s) {ranks_text(stopped)} were stopped or left waiting as a consequence" if stopped else ""
        out.append(finding("postmortem_primary", reason + after, where=(f"rank {primary}",),
                           evidence={"rank": primary, "consequences": len(consequences)}))
    elif divergence is None and not mismatches:
        failed = len(verdict.causes) + len(verdict.victims)
        ended = [s for s in states if s.error]
        if reason:
            out.append(finding("postmortem_no_cause", reason, evidence={"ranks_with_errors": failed}))
        elif ended:  # ranks that ended by a signal (SIGTERM, SIGKILL), and nothing says why
            out.append(finding(
                "postmortem_no_cause",
                f"rank(s) {ranks_text([s.rank for s in ended])} ended without an error of their own ({ended[0].error}"
                "); whoever ended them (the launcher after another rank failed, the OOM killer, the scheduler) left "
                "no trace here", evidence={"ranks_with_errors": failed, "ranks_ended": len(ended)}))
    if divergence is not None:
        out.append(finding(
            "hang_divergence",
            f"collective #{divergence.seq} ({divergence.op or '?'}, process group {divergence.process_group}) was "
            f"entered by rank(s) {rank_ranges(divergence.entered)} and never by rank(s) "
            f"{rank_ranges(divergence.missing)}",
            where=_places(divergence.missing_where),
            evidence={"seq": divergence.seq, "entered": len(divergence.entered), "missing": len(divergence.missing)}))
    for m in mismatches[:3]:
        out.append(finding(
            "fr_collective_mismatch",
            f"collective #{m.seq} (process group {m.process_group}) differs in {FIELD_WORDS[m.field]}: "
            f"{groups_text(m)}",
            where=(m.where,) if m.where else (), evidence={"seq": m.seq, "field": m.field}))
    for h in hosts:
        if h.bad:
            out.append(finding("bad_node", f"host {h.host} (rank(s) {rank_ranges(h.ranks)}): {h.reason}",
                               where=(h.host,), evidence={"ranks": len(h.ranks)}))
    if missing:
        out.append(finding("postmortem_gaps", "; ".join(missing), evidence={"gaps": len(missing)}))
    return sort_findings(out)
