"""The snapshot reader and memory's writes at the file boundary (issue 25, findings 7 and 10).

A snapshot that shrinks while it is read ends in a result or one ``SnapshotError``, never SIGBUS (the file is read
with ``read()``, never memory-mapped); reading a large snapshot never sets a process-wide limit (``RLIMIT_AS``);
a FIFO or a device is one error line, never a hang; the viewer export and ``memtrace``'s save replace a symlink
planted at their target name instead of writing through it.  Anything that could hang or die by a signal runs
in a child process with a timeout.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from nbdebug.core.memory import load_snapshot
from nbdebug.errors import SnapshotError
from tests.conftest import REPO

_ENV = dict(os.environ, PYTHONPATH=str(REPO))


def _snapshot_dict(events: int) -> dict:
    frames = [{"name": f"fn{i}", "filename": f"/home/u/model_{i}.py", "line": i} for i in range(8)]
    trace = [{"action": "alloc" if i % 2 == 0 else "free_completed", "addr": 4096 * (i // 2), "size": 512,
              "stream": 0, "time_us": i, "frames": frames} for i in range(events)]
    return {"segments": [], "device_traces": [trace]}


@pytest.mark.timeout(180)
def test_snapshot_shrinking_while_read_never_kills_the_process(tmp_path):
    """A job re-dumping the file (truncate, then write again) while it is read: the reader never dies of SIGBUS."""
    path = tmp_path / "redumped.pickle"
    path.write_bytes(pickle.dumps(_snapshot_dict(60_000), protocol=4))  # a few MiB: under the old 32 MiB walk
    code = textwrap.dedent("""
        import os, sys, threading, time
        from nbdebug.core.memory import load_snapshot
        from nbdebug.errors import NbdebugError
        path = sys.argv[1]
        with open(path, "rb") as fh:
            blob = fh.read()
        stop = threading.Event()

        def redump():  # in place, like a job writing the same file again: same inode, shrinks to 0, grows back
            while not stop.is_set():
                fd = os.open(path, os.O_WRONLY)
                try:
                    os.ftruncate(fd, 0)
                    time.sleep(0.0005)
                    for i in range(0, len(blob), 1 << 16):
                        os.pwrite(fd, blob[i:i + (1 << 16)], i)
                finally:
                    os.close(fd)

        writer = threading.Thread(target=redump, daemon=True)
        writer.start()
        outcomes = {"loaded": 0, "refused": 0}
        try:
            for _ in range(40):
                try:
                    load_snapshot(path)
                    outcomes["loaded"] += 1
                except NbdebugError as e:
                    assert "\\n" not in str(e), str(e)
                    outcomes["refused"] += 1
        finally:
            stop.set()
            writer.join()
        print(outcomes)
    """)
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=150,
                          env=_ENV)
    assert done.returncode != -signal.SIGBUS, "the reader died of SIGBUS: the file was memory-mapped"
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "loaded" in done.stdout


@pytest.mark.timeout(120)
def test_loading_a_large_snapshot_never_changes_the_address_space_limit(tmp_path):
    """Another thread of the process (ipykernel's, a DataLoader's) sees the same RLIMIT_AS all along."""
    import resource

    path = tmp_path / "large.pickle"  # over the old guard's 32 MiB, many small objects: unpickling takes a while
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [],
                                   "pad": [f"{i:030d}" for i in range(1_200_000)]}, protocol=4))
    assert path.stat().st_size > 33 << 20
    before = resource.getrlimit(resource.RLIMIT_AS)
    seen: set[tuple[int, int]] = set()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.add(resource.getrlimit(resource.RLIMIT_AS))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # let the watcher run between the reader's steps
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for _ in range(2):
            load_snapshot(path)
    finally:
        stop.set()
        watcher.join(30)
        sys.setswitchinterval(interval)
    assert seen == {before}, f"RLIMIT_AS changed while a snapshot was read: {seen - {before}}"
    assert resource.getrlimit(resource.RLIMIT_AS) == before


_LOAD = "from nbdebug.core.memory import load_snapshot; load_snapshot(__import__('sys').argv[1])"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["fifo", "device"])
@pytest.mark.parametrize("how", ["api", "cli"])
def test_fifo_and_device_are_one_error_never_a_hang(tmp_path, kind, how):
    if kind == "fifo":
        path = str(tmp_path / "snapshot.pickle")
        os.mkfifo(path)
    else:
        path = "/dev/zero"
    cmd = ([sys.executable, "-m", "nbdebug", "snapshot", path, "--json"] if how == "cli"
           else [sys.executable, "-c", _LOAD, path])
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=_ENV)
    except subprocess.TimeoutExpired:
        pytest.fail(f"reading the {kind} {path} hung")
    assert done.returncode != 0
    expected = "a FIFO" if kind == "fifo" else "a character device"
    if how == "cli":
        assert done.returncode == 1, done.stderr[-2000:]
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0] and "not a regular file" in lines[0], done.stderr[-2000:]
    else:
        assert "SnapshotError" in done.stderr and expected in done.stderr, done.stderr[-2000:]


def test_fifo_in_process_is_refused_at_once(tmp_path):
    path = tmp_path / "snapshot.pickle"
    os.mkfifo(path)
    outcome: list[BaseException] = []

    def load() -> None:
        try:
            load_snapshot(path)
        except BaseException as e:  # noqa: BLE001 - recorded for the assertion
            outcome.append(e)

    reader = threading.Thread(target=load, daemon=True)
    reader.start()
    reader.join(30)
    if reader.is_alive():  # the old reader blocks in open(): a writer end lets it go, so nothing outlives the test
        with open(path, "wb"):
            pass
        reader.join(30)
        pytest.fail("load_snapshot blocked on a FIFO")
    assert len(outcome) == 1 and isinstance(outcome[0], SnapshotError), outcome
    assert "FIFO" in str(outcome[0])


def _planted(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    target = tmp_path / "out"
    target.symlink_to(victim)
    return victim, target


def test_viewer_export_replaces_a_planted_symlink(tmp_path):
    snap = load_snapshot(_snapshot_dict(10))
    victim, target = _planted(tmp_path)
    doc = snap.to_html(target)
    assert victim.read_text() == "keep me"
    assert not target.is_symlink() and target.read_text(encoding="utf-8") == doc
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "victim.txt"]  # no temporary file left


def test_cli_html_replaces_a_planted_symlink(tmp_path):
    src = tmp_path / "snap.pickle"
    src.write_bytes(pickle.dumps(_snapshot_dict(10), protocol=4))
    victim, target = _planted(tmp_path)
    done = subprocess.run([sys.executable, "-m", "nbdebug", "snapshot", str(src), "--html", str(target)],
                          capture_output=True, text=True, timeout=120, env=_ENV)
    assert done.returncode == 0, done.stderr[-2000:]
    assert victim.read_text() == "keep me"
    assert not target.is_symlink() and "<html" in target.read_text(encoding="utf-8").lower()


def test_memtrace_save_replaces_a_planted_symlink(tmp_path):
    import torch

    from nbdebug.core.memory import memtrace

    with memtrace("cpu") as rec:
        kept = torch.ones(1 << 16)
    del kept
    victim, target = _planted(tmp_path)
    rec.result.save(target)
    assert victim.read_text() == "keep me"
    assert not target.is_symlink()
    assert load_snapshot(target).events >= 1
