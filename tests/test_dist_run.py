"""Real multi-process runs on gloo/CPU over 127.0.0.1: a hang, an exception, mismatched shapes, unsynced seeds, a
taken port, an interrupt, a script through the CLI, and the magic.  After every test no child process remains."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from nbdebug import dist
from nbdebug.errors import DistUsageError
from tests.conftest import REPO

pytestmark = pytest.mark.timeout(120)


def _under(proc: psutil.Process, pids: set[int]) -> bool:
    """Whether ``proc`` descends from one of ``pids``: processes that existed before the test (a browser a
    session-scoped fixture keeps open starts helpers of its own at any time) are not the test's to account for."""
    try:
        return any(parent.pid in pids for parent in proc.parents())
    except psutil.Error:
        return False


@pytest.fixture(autouse=True)
def no_children_left():
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    dirs_before = set(Path(tempfile.gettempdir()).glob("nbdebug-dist-*"))
    yield
    assert set(Path(tempfile.gettempdir()).glob("nbdebug-dist-*")) <= dirs_before, "a run folder was left behind"
    deadline = time.monotonic() + 5
    while True:
        left = [p for p in psutil.Process().children(recursive=True)
                if p.pid not in before and p.is_running() and p.status() != psutil.STATUS_ZOMBIE
                and not _under(p, before)]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not left, f"processes left behind: {[(p.pid, p.cmdline()) for p in left]}"


def _line_of(source: str, needle: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if needle in line)


def scale(x):
    return 10 * x


def test_ok_run_streams_every_rank_and_ships_names():
    seen = []
    source = textwrap.dedent("""
        import torch, torch.distributed as dist
        x = torch.ones(2) * scale(dist.get_rank() + 1)
        dist.all_reduce(x)
        print("sum", x.tolist(), cfg["tag"])
    """)
    r = dist.run(source, 2, timeout=30, use="scale,cfg", namespace={"scale": scale, "cfg": {"tag": "T"}},
                 echo=lambda rank, stream, line: seen.append((rank, stream, line)))
    assert r.ok, str(r)
    assert r.primary is None and r.hang is None
    for rank in (0, 1):
        assert "sum [30.0, 30.0] T" in r.ranks[rank].stdout
        assert (rank, "stdout", "sum [30.0, 30.0] T") in seen
    assert r.port > 0 and any("scale" in n for n in r.notes)
    df = r.to_pandas()
    assert list(df["rank"]) == [0, 1] and not df["primary"].any()
    html = r._repr_html_()
    assert "2 ranks OK" in html


def test_rank_that_skips_all_reduce_is_named_with_its_line():
    timeout = 5.0
    source = textwrap.dedent("""
        import time, torch, torch.distributed as dist
        x = torch.ones(4)
        dist.all_reduce(x)
        print("hang starts", time.time(), flush=True)
        if dist.get_rank() == 1:
            time.sleep(120)          # rank 1 never reaches the all_reduce below
        dist.all_reduce(x)
    """)
    stamps = {}

    def echo(rank, stream, line):
        if line.startswith("hang starts"):
            stamps[rank] = float(line.split()[-1])

    r = dist.run(source, 2, timeout=timeout, echo=echo)
    reported = time.time()
    assert not r.ok and r.hang is not None
    assert r.hang.missing_ranks == (1,)
    assert r.hang.collective == "all_reduce" and r.hang.waiting_ranks == (0,)
    assert f"<cell>:{_line_of(source, 'time.sleep(120)')}" in r.hang.missing_where[1]
    assert f"<cell>:{_line_of(source, 'dist.all_reduce(x)') + 4}" in r.hang.location  # the second all_reduce
    assert set(r.hang.stacks) == {0, 1} and "time.sleep(120)" in r.hang.stacks[1]
    assert r.primary_rank == 1 and "never reached all_reduce" in r.primary_reason
    assert all(rank.error_kind == "killed" for rank in r.ranks)
    assert reported - min(stamps.values()) < timeout + 10
    text = str(r)
    assert "HANG" in text and "rank 1 never reached it" in text
    if r.hang.flight_recorder:  # Flight Recorder on gloo (torch >= 2.9): rank 0 issued one more collective
        assert len(r.hang.flight_recorder[0]) == len(r.hang.flight_recorder[1]) + 1


def test_hang_while_another_rank_polls_is_still_a_hang():
    # rank 0 saves a checkpoint through code that holds a collective; rank 1 polls for the file: it keeps "moving"
    source = textwrap.dedent("""
        import os, time, torch, torch.distributed as dist
        ckpt = os.path.join(os.environ["NBDEBUG_TEST_DIR"], "ckpt.pt")
        def save_checkpoint(state, path):
            stats = torch.ones(1)
            dist.all_reduce(stats)            # a collective in rank-0-only code
            torch.save(state, path)
        if dist.get_rank() == 0:
            save_checkpoint({"w": 1}, ckpt)
        else:
            while not os.path.exists(ckpt):
                time.sleep(0.05)
    """)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        r = dist.run(source, 2, timeout=4, echo=False, env={"NBDEBUG_TEST_DIR": tmp})
    assert r.hang is not None and r.hang.missing_ranks == (1,)
    assert "save_checkpoint" in r.hang.location and r.hang.collective == "all_reduce"
    assert r.hang.missing_where[1].startswith("<cell>:1")  # the polling loop (line 11 or 12)


@pytest.mark.parametrize("pyspy", [True, False], ids=["py-spy", "faulthandler"])
def test_stacks_of_a_rank_whose_gil_is_held(pyspy, monkeypatch):
    # catastrophic regex backtracking holds the GIL inside C: the in-rank dump thread cannot answer
    from nbdebug.core.dist import _supervise

    if not pyspy:
        monkeypatch.setattr(_supervise, "_find_pyspy", lambda: None)
    elif _supervise._find_pyspy() is None:
        pytest.fail("py-spy is part of the dev environment; it must be found")
    source = textwrap.dedent("""
        import re, torch, torch.distributed as dist
        if dist.get_rank() == 1:
            re.match(r"(a+)+$", "a" * 64 + "b")      # never returns in practice, GIL held
        dist.all_reduce(torch.ones(2))
    """)
    r = dist.run(source, 2, timeout=3, echo=False)
    assert r.hang is not None and r.hang.missing_ranks == (1,)
    assert ("py-spy" if pyspy else "faulthandler") in r.hang.method
    assert r.hang.missing_where[1].startswith(f"<cell>:{_line_of(source, 're.match')}")


def test_rank_with_fewer_batches_is_primary():
    source = textwrap.dedent("""
        import torch, torch.distributed as dist
        batches = 3 if dist.get_rank() == 0 else 2     # rank 1's shard has fewer batches
        for step in range(batches):
            x = torch.ones(2)
            dist.all_reduce(x)
    """)
    r = dist.run(source, 2, timeout=10, echo=False)
    assert not r.ok
    assert r.ranks[1].exitcode == 0 and r.ranks[0].error_kind == "victim"
    assert r.primary_rank == 1 and "ran fewer collectives" in r.primary_reason


def test_exception_on_one_rank_is_primary_not_the_victims():
    source = textwrap.dedent("""
        import torch, torch.distributed as dist
        def load_batch(step):
            if dist.get_rank() == 1 and step == 2:
                raise ValueError(f"corrupt sample in shard 1 at step {step}")
            return torch.ones(3)
        for step in range(4):
            x = load_batch(step)
            dist.all_reduce(x)
    """)
    r = dist.run(source, 3, timeout=20, echo=False, keep_files=True)
    try:
        assert not r.ok
        assert r.primary_rank == 1, str(r)
        assert r.primary.error == "ValueError: corrupt sample in shard 1 at step 2"
        assert r.primary.error_kind == "cause"
        assert f'File "<cell>", line {_line_of(source, "raise ValueError")}' in r.primary.traceback
        assert "_bootstrap" not in r.primary.traceback
        for victim in (0, 2):
            assert r.ranks[victim].error_kind == "victim", r.ranks[victim].error
        # torch's own error file, written by @record, for the primary rank
        with open(r.ranks[1].error_file, encoding="utf-8") as fh:
            payload = json.load(fh)
        assert payload["message"]["message"].startswith("ValueError: corrupt sample")
        assert payload["message"]["extraInfo"]["timestamp"]
    finally:
        shutil.rmtree(r.run_dir, ignore_errors=True)


def test_mismatched_shapes_without_and_with_detail():
    source = textwrap.dedent("""
        import torch, torch.distributed as dist
        x = torch.ones(10 if dist.get_rank() == 0 else 20)
        dist.all_reduce(x)
    """)
    r = dist.run(source, 2, timeout=20, echo=False)
    assert not r.ok and r.primary is not None
    assert r.primary.error_kind == "cause"
    assert "doesn't match expected size" in r.primary.error  # gloo aborts the receiving rank
    other = r.ranks[1 - r.primary_rank]
    assert other.error_kind == "victim"

    r = dist.run(source, 2, timeout=20, echo=False, detail=True)
    assert not r.ok and r.primary.error_kind == "cause"
    assert "different tensor shapes ([10] on rank 0, [20] on rank 1)" in r.primary.error_meaning
    assert "different tensor shapes" in str(r)


def test_unsynced_seeds_caught_by_check_consistency():
    source = textwrap.dedent("""
        import torch, torch.distributed as dist
        from nbdebug.dist import check_consistency
        torch.manual_seed(dist.get_rank())       # the bug: a different seed per rank
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
        report = check_consistency(model)
        print(report.kind, report.first_difference)
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
        print(check_consistency(model).kind)
    """)
    r = dist.run(source, 2, timeout=30, echo=False)
    assert r.succeeded and not r.ok, str(r)  # every rank exited 0; the failed check is an error finding
    for rank in r.ranks:
        assert rank.stdout.splitlines() == ["unsynced_init 0.weight", "ok"]
    bad = [c for c in r.checks if not c.ok]
    assert len(bad) == 1 and bad[0].kind == "check_consistency" and "0.weight" in bad[0].summary
    assert bad[0].result == "unsynced_init"
    assert [f.kind for f in r.findings] == ["unsynced_init"] and "torch.manual_seed(0)" in r.findings[0].fixes[0].code
    assert "check(s) found a problem" in str(r) and "unsynced_init" in r._repr_html_()


def test_nccl_without_enough_gpus_is_refused_up_front():
    import torch

    n = torch.cuda.device_count() + 1
    with pytest.raises(DistUsageError, match="one GPU per rank"):
        dist.run("pass", n, backend="nccl", echo=False)
    with pytest.raises(DistUsageError, match="expected one of: gloo, nccl"):
        dist.run("pass", 1, backend="mpi", echo=False)


@pytest.mark.parametrize("nprocs,timeout,match", [(0, 10, "nprocs=0"), (True, 10, "nprocs=True"),
                                                  (2, -1, "timeout=-1"), (2, "5", "timeout='5'")])
def test_bad_sizes_are_usage_errors_before_anything_starts(nprocs, timeout, match):
    with pytest.raises(DistUsageError, match=match):
        dist.run("pass", nprocs, timeout=timeout, echo=False)


def test_port_already_taken_is_never_a_failure():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = dist.run("import torch.distributed as dist\ndist.barrier()\nprint('ok')", 2, timeout=30, echo=False,
                     env={"MASTER_PORT": str(port)})
    assert r.ok, str(r)
    assert r.port != port
    assert any(f"port {port} was already in use" in n for n in r.notes)
    assert "Address already in use" not in "".join(x.stderr for x in r.ranks)


def test_keyboard_interrupt_kills_every_rank_and_reports_where_they_were():
    # one line: wherever the interrupt finds a rank (just printed, or asleep), it is on line 2
    source = "import time\nprint('working', flush=True); time.sleep(120)\n"

    working = set()

    def echo(rank, stream, line):
        if line == "working":
            working.add(rank)
            if len(working) == 2:  # both ranks are busy: the user presses Ctrl-C (Jupyter: interrupt) once
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as stop:  # the interrupt goes on (Run All stops), carrying the run
        dist.run(source, 2, timeout=60, echo=echo)
    assert isinstance(stop.value, dist.RunInterrupted)
    r = stop.value.run
    assert not r.ok
    assert any("interrupted" in n for n in r.notes)
    assert r.hang is not None and set(r.hang.stacks) == {0, 1}
    assert [g.location for g in r.hang.groups] == ["<cell>:2 in <module>"], str(r.hang)
    assert all(x.exitcode is not None for x in r.ranks)


def test_script_through_the_cli(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import torch, torch.distributed as dist
        dist.init_process_group("gloo")
        x = torch.ones(2)
        dist.all_reduce(x)
        if dist.get_rank() == 1:
            raise RuntimeError("bad shard on rank 1")
        dist.all_reduce(x)
    """))
    proc = subprocess.run(
        [sys.executable, "-m", "nbdebug", "torchrun", "-n", "2", "--timeout", "20", str(script)],
        capture_output=True, text=True, timeout=110, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Primary failure: rank 1" in proc.stdout
    assert "RuntimeError: bad shard on rank 1" in proc.stdout
    assert "[rank 0]" in proc.stdout + proc.stderr


def test_magic_through_the_shell(ip):
    from IPython.core.error import UsageError

    ip.run_cell("def double(v):\n    return 2 * v\n")
    result = ip.run_cell_magic(
        "torchrun", "-n 2 --timeout 30 -q --use double -o res",
        "import torch.distributed as dist\nprint('value', double(dist.get_rank() + 1))\n",
    )
    assert result.ok, str(result)
    assert ip.user_ns["res"] is result
    assert result.ranks[1].stdout.strip() == "value 4"
    bundle, _ = ip.display_formatter.format(result)
    assert "text/html" in bundle and "ranks OK" in bundle["text/html"]
    with pytest.raises(UsageError, match="expected KEY=VALUE"):
        ip.run_cell_magic("torchrun", "-n 2 --env NOEQUALS", "pass")
    with pytest.raises(UsageError, match="no variable 'missing'"):
        ip.run_cell_magic("torchrun", "-n 2 --use missing", "pass")
    ip.run_cell("f = lambda v: v")
    with pytest.raises(UsageError, match="lambda"):
        ip.run_cell_magic("torchrun", "-n 2 --use f", "pass")
    with pytest.raises(UsageError, match="gloo or nccl"):
        ip.run_cell_magic("torchrun", "-n 2 --backend mpi", "pass")
    with pytest.raises(UsageError, match="IPython syntax .*'!echo hi'"):
        ip.run_cell_magic("torchrun", "-n 2", "import os\n!echo hi\n")


def test_magic_returns_the_report_of_a_failed_run_and_names_unshipped_names(ip):
    ip.run_cell("threshold = 3")
    result = ip.run_cell_magic("torchrun", "-n 2 --timeout 30 -q -o failed", "print(threshold)\n")
    assert ip.user_ns["failed"] is result  # bound and returned, not raised: the errors were in the ranks
    # every rank's NameError is its own failure (a cause); under load a peer may instead fail of the Gloo connection
    # the failing rank closed (a consequence): the race tests/test_dist_writes.py makes happen on purpose
    named = [r for r in result.ranks if "NameError" in r.error]
    assert not result.ok and named and all(r.error_kind == "cause" for r in named)
    assert all(r.error_kind == "victim" for r in result.ranks if r not in named)
    (finding,) = result.findings
    assert finding.kind == "name_not_shipped" and finding.where == ("threshold",)
    assert "--use threshold" in finding.fixes[0].code
    # the finding names the failure: no answer for a Python error in the user's file beside it, pointing at the line
    assert result.diagnosis is None
    bundle, _ = ip.display_formatter.format(result)
    html = bundle["text/html"]
    assert "FAILED — rank" in html and "NameError: name" in html and "--use threshold" in html
    assert "fresh Python process" in str(result)


def test_ranks_end_when_the_launcher_dies():
    # the kernel is killed (or restarted) while ranks run: they must not outlive it
    code = textwrap.dedent("""
        import nbdebug.dist as d
        d.run("import os, time\\nprint('pid', os.getpid(), flush=True)\\ntime.sleep(300)", 2, timeout=300)
    """)
    run_dirs_before = set(Path(tempfile.gettempdir()).glob("nbdebug-dist-*"))
    launcher = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=REPO,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
    pids = []
    try:
        deadline = time.monotonic() + 90
        while len(pids) < 2 and time.monotonic() < deadline:
            line = launcher.stdout.readline()
            if " pid " in line:
                pids.append(int(line.split()[-1]))
    finally:
        launcher.kill()
        launcher.wait()
    assert len(pids) == 2
    deadline = time.monotonic() + 10
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.2)
    for pid in alive:  # do not leave them behind even when the test fails
        os.kill(pid, 9)
    assert not alive, f"ranks {alive} outlived their launcher"
    assert run_dirs_before == set(Path(tempfile.gettempdir()).glob("nbdebug-dist-*")), "run folder left behind"



def test_torchrun_magic_shows_what_was_seen_then_stops_on_an_interrupt(ip, monkeypatch):
    from IPython.utils.capture import capture_output

    import nbdebug.core.dist as core_dist

    real = core_dist.run
    working = set()

    def echo(rank, stream, line):
        if line == "working":
            working.add(rank)
            if len(working) == 2:
                raise KeyboardInterrupt  # the user presses "interrupt the kernel"

    monkeypatch.setattr(core_dist, "run", lambda *a, **k: real(*a, **{**k, "echo": echo}))
    with capture_output() as out:
        result = ip.run_cell("%%torchrun -n 2 --timeout 60 -o interrupted_run\n"
                             "import time\nprint('working', flush=True); time.sleep(120)\n")
    assert isinstance(result.error_in_exec, KeyboardInterrupt)  # Run All stops here
    run = ip.user_ns["interrupted_run"]
    assert not run.ok and any("interrupted" in n for n in run.notes)
    assert any("DistRun" in o.data.get("text/plain", "") or "rank" in o.data.get("text/plain", "")
               for o in out.outputs)


def test_a_rank_that_aborts_shows_its_crash_dump_once_without_nbdebugs_threads():
    # issue 26, item 13: gloo's abort made Python's fatal-error handler stream every thread's stack (nbdebug's own
    # control and sampler threads, the launcher's frames, the extension modules) into the cell, and again into the
    # report's output
    source = textwrap.dedent("""
        import torch, torch.distributed as dist
        x = torch.ones(10 if dist.get_rank() == 0 else 20)
        dist.all_reduce(x)
    """)
    streamed: list[str] = []
    r = dist.run(source, 2, timeout=20, echo=lambda rank, stream, line: streamed.append(f"[rank {rank}] {line}"))
    aborted = next(x for x in r.ranks if "Fatal Python error" in x.stderr)  # the rank gloo aborted
    assert "Thread 0x" in aborted.stderr  # the dump is kept whole in the result...
    live = "\n".join(streamed)
    fatal = [ln for ln in streamed if "Fatal Python error" in ln]
    assert len(fatal) == 1 and "report below" in fatal[0], fatal
    for internal in ("Thread 0x", "_bootstrap.py", "threading.py", "Extension modules", "runpy"):
        assert internal not in live, (internal, live)  # ...but not streamed
    html = r._repr_mimebundle_()["text/html"]
    for internal in ("_bootstrap.py", "threading.py", "Extension modules", "runpy"):
        assert internal not in html, internal
    assert html.count("in all_reduce") >= 1  # the user's part: where the main thread was
    # the title and the verdict give the error's words, not torch's build path ("[enforce fail at
    # /__w/pytorch/.../pair.cc:456] ..."); tracebacks and the ranks' output below stay verbatim
    head = html.split("<pre", 1)[0]
    assert "Received data size doesn&#x27;t match" in head and "third_party/gloo" not in head, head[-2000:]
