"""One rank verdict: the launcher (``%%torchrun``) and the post-mortem name the same primary rank, for the same
reason in the same words, when they are given the same evidence; and ``blame``'s rule order, rule by rule."""

from __future__ import annotations

import pytest

from nbdebug.core.dist._artifacts import Collected, RankEvidence
from nbdebug.core.dist._blame import Mismatch, RankRow, Stall, blame, read_error
from nbdebug.core.dist._postmortem import _analyse
from nbdebug.core.dist._types import RankResult
from nbdebug.core.dist._verdict import pick_primary

T0 = 1_700_000_000.0
CAUSE = "ValueError: corrupt sample in shard 1 at step 2"
CLOSED = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:1234"
BARRIER = "RuntimeError: Rank 2 failed to pass monitoredBarrier in 30000 ms"

# rank -> (error, seconds after T0, exit code): what each rank left, as both engines read it
SCENARIOS = {
    "one cause, two consequences": {0: (CLOSED, 0.30, 1), 1: (CAUSE, 0.10, 1), 2: (CLOSED, 0.20, 1)},
    "a cause after a consequence": {0: (CLOSED, 0.10, 1), 1: (CAUSE, 0.35, 1), 2: ("", None, -15)},
    "two causes": {0: ("RuntimeError: CUDA error: an illegal memory access", 0.50, 1), 1: (CAUSE, 0.20, 1),
                   2: (CLOSED, 0.60, 1)},
    "only consequences": {0: (CLOSED, 0.20, 1), 1: (CLOSED, 0.10, 1), 2: ("", None, -15)},
    "a consequence names the culprit": {0: (BARRIER, 0.10, 1), 1: (CLOSED, 0.20, 1), 2: ("", None, -9)},
}


def _launcher(scenario: dict[int, tuple[str, float | None, int]]) -> tuple[int | None, str]:
    ranks = []
    for r, (error, dt, code) in sorted(scenario.items()):
        role, what, _ = read_error(error) if error else ("", "", None)  # what _verdict._rank_result does
        ranks.append(RankResult(rank=r, pid=100 + r, exitcode=code, error=error, error_kind=role, error_meaning=what,
                                error_time=T0 + dt if dt is not None else None, ended_at=T0 + 1.0))
    return pick_primary(ranks, None)


def _postmortem(scenario: dict[int, tuple[str, float | None, int]]) -> tuple[int | None, str]:
    c = Collected()
    for r, (error, dt, code) in scenario.items():
        ev = c.ranks[r] = RankEvidence(rank=r, exitcode=code, world_size=len(scenario), kinds={"error_file"})
        if error:
            ev.errors.append((T0 + dt if dt is not None else None, error, "", f"error_rank{r}.json"))
    pm = _analyse(("job",), c)
    return pm.primary_rank, pm.primary_reason


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_launcher_and_the_postmortem_give_one_verdict(name):
    launcher, postmortem = _launcher(SCENARIOS[name]), _postmortem(SCENARIOS[name])
    assert launcher == postmortem
    expected = {"one cause, two consequences": 1, "a cause after a consequence": 1, "two causes": 1,
                "only consequences": None, "a consequence names the culprit": 2}[name]
    assert launcher[0] == expected and launcher[1]


def test_the_shared_words():
    rank, reason = _launcher(SCENARIOS["one cause, two consequences"])
    assert reason.startswith(f"rank 1 failed first: {CAUSE}") and "then ranks 0, 2 failed as a consequence" in reason
    assert "at +0.25 s after the first error" in _launcher(SCENARIOS["a cause after a consequence"])[1]
    assert "also failed on their own: rank(s) 0" in _launcher(SCENARIOS["two causes"])[1]
    assert "left no error here" in _launcher(SCENARIOS["only consequences"])[1]
    assert "rank 0's error names rank 2 as the one that never arrived" in \
        _launcher(SCENARIOS["a consequence names the culprit"])[1]


def _row(rank, role="", error="", t=None, code=1, ended=None):
    return RankRow(rank=rank, role=role, error=error, error_time=t, exitcode=code, ended_at=ended)


def test_the_rule_order():
    stall = Stall(missing=(1,), entered=(0, 2), op="all_reduce", where={1: "train.py:12 in step"})
    odd = Mismatch(seq=4, process_group="0", field="sizes", expected="[[8]]", groups={"[[8]]": (0, 2), "[[9]]": (1,)},
                   culprits=(1,))
    tie = Mismatch(seq=4, process_group="0", field="op", expected="", groups={"a": (0,), "b": (1,)}, culprits=())
    cause = [_row(0, "victim", CLOSED, 2.0), _row(2, "cause", CAUSE, 3.0), _row(1, code=None)]
    # 1. mismatch beats a cause
    v = blame(cause, world_size=3, stall=stall, mismatches=[odd])
    assert (v.rank, v.rule) == (1, "mismatch") and "[[9]]" in v.reason and "sizes" in v.reason
    # 2. a cause beats a stall
    v = blame(cause, world_size=3, stall=stall)
    assert (v.rank, v.rule) == (2, "cause")
    # 3. a rank that exited without an error beats a stall
    exited = [_row(0, "victim", CLOSED, 2.0), _row(1, code=3), _row(2, code=None)]
    v = blame(exited, world_size=3, stall=stall)
    assert (v.rank, v.rule) == (1, "exited") and "exit code 3" in v.reason and "ran fewer collectives" in v.reason
    early = [_row(0, "victim", CLOSED, 2.0), _row(1, code=0, ended=1.0)]
    assert blame(early, world_size=2).rule == "exited"
    late = [_row(0, "victim", CLOSED, 2.0), _row(1, code=0, ended=3.0)]
    assert blame(late, world_size=2).rule == "victims"
    # 4. a stall: the rank that never arrived
    v = blame([_row(0, "killed"), _row(1, "killed"), _row(2, "killed")], world_size=3, stall=stall)
    assert (v.rank, v.rule) == (1, "stall")
    assert v.reason == "rank 1 never reached all_reduce that ranks 0, 2 waited in; rank 1: train.py:12 in step"
    # 5. a consequence naming the culprit; 6. a tie; 7. only consequences
    named = [RankRow(rank=0, role="victim", error=BARRIER, culprit=2), _row(1, code=None), _row(2, code=None)]
    assert (blame(named, world_size=3).rank, blame(named, world_size=3).rule) == (2, "named")
    assert blame(named[:1], world_size=2).rule == "victims"  # rank 2 is not in a 2-rank job
    v = blame([_row(0, "victim", CLOSED, 1.0)], world_size=2, mismatches=[tie])
    assert (v.rank, v.rule) == (None, "tie") and "cannot be told" in v.reason
    assert blame([_row(0, code=0), _row(1, code=0)], world_size=2) == blame([], world_size=2)
    assert blame([], world_size=2).reason == ""


def test_a_run_with_only_consequences_says_so():
    from nbdebug.core.dist._types import DistRun

    scenario = SCENARIOS["only consequences"]
    ranks = tuple(RankResult(rank=r, pid=r, exitcode=code, error=error, error_kind=read_error(error)[0] if error else "",
                             error_time=T0 + dt if dt is not None else None)
                  for r, (error, dt, code) in sorted(scenario.items()))
    primary, reason = pick_primary(ranks, None)
    run = DistRun(succeeded=False, nprocs=3, backend="gloo", ranks=ranks, primary_rank=primary, primary_reason=reason)
    assert "Primary failure: not found" in str(run) and "left no error here" in str(run)
    assert "only consequences were seen" in run._repr_html_() and "only consequences" in repr(run)
