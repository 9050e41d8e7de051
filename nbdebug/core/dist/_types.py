"""Result objects of a distributed run: one ``RankResult`` per rank, an optional ``Hang``, the ``DistRun``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nbdebug.core._findings import Finding, HasFindings
from nbdebug.core._result import Result
from nbdebug.core.explain import Diagnosis

if TYPE_CHECKING:
    from nbdebug.core.dist._checks import StepReport
    from nbdebug.core.dist._nccl import NcclLog

__all__ = [
    "RunInterrupted", "RankResult", "StackGroup", "Hang", "CheckRecord", "DistRun", "FAILURE_KINDS"]


@dataclass(frozen=True, repr=False)
class RankResult(Result):
    """What one rank did.

    Attributes
    ----------
    rank : int
        Global rank.
    pid : int
        Process id.
    exitcode : int or None
        Exit status; negative means killed by that signal; None if it never ended (cannot happen after a run).
    stdout, stderr : str
        Everything the rank printed.
    traceback : str
        The rank's Python traceback (nbdebug's plumbing frames removed), '' when it did not raise.
    error : str
        ``"Type: message"`` of the exception (from torch's error file when there is one), or a signal name.
    error_time : float or None
        Unix time (sub-second) at which the exception was raised, or the process was seen to exit.
    error_kind : str
        ``"cause"``, ``"victim"`` (failed because another rank failed or stalled), ``"killed"`` (ended by nbdebug
        after a hang or an interrupt) or ``""`` (no failure).
    error_meaning : str
        What the error means, from nbdebug's table of known distributed errors.
    error_file : str
        torch's ``TORCHELASTIC_ERROR_FILE`` for this rank (JSON; may not exist when the rank did not raise).
    ended_at : float or None
        Unix time at which the launcher saw the process end.
    """

    rank: int
    pid: int
    exitcode: int | None
    stdout: str = ""
    stderr: str = ""
    traceback: str = ""
    error: str = ""
    error_time: float | None = None
    error_kind: str = ""
    error_meaning: str = ""
    error_file: str = ""
    ended_at: float | None = None

    @property
    def failed(self) -> bool:
        """True when the rank ended with a non-zero status."""
        return self.exitcode not in (0, None) or bool(self.error)

    def _summary_line(self) -> str:
        state = "ok" if not self.failed else (self.error or f"exit {self.exitcode}")
        return f"rank {self.rank} (pid {self.pid}): {state}"


@dataclass(frozen=True)
class StackGroup:
    """Ranks whose main threads were at the same place when the watchdog fired."""

    ranks: tuple[int, ...]
    collective: str  # e.g. "all_reduce", '' when not in a collective
    location: str  # innermost frame of the user's code, "file:line in func"
    code: str  # that line's source
    stack: str  # full stack text of the first rank in the group


@dataclass(frozen=True, repr=False)
class Hang(Result):
    """What the hang watchdog found when no rank made progress for ``after_seconds``.

    Attributes
    ----------
    after_seconds : float
        The watchdog timeout that fired.
    collective : str
        The collective the waiting ranks were blocked in ('' if none was).
    location : str
        Where the waiting ranks called it (file:line).
    waiting_ranks : tuple of int
        Ranks blocked in that collective.
    missing_ranks : tuple of int
        Ranks that never reached it (alive elsewhere, or already exited).
    missing_where : Mapping[int, str]
        For each missing rank: where it was (file:line and code), or how it had ended.
    groups : tuple of StackGroup
        Ranks grouped by identical stack.
    stacks : Mapping[int, str]
        Rank -> the main thread's Python stack text.
    flight_recorder : Mapping[int, tuple]
        Rank -> the last Flight Recorder entries (``collective_seq_id``, op, sizes), when recording was on.
    method : str
        How the stacks were taken (``in-rank thread``, ``py-spy``, ``faulthandler``).
    explanation : str
        One paragraph saying what happened.
    """

    after_seconds: float
    collective: str
    location: str
    waiting_ranks: tuple[int, ...]
    missing_ranks: tuple[int, ...]
    missing_where: Mapping[int, str]
    groups: tuple[StackGroup, ...]
    stacks: Mapping[int, str]
    flight_recorder: Mapping[int, tuple[Any, ...]] = field(default_factory=dict)
    method: str = ""
    explanation: str = ""

    def _summary_line(self) -> str:
        return f"missing ranks {list(self.missing_ranks)} in {self.collective or 'no collective'} at {self.location}"

    def _records(self) -> list[dict[str, Any]]:
        return [
            {"group": i, "rank": r, "collective": g.collective, "location": g.location, "code": g.code,
             "missing": r in self.missing_ranks}
            for i, g in enumerate(self.groups) for r in g.ranks
        ]


@dataclass(frozen=True)
class CheckRecord:
    """A cross-rank check run inside the ranks (``check_consistency``, ``check_data_order``, ...).

    ``kind`` names the check; ``result`` is what it found (``ok``, ``unsynced_init``, ``same_batches``, ...); a
    failed check is also one of the run's ``findings``.
    """

    kind: str
    ok: bool
    summary: str
    details: str = ""
    result: str = ""


@dataclass(frozen=True, repr=False)
class DistRun(HasFindings, Result):
    """The outcome of running code on N local ranks.

    Attributes
    ----------
    succeeded : bool
        Every rank exited 0 and no hang was found.  ``ok`` (the one meaning, from ``HasFindings``) is stricter:
        no error and no warning among ``findings``, which hold the failure itself and every failed check, so a
        run whose ranks all exited 0 but whose check found a problem has ``succeeded`` and is not ``ok``.
    nprocs : int
        Number of ranks.
    backend : str
        ``gloo`` or ``nccl``.
    ranks : tuple of RankResult
        One per rank, by rank.
    primary_rank : int or None
        The rank whose failure came first and caused the rest (None when the run was ok, or when every error is
        a consequence of another rank's failure and no rank can be named); decided by ``_blame``, the rule order
        the post-mortem uses too.
    primary_reason : str
        Why that rank is the primary one (or why none can be named), in words.
    hang : Hang or None
        What the watchdog found, when it fired.
    seconds : float
        Wall time of the run.
    port : int
        The TCPStore port the ranks met on.
    notes : tuple of str
        Things the user should know (a port that was taken, shipped names, interrupted run, ...).
    checks : tuple of CheckRecord
        Results of the cross-rank checks the ranks ran.
    steps : tuple of dict
        ``{"rank", "step", "seconds", "loss"}`` records sent by ``nbdebug.dist.log_step`` in the ranks.
    run_dir : str
        Folder with each rank's error file and dumps (deleted unless ``keep_files``).
    findings : tuple of Finding
        What the run shows, worst first: its failure (the primary rank, the hang, or only consequences), every
        failed check, and e.g. every rank failing with ``NameError`` (a name not shipped with ``--use``).
    diagnosis : Diagnosis or None
        The explainer's diagnosis of the primary rank's error, when it recognised it.
    """

    succeeded: bool
    nprocs: int
    backend: str
    ranks: tuple[RankResult, ...]
    primary_rank: int | None = None
    primary_reason: str = ""
    hang: Hang | None = None
    seconds: float = 0.0
    port: int = 0
    notes: tuple[str, ...] = ()
    checks: tuple[CheckRecord, ...] = ()
    steps: tuple[Mapping[str, Any], ...] = ()
    run_dir: str = ""
    findings: tuple[Finding, ...] = ()
    diagnosis: Diagnosis | None = None

    def __post_init__(self) -> None:
        # a failed run always carries its failure as a finding, unless one names it already (every rank's
        # NameError: a name not shipped), so that ok, from the findings, is never True for a run that failed, and a
        # failed check beside the crash does not hide the crash from findings and JSON
        if not self.succeeded and not any(f.kind in NAMES_THE_FAILURE for f in self.findings):
            failure = _failure_finding(self.primary_rank, self.primary_reason, self.hang,
                                       any("interrupted" in n for n in self.notes))
            object.__setattr__(self, "findings", (failure, *self.findings))

    @property
    def primary(self) -> RankResult | None:
        """The ``RankResult`` of the primary rank, or None."""
        if self.primary_rank is None:
            return None
        return self.ranks[self.primary_rank]

    @property
    def stdout(self) -> dict[int, str]:
        """Rank -> everything it printed to stdout."""
        return {r.rank: r.stdout for r in self.ranks}

    def nccl_log(self) -> NcclLog | None:
        """``parse_nccl_log`` of everything the ranks printed (run with ``env={"NCCL_DEBUG": "INFO"}``), or None."""
        from nbdebug.core.dist._nccl import parse_nccl_log

        text = "\n".join(f"{r.stdout}\n{r.stderr}" for r in self.ranks)
        return parse_nccl_log(text) if "NCCL" in text else None

    def step_report(self) -> StepReport:
        """Straggler and loss-dispersion report from the ``log_step`` records (see ``StepReport``)."""
        from nbdebug.core.dist._checks import step_report

        return step_report(self.steps, self.nprocs)

    def _summary_line(self) -> str:
        if self.succeeded:
            return f"{self.nprocs} ranks ok in {self.seconds:.1f} s"
        if self.hang is not None:
            return f"HANG: missing ranks {list(self.hang.missing_ranks)} ({self.hang.collective or 'no collective'})"
        p = self.primary
        if p is None:
            return "FAILED: " + ("only consequences were seen" if self.primary_reason else "no rank reported an error")
        return f"FAILED: rank {p.rank}: {p.error or f'exit code {p.exitcode}'}"

    def _records(self) -> list[dict[str, Any]]:
        rows = []
        for r in self.ranks:
            rows.append({
                "rank": r.rank, "pid": r.pid, "exitcode": r.exitcode, "error_kind": r.error_kind, "error": r.error,
                "primary": r.rank == self.primary_rank,
                "missing": self.hang is not None and r.rank in self.hang.missing_ranks,
                "stdout_lines": len(r.stdout.splitlines()), "stderr_lines": len(r.stderr.splitlines()),
            })
        return rows


class RunInterrupted(KeyboardInterrupt):
    """The user interrupted a distributed run: every rank was killed, and ``run`` holds what was seen.

    It is a ``KeyboardInterrupt``, so "Run All" stops as for any interrupt; ``run`` is the ``DistRun`` with each
    rank's output and, when they could be taken, the stacks where the ranks were at that moment.
    """

    def __init__(self, run: DistRun) -> None:
        super().__init__("distributed run interrupted: every rank was killed")
        self.run = run


#: the kinds of a run's own failure finding (the post-mortem gives the same kinds for the same failures)
FAILURE_KINDS = ("postmortem_primary", "hang_divergence", "postmortem_no_cause")
#: findings that say why the run failed, so that no failure finding is added beside them
NAMES_THE_FAILURE = (*FAILURE_KINDS, "name_not_shipped")


def _failure_finding(primary: int | None, reason: str, hang: Hang | None, interrupted: bool) -> Finding:
    """A failed run's failure as a finding: the primary rank, the hang, or why no rank can be named."""
    from nbdebug.core.knowledge import finding

    if primary is not None:
        return finding("postmortem_primary", reason or f"rank {primary} failed first", where=(f"rank {primary}",))
    if hang is not None:
        missing = tuple(f"rank {r}" for r in hang.missing_ranks)
        return finding("hang_divergence", reason or f"ranks {list(hang.missing_ranks)} never arrived", where=missing)
    why = "the run was interrupted before every rank finished" if interrupted else (
        reason or "ranks failed, and none can be named as the first cause")
    return finding("postmortem_no_cause", why)
