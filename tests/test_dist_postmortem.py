"""Post-mortem of real jobs: four 4-rank gloo jobs under real torchrun on 127.0.0.1, each with one faulty rank
(skips a collective, mismatched size, raises, exits), every rank calling ``nbdebug.dist.instrument()``.  The jobs
run once per module (in parallel); every test reads what they left.  A 1,024-rank folder is built from the
real dumps by relabelling ranks and hosts (tests/dist_scale.py)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from nbdebug import dist
from nbdebug.errors import DistUsageError, NbdebugError
from tests.conftest import REPO

pytestmark = pytest.mark.timeout(240)

JOB = REPO / "tests" / "data" / "dist" / "faulty_job.py"
SCENARIOS = ("skip", "size", "raise", "exit")


def _line(needle: str) -> int:
    return next(i for i, ln in enumerate(JOB.read_text().splitlines(), 1) if needle in ln)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    root = tmp_path_factory.mktemp("jobs")
    procs = {}
    for mode in SCENARIOS:
        folder = root / mode
        folder.mkdir()
        env = {**os.environ, "ARTIFACTS": str(folder), "MODE": mode, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
               "PG_TIMEOUT": "12", "HANG_AFTER": "3", "SKIP_SLEEP": "120"}
        log = open(folder / "torchrun.log", "w")  # noqa: SIM115  (closed below)
        procs[mode] = (subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4", str(JOB)],
            env=env, stdout=log, stderr=subprocess.STDOUT, cwd=root, start_new_session=True), log)
    try:
        deadline = time.monotonic() + 200
        for proc, log in procs.values():
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            log.close()
    finally:
        for proc, log in procs.values():
            if proc.poll() is None:  # only the launchers these tests started, and their ranks
                os.killpg(proc.pid, 9)
                proc.wait()
            log.close()
    return {mode: root / mode for mode in SCENARIOS}


def test_a_rank_that_skips_a_collective_is_named_with_its_line(jobs):
    pm = dist.postmortem(jobs["skip"])
    assert pm.primary_rank == 1
    d = pm.divergence
    assert d is not None and d.seq == 4 and "all_reduce" in d.op
    assert d.missing == (1,) and d.entered == (0, 2, 3)
    assert f"faulty_job.py:{_line('time.sleep')}" in d.missing_where[1]  # from its stack dump
    assert "thread 0x" in d.missing_stack[1].lower() and "_instrument.py" not in d.missing_stack[1]
    fourth = next(i for i, ln in enumerate(JOB.read_text().splitlines(), 1) if ln == "dist.all_reduce(grad)")
    assert f"faulty_job.py:{fourth}" in d.entered_where
    assert set(pm.consequences) == {0, 2, 3}
    assert pm.diagnosis is None  # the culprit raised nothing: it was elsewhere
    states = pm.by_state()
    assert states["primary"] == (1,)
    assert {f.kind for f in pm.findings} >= {"postmortem_primary", "hang_divergence"}


def test_a_mismatched_size_names_the_odd_rank_not_the_one_that_aborted(jobs):
    pm = dist.postmortem(jobs["size"])
    m = pm.mismatches[0]
    assert m.seq == 4 and m.field == "sizes" and m.culprits == (1,)
    assert m.groups["[[9]]"] == (1,)
    assert pm.primary_rank == 1
    assert "[[9]]" in pm.primary_reason and "sizes" in pm.primary_reason


def test_a_rank_that_raises_is_primary_with_the_explainers_diagnosis(jobs):
    pm = dist.postmortem(jobs["raise"])
    assert pm.primary_rank == 1
    assert "Target 12 is out of bounds" in pm.primary_reason
    assert pm.diagnosis is not None and pm.diagnosis.kind == "target_out_of_bounds"
    # "Connection closed by peer" (or, on a loaded machine, gloo's own timeout): victims, not causes
    assert {0, 2} <= set(pm.consequences)
    victims = [r for r in pm.ranks if r.rank in (0, 2)]
    assert all(r.state == "consequence" and dist.classify(r.error)[0] == "victim" for r in victims), victims
    row = next(r for r in pm.ranks if r.rank == 1)
    assert f"faulty_job.py:{_line('loss = F.cross_entropy')}" in row.where


def test_a_rank_that_exits_is_primary(jobs):
    pm = dist.postmortem(jobs["exit"])
    assert pm.primary_rank == 1
    assert "exit" in pm.primary_reason and "code 3" in pm.primary_reason
    assert pm.divergence is not None and 1 in pm.divergence.missing


def test_ranks_are_matched_across_files_and_hosts_named(jobs):
    pm = dist.postmortem(jobs["skip"])
    assert pm.world_size == 4
    host = socket.gethostname()
    assert [h.host for h in pm.hosts] == [host] and pm.hosts[0].ranks == (0, 1, 2, 3)
    assert not pm.bad_hosts  # one host: nothing to stand out from
    for r in pm.ranks:
        assert {"flight_recorder", "stacks", "log"} <= set(r.artifacts), r
    assert pm.files["flight_recorder"] == 4 and pm.files["launcher_summary"] == 1
    df = pm.to_pandas()
    assert list(df["rank"]) == [0, 1, 2, 3] and set(df["state"]) == {"primary", "consequence"}


def test_files_are_recognised_by_content_not_by_name(jobs, tmp_path):
    # every file under a meaningless name: error files, stacks and logs say their rank themselves; Flight Recorder
    # dumps carry it only in their name (as for fr_trace), so they keep a rank-numbered name
    for i, f in enumerate(sorted(jobs["raise"].iterdir())):
        name = f"artifact{i:02d}.dat" if not f.name.startswith("fr_rank_") else f"dump_rank{f.name[8:]}"
        shutil.copy(f, tmp_path / name)
    a, b = dist.postmortem(jobs["raise"]), dist.postmortem(tmp_path)
    assert (b.primary_rank, b.consequences, b.diagnosis.kind) == (a.primary_rank, a.consequences,
                                                                    a.diagnosis.kind)
    assert b.files == a.files


def test_text_html_and_cli(jobs):
    pm = dist.postmortem(jobs["skip"])
    text = str(pm)
    assert "hang at collective #4: rank(s) 1 never arrived" in text and "never by rank(s) 1" in text and "Ranks by state" in text
    html = pm._repr_mimebundle_()["text/html"]
    assert "Ranks by state" in html and "<script" not in html
    out = subprocess.run([sys.executable, "-m", "nbdebug", "postmortem", str(jobs["skip"]), "--json"],
                         capture_output=True, text=True, cwd=REPO, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 1, out.stderr
    data = json.loads(out.stdout)
    assert data["primary_rank"] == 1 and data["divergence"]["missing"] == [1]
    bad = subprocess.run([sys.executable, "-m", "nbdebug", "postmortem", str(jobs["skip"] / "nope")],
                         capture_output=True, text=True, cwd=REPO, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert bad.returncode == 1 and "does not exist" in bad.stderr and "Traceback" not in bad.stderr


def test_several_paths_and_globs(jobs):
    one = dist.postmortem(jobs["raise"])
    parts = dist.postmortem([str(p) for p in sorted(jobs["raise"].iterdir())])
    glob = dist.postmortem(str(jobs["raise"] / "*"))
    assert one.primary_rank == parts.primary_rank == glob.primary_rank == 1


def test_1024_ranks_relabelled_from_real_dumps_name_the_bad_node(jobs, tmp_path):
    from tests.dist_scale import build_scaled

    info = build_scaled(jobs["skip"], tmp_path, 1024, ranks_per_host=8, bad_host=5)
    pm = dist.postmortem(tmp_path)
    assert pm.world_size == 1024
    assert pm.divergence is not None and pm.divergence.missing == tuple(info["bad_ranks"])
    assert pm.bad_hosts == (info["bad_host"],)
    assert pm.primary_rank == info["bad_ranks"][0]
    assert len(pm.hosts) == 128
    html = pm._repr_mimebundle_()["text/html"]
    assert html.count("<tr") < 60  # ranks grouped, never one row each


@pytest.mark.parametrize("make", ["missing", "empty", "junk", "bytes"])
def test_bad_input_is_one_clear_error(tmp_path, make):
    if make == "missing":
        arg = tmp_path / "does-not-exist"
    elif make == "empty":
        arg = tmp_path
    elif make == "junk":
        (tmp_path / "a.bin").write_bytes(b"\x00\x01garbage")
        (tmp_path / "b.txt").write_text("hello\n")
        (tmp_path / "fr_rank_0").write_bytes(b"\x80\x04corrupt")
        arg = tmp_path
    else:
        arg = b"/tmp"
    with pytest.raises(DistUsageError) as e:
        dist.postmortem(arg)
    assert isinstance(e.value, NbdebugError)
    assert "expected" in str(e.value)


def test_a_pickle_with_a_global_is_refused_never_run(tmp_path):
    import pickle

    class Boom:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "pwned"),))

    (tmp_path / "fr_rank_0").write_bytes(pickle.dumps({"entries": [Boom()], "pg_config": {}}))
    (tmp_path / "error_rank0.json").write_text(json.dumps({"message": "RuntimeError: boom"}))
    pm = dist.postmortem(tmp_path)
    assert not (tmp_path / "pwned").exists()
    assert any("asks for the global" in n and "system" in n for n in pm.notes), pm.notes
    assert pm.primary_rank == 0


INSTRUMENTED = """
import os, signal, sys, time
import nbdebug.dist as d
info = d.instrument(sys.argv[1], hang_after=1)
assert d.instrument(sys.argv[1]) is info  # a second call is the first one
print("hello from the rank", flush=True)
print("env", os.environ["TORCH_FR_BUFFER_SIZE"], os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"], flush=True)
os.kill(os.getpid(), signal.SIGUSR1)
time.sleep(2)  # the watcher sees a stall of 1 s

class Odd(Exception):
    def __str__(self):
        raise KeyboardInterrupt

if sys.argv[2] == "odd":
    raise Odd()
raise ValueError("labels out of range")
"""


@pytest.mark.parametrize("kind", ["plain", "odd"])
def test_instrument_leaves_torch_formats_and_never_hides_the_users_error(tmp_path, kind):
    script = tmp_path / "train.py"
    script.write_text(INSTRUMENTED)
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "art"), kind], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": str(REPO), "RANK": "3", "WORLD_SIZE": "4"})
    assert out.returncode == 1
    assert ("ValueError: labels out of range" if kind == "plain" else "Odd") in out.stderr  # the user's traceback
    art = tmp_path / "art"
    err = json.loads((art / "error_rank3.json").read_text())
    assert set(err["message"]) == {"message", "extraInfo"}  # torchelastic's format
    assert err["nbdebug"]["rank"] == 3 and "py_callstack" in err["message"]["extraInfo"]
    log = (art / "rank3.log").read_text().splitlines()
    assert "[rank3]:hello from the rank" in log and all(ln.startswith("[rank3]:") for ln in log if ln)
    stacks = (art / "stacks_rank3.txt").read_text()
    assert stacks.count("most recent call first") >= 2  # SIGUSR1, then the stall
    assert "has not moved for" in stacks
    pm = dist.postmortem(art)
    assert pm.primary_rank == 3 and pm.world_size == 4
    if kind == "plain":
        assert "labels out of range" in pm.primary_reason


def test_instrument_refuses_bad_arguments(tmp_path):
    from nbdebug.errors import InvalidArgumentError

    for bad in ({"hang_after": 0}, {"hang_after": "1"}, {"fr_buffer": -1}):
        with pytest.raises(InvalidArgumentError):
            dist.instrument(tmp_path, **bad)
    (tmp_path / "file").write_text("")
    with pytest.raises(InvalidArgumentError, match="cannot create"):
        dist.instrument(tmp_path / "file" / "sub")


def test_a_node_with_network_errors_in_its_nccl_log_is_named(jobs, tmp_path):
    from tests.dist_scale import build_scaled

    build_scaled(jobs["raise"], tmp_path, 64, ranks_per_host=8, bad_host=2)  # ranks 16-23 all raise
    # NCCL_DEBUG_FILE=nccl_%h_%p.log of rank 48 on node0006: its init line names the rank, then IB fails
    (tmp_path / "nccl_node0006_100048.log").write_text(
        "node0006:100048:100100 [0] NCCL INFO comm 0x55d0c0 rank 48 nranks 64 cudaDev 0 busId 1b000 - Init COMPLETE\n"
        "node0006:100048:100112 [0] NCCL WARN NET/IB : Got completion from peer 10.1.0.7<40718> with error 12, "
        "opcode 0, len 0, vendor err 129 (Recv)\n")
    pm = dist.postmortem(tmp_path)
    bad = {h.host: h.reason for h in pm.hosts if h.bad}
    assert pm.world_size == 64 and set(bad) == {"node0002", "node0006"}
    assert "all 8 of its ranks" in bad["node0002"] and "NET/IB" in bad["node0006"]
    assert pm.primary_rank == 16
    assert any(f.kind == "bad_node" for f in pm.findings)
    assert "Bad node: node0006" in str(pm)


def test_real_nccl_watchdog_logs_alone():
    # two public logs (sources on their first line): only NCCL watchdog timeouts, all at the same SeqNum
    from nbdebug import examples

    pm = dist.postmortem(examples.path("dist/watchdog_timeout.log"))
    assert not pm.ok and pm.primary_rank is None and pm.divergence is None
    assert set(pm.by_state()["consequence"]) == {0, 1, 2}
    assert "left no error here" in pm.primary_reason
    assert any(f.kind == "postmortem_no_cause" for f in pm.findings)
    assert "TORCH_FR_BUFFER_SIZE" in {k for k, _, _ in pm.next_time}
    prefixed = dist.postmortem(examples.path("errors/nccl_timeout__interleaved_llamafactory.txt"))  # "[80746] [rank0]:"
    assert prefixed.by_state()["consequence"] == (0, 4)


def test_ranks_timing_out_at_different_seqnums_diverge(tmp_path):
    from nbdebug import examples

    text = examples.path("dist/watchdog_timeout.log").read_text()
    # rank 2 stuck one collective earlier than its peers (the log relabelled: one SeqNum changed)
    text = text.replace("[Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=808",
                        "[Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=807")
    (tmp_path / "job.err").write_text(text)
    pm = dist.postmortem(tmp_path)
    assert pm.divergence is not None and pm.divergence.seq == 808
    assert pm.divergence.missing == (2,) and pm.divergence.entered == (0, 1)
    assert pm.primary_rank == 2


def test_postmortem_magic(ip):
    from IPython.utils.capture import capture_output

    from nbdebug import examples

    folder = examples.folder("dist/postmortem_crash")
    pm = ip.run_line_magic("postmortem", f"{folder} -o crash_pm")
    assert pm.primary_rank == 1 and ip.user_ns["crash_pm"] is pm
    assert "rank 1 failed first" in ip.display_formatter.format(pm)[0]["text/html"]
    with capture_output() as out:
        result = ip.run_cell(f"%postmortem {folder / 'nope'}")
    assert result.error_in_exec is not None and "does not exist" in str(result.error_in_exec)
    assert "Traceback" not in out.stdout + out.stderr  # a UsageError: one line
