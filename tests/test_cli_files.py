"""Every verb of ``python -m nbdebug`` given a path that is no regular file (``/dev/zero``, a FIFO, a folder):
one ``NbdebugError`` line on stderr that names the path, exit code 1, within seconds, no traceback (issue 25,
finding 6).  Also standard input, bounded, and the XLA watch's PT_XLA_DEBUG_FILE read."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

from tests.cli_child import run_nbdebug

VERBS = {
    "explain": ["explain", "{}"],
    "xla": ["xla", "{}"],
    "xla --debug-log": ["xla", "{report}", "--debug-log", "{}"],
    "torchrun --nccl-log": ["torchrun", "--nccl-log", "{}"],
    "snapshot": ["snapshot", "{}"],
}


def _run(args: list[str], *, stdin: int | None = subprocess.DEVNULL, timeout: float = 30) -> tuple[int, str]:
    rc, _, err = run_nbdebug(args, stdin=stdin, timeout=timeout)
    return rc, err


def _check_one_line(args: list[str], path: str, err: str, rc: int) -> None:
    assert rc != 0, (args, err)
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert repr(path) in lines[0] or path in lines[0], err


def _args(verb: str, path: str, tmp_path: Path) -> list[str]:
    report = tmp_path / "metrics.txt"
    report.write_text("Metric: CompileTime\n  TotalSamples: 1\n")
    return [a.format(path, report=report) for a in VERBS[verb]]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("verb", list(VERBS))
def test_a_device_is_one_line(verb, tmp_path):
    args = _args(verb, "/dev/zero", tmp_path)
    rc, err = _run(args)
    _check_one_line(args, "/dev/zero", err, rc)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("verb", list(VERBS))
def test_a_fifo_is_one_line_and_never_blocks(verb, tmp_path):
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    args = _args(verb, str(fifo), tmp_path)
    rc, err = _run(args, timeout=20)
    _check_one_line(args, str(fifo), err, rc)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("verb", ["explain", "xla", "torchrun --nccl-log"])
def test_a_folder_is_one_line(verb, tmp_path):
    args = _args(verb, str(tmp_path), tmp_path)
    rc, err = _run(args)
    _check_one_line(args, str(tmp_path), err, rc)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("verb", ["explain", "xla"])
def test_endless_stdin_is_bounded(verb):
    with open("/dev/zero", "rb") as zero:
        rc, err = _run([verb, "-"], stdin=zero.fileno(), timeout=60)
    _check_one_line([verb, "-"], "standard input", err, rc)


@pytest.mark.timeout(60)
def test_explain_still_reads_the_end_of_a_big_log(tmp_path):
    log = tmp_path / "big.log"
    with open(log, "w") as fh:
        fh.write("noise line\n" * 600_000)  # 6.6 MB, more than explain's 4 MB tail
        fh.write("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    rc, out, err = run_nbdebug(["explain", str(log), "--json"], timeout=60)
    assert rc == 0, err
    assert '"kind": "cuda_oom"' in out


class _FakeMetrics:
    """The torch_xla metrics API with nothing in it (enough for XlaWatch.stop)."""

    def counter_names(self):
        return []

    def metric_names(self):
        return []

    def metric_data(self, name):
        return None


@pytest.mark.timeout(60)
def test_xla_watch_does_not_block_on_a_fifo_debug_file(tmp_path):
    from nbdebug.core.xla.live import XlaWatch, take_snapshot

    fifo = tmp_path / "debug.fifo"
    os.mkfifo(fifo)
    w = XlaWatch(debug=True)
    w._met = _FakeMetrics()
    w._before = take_snapshot(w._met)
    w._active, w._debug_file, w._status = True, (str(fifo), 0), "PT_XLA_DEBUG_LEVEL=2"
    done = threading.Event()
    errors: list[BaseException] = []

    def stop() -> None:
        try:
            w.stop()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            errors.append(e)
        finally:
            done.set()

    threading.Thread(target=stop, daemon=True).start()
    if not done.wait(20):
        with open(fifo, "wb"):  # let the blocked reader go, so nothing outlives the test
            pass
        pytest.fail("XlaWatch.stop blocked on a FIFO named by PT_XLA_DEBUG_FILE")
    assert not errors, errors
    assert w.result is not None and "not read" in w.result.debug_status and str(fifo) in w.result.debug_status
