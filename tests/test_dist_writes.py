"""What the distributed package writes and reads at the file boundary, and the rank race of the "forget --use" cell.

- ``instrument()`` writes predictable per-rank names in a folder that may be shared: a symlink planted at any of
  them is replaced (whole files) or refused and replaced (files kept open), never written through;
- the launcher reads a rank's torch error file bounded, as a regular file only, never through a symlink;
- a peer's Gloo connection error that is stamped before rank 1's ``NameError`` does not hide the finding, and the
  rank with its own error is primary: at the verdict level (deterministic) and in real runs under a CPU hog.

Every subprocess has a timeout; the CPU hogs are killed by the test that starts them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from nbdebug import dist
from tests.conftest import REPO

FAILING_RANK = """
import sys
import torch  # so that the Flight Recorder dump is attempted too
import nbdebug.dist as d
d.instrument(sys.argv[1], hang_after=30)
print("hello from the rank", flush=True)
raise ValueError("labels out of range")
"""

NAMES = ("fr_rank_3", "error_rank3.json", "stacks_rank3.txt", "rank3.log")


def _run_rank(tmp_path: Path, art: Path) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "train.py"
    script.write_text(FAILING_RANK)
    return subprocess.run([sys.executable, str(script), str(art)], capture_output=True, text=True, timeout=90,
                          env={**os.environ, "PYTHONPATH": str(REPO), "RANK": "3", "WORLD_SIZE": "4"})


@pytest.mark.timeout(120)
def test_a_failing_rank_never_writes_through_a_symlink_planted_at_its_files(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    os.chmod(victim, 0o644)
    art = tmp_path / "art"
    art.mkdir()
    for name in NAMES:
        (art / name).symlink_to(victim)
    out = _run_rank(tmp_path, art)
    assert out.returncode == 1 and "ValueError: labels out of range" in out.stderr  # the user's error, untouched
    assert victim.read_text() == "precious\n"
    for name in ("error_rank3.json", "stacks_rank3.txt", "rank3.log"):  # replaced by regular files of its own
        assert not (art / name).is_symlink(), name
    err = json.loads((art / "error_rank3.json").read_text())
    assert "labels out of range" in err["message"]["message"]
    assert "[rank3]:hello from the rank" in (art / "rank3.log").read_text().splitlines()
    assert "instrumented" in (art / "stacks_rank3.txt").read_text()
    assert not [p.name for p in art.iterdir() if p.name.endswith(".tmp")]  # no temporary file left behind


@pytest.mark.timeout(120)
def test_a_failing_rank_still_writes_its_files_in_a_plain_folder(tmp_path):
    art = tmp_path / "art"
    out = _run_rank(tmp_path, art)
    assert out.returncode == 1
    for name in ("error_rank3.json", "stacks_rank3.txt", "rank3.log"):
        assert (art / name).is_file() and not (art / name).is_symlink()
    assert json.loads((art / "error_rank3.json").read_text())["nbdebug"]["rank"] == 3
    pm = dist.postmortem(art)
    assert pm.primary_rank == 3 and "labels out of range" in pm.primary_reason


def _session(run_dir: Path) -> tuple[SimpleNamespace, SimpleNamespace]:
    proc = SimpleNamespace(returncode=1, pid=123)
    rank = SimpleNamespace(rank=0, proc=proc, exc=None, stderr=["boom"], stdout=[], killed=False, exit_time=1.0,
                           finished_t=None)
    session = SimpleNamespace(run_dir=str(run_dir), interrupted=False, _rename=lambda text: text)
    return session, rank


def _rank_result_bounded(session: SimpleNamespace, rank: SimpleNamespace) -> object:
    from nbdebug.core.dist._verdict import _rank_result

    got: list[object] = []
    worker = threading.Thread(target=lambda: got.append(_rank_result(session, rank)), daemon=True)  # type: ignore[arg-type]
    worker.start()
    worker.join(10)
    assert got, "reading the rank's error file did not end in 10 s"
    return got[0]


@pytest.mark.timeout(60)
def test_the_launcher_reads_a_ranks_error_file_never_through_a_symlink_nor_from_a_fifo(tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"message": {"message": "RuntimeError: SECRET", "extraInfo": {}}}))
    run_dir = tmp_path / "run"
    (run_dir / "rank_0").mkdir(parents=True)
    error = run_dir / "rank_0" / "error.json"
    error.symlink_to(secret)
    session, rank = _session(run_dir)
    result = _rank_result_bounded(session, rank)
    assert "SECRET" not in str(result.error)  # type: ignore[attr-defined]
    error.unlink()
    os.mkfifo(error)  # a FIFO nobody writes: a plain open() blocks forever
    result = _rank_result_bounded(session, rank)
    assert result.exitcode == 1  # type: ignore[attr-defined]
    error.unlink()
    error.write_text(json.dumps({"message": {"message": "ValueError: real", "extraInfo": {"timestamp": "5"}}}))
    result = _rank_result_bounded(session, rank)
    assert result.error == "ValueError: real" and result.error_time == 5.0  # type: ignore[attr-defined]


# the message a peer gets when rank 1 raises and exits while the peer is still connecting (seen under a CPU hog)
GLOO_PEER = ("RuntimeError: Gloo connectFullMesh failed with [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/"
             "tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:23456")
NAME_ERROR = "NameError: name 'make_batch' is not defined"


def _raced(peer_time: float, own_time: float) -> list:
    from nbdebug.core.dist._blame import read_error
    from nbdebug.core.dist._types import RankResult

    rows = []
    for rank, error, t in ((0, GLOO_PEER, peer_time), (1, NAME_ERROR, own_time)):
        kind, what, _ = read_error(error)
        rows.append(RankResult(rank=rank, pid=100 + rank, exitcode=1, error=error, error_time=t, error_kind=kind,
                               error_meaning=what, ended_at=t + 0.01))
    return rows


@pytest.mark.parametrize("peer_first", [True, False])
def test_a_peers_connection_error_racing_a_name_error_keeps_the_finding_and_the_primary(peer_first):
    from nbdebug.core.dist._blame import blame
    from nbdebug.core.dist._verdict import _name_errors, pick_primary, rank_rows

    ranks = _raced(100.0, 100.4) if peer_first else _raced(100.4, 100.0)
    assert [r.error_kind for r in ranks] == ["victim", "cause"]
    (f,) = _name_errors(ranks)
    assert f.kind == "name_not_shipped" and f.where == ("make_batch",)
    assert "--use make_batch" in f.fixes[0].code and "fresh Python process" in f.message
    assert "rank(s) 1 failed with NameError" in f.message and "rank(s) 0 as a consequence" in f.message
    primary, reason = pick_primary(ranks, None)
    assert primary == 1 and "NameError" in reason
    verdict = blame(rank_rows(ranks), world_size=2)
    assert verdict.rule == "cause" and verdict.causes == (1,) and verdict.victims == (0,)


def test_own_failures_needs_every_rank_failed():
    from nbdebug.core.dist._blame import RankRow, own_failures

    assert own_failures([RankRow(0, "cause", NAME_ERROR), RankRow(1)]) == ()  # rank 1 ended without an error
    assert own_failures([RankRow(0, "cause", NAME_ERROR), RankRow(1, "killed", "killed")]) == ()
    assert own_failures([RankRow(0, "victim", GLOO_PEER), RankRow(1, "victim", GLOO_PEER)]) == ()
    later, earlier = RankRow(0, "cause", NAME_ERROR, 2.0), RankRow(1, "cause", NAME_ERROR, 1.0)
    assert own_failures([later, earlier]) == (earlier, later)


def _hogs(n: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 90\nwhile time.time() < end: pass"])
            for _ in range(n)]


@pytest.mark.timeout(90)
def test_the_forget_use_cell_names_the_missing_name_under_a_cpu_hog():
    hogs = _hogs(max(2, min(4, os.cpu_count() or 2)))  # each ends by itself after 90 s, and is killed below
    t0 = time.monotonic()
    try:
        for attempt in range(4):
            run = dist.run("import torch.distributed as dist\nx = make_batch(dist.get_rank())\n", 2, timeout=20,
                           echo=False)
            assert not run.ok
            assert run.findings and run.findings[0].kind == "name_not_shipped", (attempt, str(run))
            assert "--use make_batch" in run.findings[0].fixes[0].code
            assert run.primary is not None and "NameError" in run.primary.error, (attempt, str(run))
            if time.monotonic() - t0 > 40:  # a slow machine: fewer tries, still bounded
                break
    finally:
        for h in hogs:
            h.kill()
        for h in hogs:
            h.wait(10)
