"""Which rank failed first, and why: one rule order for the launcher (``%%torchrun``) and the post-mortem.

Both engines turn what they saw into the same evidence: one ``RankRow`` per rank (its error, read as a cause or
a consequence by ``read_error``; its exit code; when it ended), a ``Stall`` when some ranks never reached the
collective the others waited in, and, from Flight Recorder dumps, the collectives issued differently
(``Mismatch``).  ``blame`` applies one rule order to it, the first rule that matches wins:

1. ``mismatch``: ranks issued a collective with other ops, sizes or dtypes than the majority: the odd rank;
2. ``cause``: the earliest error that is a cause, not a consequence of another rank's failure or stall;
3. ``exited``: a rank ended without an error (exit code > 0, or 0 before the first consequence) while the
   others still expected it in their collectives: it ran fewer collectives;
4. ``stall``: the ranks that never reached the collective the others waited in;
5. ``named``: a consequence whose message names the rank that never arrived (``monitoredBarrier``);
6. ``tie``: a collective issued differently with no majority: no rank can be named;
7. ``victims``: every error is a consequence and the rank that caused them left none: no rank is named.

A cause beats a consequence whatever their times: a peer's connection error (``Gloo connectFullMesh failed ...
Connection closed by peer``) can be stamped before the error of the rank whose exit caused it, when that rank's
exception is formatted late under load.  ``own_failures`` reads the same roles for the findings that need every
rank's own error (``NameError`` in every rank that failed of its own): a peer that failed as a consequence does not
hide them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from nbdebug.core.dist._failures import classify, explain_detail_mismatch, meaning

__all__ = ["RankRow", "Stall", "Mismatch", "Verdict", "blame", "own_failures", "read_error", "rank_ranges", "ranks_text",
           "first_line", "FIELD_WORDS", "groups_text"]


def rank_ranges(ranks: Iterable[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``"0-2, 5, 7-8"``."""
    out: list[str] = []
    run: list[int] = []
    for r in sorted(set(ranks)):
        if run and r == run[-1] + 1:
            run.append(r)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [r]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)


def ranks_text(ranks: Sequence[int], limit: int = 120) -> str:
    """``rank_ranges``, cut at ``limit`` characters with the count of ranks when longer."""
    text = rank_ranges(ranks)
    return text if len(text) <= limit else text[:limit].rsplit(",", 1)[0] + f", ... ({len(ranks)} ranks)"


def first_line(text: str, limit: int) -> str:
    """The first non-blank line of ``text``, cut at ``limit`` characters with `` ...``."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[:limit] + " ..."


def read_error(error: str, context: str = "") -> tuple[str, str, int | None]:
    """``(role, meaning, culprit)`` of a rank's error: ``"cause"`` or ``"victim"`` (``classify``), what it means
    in one sentence, and the rank its message names as the one that never arrived (None when it names none).

    ``context`` is more of what the rank left (the end of its traceback or stderr) for the patterns to match.
    """
    role, entry, culprit = classify(error + "\n" + context)
    what = meaning(entry) if entry else ""
    if entry is not None and entry.slug == "collective_mismatch":
        what = explain_detail_mismatch(error) or what
    return role, what, culprit


@dataclass(frozen=True)
class RankRow:
    """One rank's evidence, as either engine saw it.

    ``role`` is ``"cause"``, ``"victim"`` (its error is a consequence of another rank's failure or stall),
    ``"killed"`` (ended by nbdebug's watchdog or an interrupt) or ``""`` (no error).  ``error_time`` and
    ``ended_at`` are Unix times; ``last_collective`` says the last collective it was seen in
    (``"collective #5 (allreduce)"``).
    """

    rank: int
    role: str = ""
    error: str = ""
    error_time: float | None = None
    meaning: str = ""
    culprit: int | None = None
    traceback: str = ""
    exitcode: int | None = None
    ended_at: float | None = None
    last_collective: str = ""

    @property
    def failed(self) -> bool:
        """Its error is a cause or a consequence (a rank ended by nbdebug is neither)."""
        return self.role in ("cause", "victim")


@dataclass(frozen=True)
class Stall:
    """Ranks that never reached the collective the ``entered`` ranks waited in; ``where`` each missing rank was."""

    missing: tuple[int, ...]
    entered: tuple[int, ...] = ()
    op: str = ""
    seq: int | None = None
    where: Mapping[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Mismatch:
    """Ranks that issued collective ``seq`` of a process group with a different op, sizes or dtypes."""

    seq: int
    process_group: str
    field: str
    expected: str
    groups: Mapping[str, tuple[int, ...]]  # value -> ranks that issued it
    culprits: tuple[int, ...]
    where: str = ""


FIELD_WORDS = {"op": "collective ops", "sizes": "tensor sizes", "dtypes": "dtypes"}


def groups_text(m: Mismatch) -> str:
    """``[[9]] on rank(s) 1; [[8]] on rank(s) 0, 2-3``: the values a mismatched collective was issued with."""
    parts = [f"{v} on rank(s) {rank_ranges(rs)}" for v, rs in sorted(m.groups.items(), key=lambda kv: -len(kv[1]))]
    return "; ".join(parts[:4]) + (f"; {len(parts) - 4} more" if len(parts) > 4 else "")


@dataclass(frozen=True)
class Verdict:
    """Which rank failed first (``rank``, None when the evidence names none) and why (``reason``).

    ``rule`` is the rule that decided (``mismatch``, ``cause``, ``exited``, ``stall``, ``named``, ``tie``,
    ``victims``, or ``""`` when nothing failed); ``causes``, ``victims`` and ``exited`` are the ranks each rule
    read, earliest first; ``mismatch`` is the mismatched collective the verdict rests on.
    """

    rank: int | None
    reason: str
    rule: str = ""
    causes: tuple[int, ...] = ()
    victims: tuple[int, ...] = ()
    exited: tuple[int, ...] = ()
    mismatch: Mismatch | None = None


def _by_time(r: RankRow) -> tuple[float, int]:
    return (r.error_time if r.error_time is not None else float("inf"), r.rank)


def _ranks_word(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks_text(ranks)}"


def _exited(rows: Sequence[RankRow], first_victim: float | None) -> list[RankRow]:
    """Ranks that ended without an error while the others still expected them: a non-zero exit code, or exit
    code 0 no later than the first consequence."""
    def early(r: RankRow) -> bool:
        if r.role or r.exitcode is None:  # an error, or ended by nbdebug
            return False
        if r.exitcode > 0:
            return True
        return r.exitcode == 0 and None not in (r.ended_at, first_victim) and r.ended_at <= first_victim  # type: ignore[operator]
    return sorted((r for r in rows if early(r)), key=lambda r: (r.ended_at if r.ended_at is not None else
                                                                float("inf"), r.rank))


def blame(rows: Sequence[RankRow], *, world_size: int, stall: Stall | None = None,
          mismatches: Sequence[Mismatch] = ()) -> Verdict:
    """The one rule order (see the module's text): which rank failed first and why, from the ranks' evidence."""
    causes = sorted((r for r in rows if r.role == "cause"), key=_by_time)
    victims = sorted((r for r in rows if r.role == "victim"), key=_by_time)
    exited = _exited(rows, victims[0].error_time if victims else None)
    mismatch = next((m for m in mismatches if m.culprits), mismatches[0] if mismatches else None)

    def said(rank: int | None, reason: str, rule: str) -> Verdict:
        reason = reason.replace(".; then ", "; then ")  # an error's own full stop before what followed it
        return Verdict(rank, reason, rule, tuple(r.rank for r in causes), tuple(r.rank for r in victims),
                       tuple(r.rank for r in exited), mismatch)

    then = ""
    if victims:
        first = next((v.meaning for v in victims if v.meaning), "")
        then = (f"; then {_ranks_word([v.rank for v in victims])} failed as a consequence"
                + (f" ({first})" if first else ""))
    if mismatch is not None and mismatch.culprits:
        return said(mismatch.culprits[0], (
            f"rank(s) {rank_ranges(mismatch.culprits)} issued collective #{mismatch.seq} with other "
            f"{FIELD_WORDS[mismatch.field]} than the others ({groups_text(mismatch)})"
            + (f" at {mismatch.where}" if mismatch.where else "")
            + "; the ranks' failures that followed are its consequence"), "mismatch")
    if causes:
        p = causes[0]
        first_time = min((r.error_time for r in (*causes, *victims) if r.error_time is not None), default=None)
        at = (f" at +{p.error_time - first_time:.2f} s after the first error"
              if p.error_time is not None and first_time is not None and p.error_time > first_time else "")
        also = f"; also failed on their own: rank(s) {ranks_text([c.rank for c in causes[1:]])}" if causes[1:] else ""
        why = f" ({p.meaning})" if p.meaning else ""
        return said(p.rank, f"rank {p.rank} failed first{at}: {first_line(p.error, 300)}{why}{also}{then}",
                       "cause")
    if exited:
        e = exited[0]
        did = "finished its code" if e.exitcode == 0 else "exited"
        seen = f", after {e.last_collective}" if e.last_collective else ""
        return said(e.rank, (
            f"rank {e.rank} {did} (exit code {e.exitcode}) without an error{seen}, while the other ranks still "
            "expected it in their collectives: it ran fewer collectives (fewer batches, an early return, sys.exit "
            f"or a rank-dependent branch){then}"), "exited")
    if stall is not None and stall.missing:
        p_rank = stall.missing[0]
        what = stall.op or "the collective"
        if stall.seq is not None:
            what = f"{stall.op} (collective #{stall.seq})" if stall.op else f"collective #{stall.seq}"
        waited = f" that {_ranks_word(stall.entered)} waited in" if stall.entered else ""
        w = stall.where.get(p_rank, "")
        return said(p_rank, (f"{_ranks_word(stall.missing)} never reached {what}{waited}"
                                + (f"; rank {p_rank}: {w}" if w else "") + then), "stall")
    for v in victims:
        if v.culprit is not None and 0 <= v.culprit < world_size:
            return said(v.culprit, (f"rank {v.rank}'s error names rank {v.culprit} as the one that never "
                                       f"arrived: {first_line(v.error, 300)}"), "named")
    if mismatch is not None:
        return said(None, (
            f"collective #{mismatch.seq} was issued with different {FIELD_WORDS[mismatch.field]} "
            f"({groups_text(mismatch)}); which side is wrong cannot be told from these dumps alone"), "tie")
    if victims:
        v = victims[0]
        example = (f"rank {v.rank} first" if v.error_time is not None else f"e.g. rank {v.rank}")
        return said(None, (
            f"every error found is a consequence of another rank's failure or stall (rank(s) "
            f"{ranks_text([x.rank for x in victims])}; {example}: {first_line(v.error, 300).rstrip('.')}); the rank "
            "that caused them left no error here: look for the ranks that reported nothing, or collect Flight "
            "Recorder dumps and stacks next time"), "victims")
    return said(None, "", "")


def own_failures(rows: Sequence[RankRow]) -> tuple[RankRow, ...]:
    """The ranks that failed of their own error (causes), earliest first, when every rank failed and each of the
    others failed as a consequence (a victim); ``()`` when a rank ended without an error or was ended by nbdebug.

    The order of the errors in time does not matter: a cause beats a consequence (see the module's text).
    """
    if not rows or any(not r.failed for r in rows):
        return ()
    return tuple(sorted((r for r in rows if r.role == "cause"), key=_by_time))
