"""The local runner leaves nothing behind: a rank's own children (``os.fork``, ``subprocess``) end with the run,
whether it ends normally, the launcher gets SIGTERM, or the launcher is SIGKILLed; and no run folder remains.

Real processes on 127.0.0.1 (gloo); every wait is bounded; only PIDs started by these tests are ever killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from nbdebug import dist
from tests.conftest import REPO

pytestmark = pytest.mark.timeout(120)

# each rank forks a child and starts a subprocess, both of which would sleep for five minutes
SPAWN = textwrap.dedent("""
    import os, subprocess, sys, time
    pid = os.fork()
    if pid == 0:
        time.sleep(300)
        os._exit(0)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    print("children", os.getpid(), pid, child.pid, flush=True)
""")


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    left = _alive(pids)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = _alive(pids)
    return left


def _kill(pids: list[int]) -> None:
    for pid in _alive(pids):  # only processes these tests started, so that a failing test leaves nothing either
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _run_dirs() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("nbdebug-dist-*"))


def test_children_of_ranks_end_with_a_normal_run():
    before = _run_dirs()
    lines: list[str] = []
    result = dist.run(SPAWN, 2, timeout=60, echo=lambda rank, stream, line: lines.append(line))
    pids = [int(p) for ln in lines if ln.startswith("children") for p in ln.split()[1:]]
    try:
        assert result.ok, str(result)
        assert len(pids) == 6  # 2 ranks, each with a forked child and a subprocess
        assert not _wait_gone(pids, 5), "a rank's child outlived the run"
        assert _run_dirs() <= before
    finally:
        _kill(pids)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_children_of_ranks_end_when_the_launcher_is_signalled(sig):
    code = f"import nbdebug.dist as d\nd.run({SPAWN + 'time.sleep(300)'!r}, 2, timeout=300)\n"
    before = _run_dirs()
    launcher = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=REPO,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 90
        while len(pids) < 6 and time.monotonic() < deadline:
            line = launcher.stdout.readline()
            if not line:
                break
            if "children" in line:
                pids += [int(p) for p in line.split()[-3:]]
        assert len(pids) == 6, f"the ranks did not start their children: {pids}"
        launcher.send_signal(sig)
        assert launcher.wait(timeout=30) == -sig
        left = _wait_gone(pids, 15)
        assert not left, f"{len(left)} of 6 rank processes and their children outlived the launcher ({sig.name})"
        deadline = time.monotonic() + 5
        while not _run_dirs() <= before and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _run_dirs() <= before, "a run folder was left behind"
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        _kill(pids)
