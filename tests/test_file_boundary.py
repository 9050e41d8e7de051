"""The file boundary, one matrix: every reader of ``python -m nbdebug`` against the files a filesystem can hold.

Each reader (``explain``, ``xla``, ``torchrun --nccl-log``, ``snapshot`` on a file; ``postmortem`` on a folder) is
run in a child process, with a time limit and an address-space limit set in that child only, on: an 8 GiB sparse
file, a 10 MB line, a file that grows while it is read, a symlink that loops and one that dangles.  Whatever the
case, the reader ends by itself (never killed by a signal, never past its time), and when it refuses the input it
says so in one line, without a traceback.  The post-mortem also gets a folder of 20,000 tiny files and a symlink
out of it to a secret, which must appear in none of its outputs.  (A folder without read permission cannot be
made here: the tests run as root, whom no permission stops.)
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.cli_child import run_nbdebug

LIMIT_S = 90
ADDRESS_SPACE = 3 << 30  # the child's own limit: torch and numpy map about 1 GiB before they do anything
READERS = {
    "explain": ["explain", "{}"],
    "xla": ["xla", "{}"],
    "torchrun --nccl-log": ["torchrun", "--nccl-log", "{}"],
    "snapshot": ["snapshot", "{}"],
}

def _run(args: list[str], *, during=None) -> tuple[int, str, str]:
    return run_nbdebug(args, timeout=LIMIT_S, address_space=ADDRESS_SPACE, during=during)


def _ended_by_itself(args: list[str], rc: int, err: str) -> None:
    assert rc >= 0, f"nbdebug {' '.join(args)} was killed by signal {-rc}:\n{err[-2000:]}"
    assert "Traceback" not in err, err[-3000:]
    if rc != 0:  # a refusal is one line
        assert len(err.strip().splitlines()) == 1, err[-3000:]


def _sparse(path: Path) -> Path:
    with open(path, "wb") as fh:
        fh.truncate(8 << 30)  # 8 GiB of holes: no disk, every byte reads as 0
    return path


def _long_line(path: Path) -> Path:
    path.write_bytes(b"RuntimeError: " + b"x" * (10 << 20) + b"\n")
    return path


def _loop(path: Path) -> Path:
    path.symlink_to(path)
    return path


def _dangling(path: Path) -> Path:
    path.symlink_to(path.parent / "gone")
    return path


CASES = {"8 GiB sparse file": _sparse, "10 MB line": _long_line, "symlink loop": _loop, "dangling symlink": _dangling}


def _args(reader: str, path: Path) -> list[str]:
    return [a.format(path) for a in READERS[reader]]


@pytest.mark.timeout(LIMIT_S + 30)
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("reader", list(READERS))
def test_every_file_reader_ends_by_itself(reader, case, tmp_path):
    path = CASES[case](tmp_path / "input.txt")
    args = _args(reader, path)
    rc, _, err = _run(args)
    _ended_by_itself(args, rc, err)


def _grow(path: Path):
    def grow(stop: threading.Event) -> None:
        with open(path, "ab") as fh:
            while not stop.is_set() and fh.tell() < (64 << 20):
                fh.write(b"line of a log that is still being written\n" * 20_000)
                fh.flush()
                time.sleep(0.01)
    return grow


@pytest.mark.timeout(LIMIT_S + 30)
@pytest.mark.parametrize("reader", list(READERS))
def test_a_file_growing_while_it_is_read(reader, tmp_path):
    path = tmp_path / "growing.log"
    path.write_bytes(b"start\n")
    args = _args(reader, path)
    rc, _, err = _run(args, during=_grow(path))
    _ended_by_itself(args, rc, err)


SECRET = "RuntimeError: SECRET-7f3a the password is hunter2"


def _folder(tmp_path: Path, case: str) -> Path:
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank0.log").write_text("[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered\n")
    secret = tmp_path / "elsewhere.txt"
    secret.write_text(SECRET + "\n")
    secret.chmod(0o600)
    (job / "rank1.log").symlink_to(secret)
    if case == "8 GiB sparse file":
        _sparse(job / "rank2.log")
    elif case == "10 MB line":
        _long_line(job / "rank2.log")
    elif case == "symlink loop":
        _loop(job / "rank2.log")
        (job / "sub").mkdir()
        (job / "sub" / "up").symlink_to(job)
    elif case == "dangling symlink":
        _dangling(job / "rank2.log")
    elif case == "20,000 tiny files":
        for i in range(20_000):
            (job / f"rank{i + 2}.log").write_text(f"[rank{i + 2}]: ok\n")
    return job


@pytest.mark.timeout(LIMIT_S + 60)
@pytest.mark.parametrize("case", [*CASES, "20,000 tiny files"])
def test_the_post_mortem_on_a_hostile_folder(case, tmp_path):
    job = _folder(tmp_path, case)
    for extra in ([], ["--json"]):
        args = ["postmortem", str(job), *extra]
        rc, out, err = _run(args)
        assert rc >= 0, f"killed by signal {-rc}: {err[-2000:]}"
        assert "Traceback" not in err, err[-3000:]
        assert "SECRET" not in out + err and "hunter2" not in out + err  # nothing from outside the folder
        assert rc in (0, 1) and (out.startswith("post-mortem:") or out.lstrip().startswith("{")), out[:500] + err
        if not extra:  # the real rank's log is still read, and what was skipped is said
            assert "rank log" in out and ("skipped" in out or case == "20,000 tiny files"), out[-2000:]
