"""A dead kernel explained (issue 23): a real IPython shell in a child process with nbdebug loaded dies of a
segfault, of an abort, or of SIGKILL under a memory limit; loading nbdebug again shows what it was doing."""

from __future__ import annotations

import faulthandler
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from IPython.utils.capture import capture_output

from tests.conftest import REPO

CHILD = """\
import os, sys, resource
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config
{setup}
config = Config()
config.HistoryManager.hist_file = ":memory:"
ip = InteractiveShell.instance(config=config)
ip.run_line_magic("load_ext", "nbdebug")
ip.run_cell("x = 1", store_history=True)
ip.run_cell({cell!r}, store_history=True)
print("the cell came back", flush=True)
"""

POSIX = pytest.mark.skipif(not hasattr(signal, "SIGKILL") or not sys.platform.startswith("linux"),
                           reason="the record reads /proc and kills with POSIX signals")


def _die(tmp_path, cell, setup=""):
    env = dict(os.environ, PYTHONPATH=str(REPO), NBDEBUG_STATE_DIR=str(tmp_path))
    code = CHILD.format(cell=cell, setup=textwrap.dedent(setup))
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=240)
    assert "the cell came back" not in proc.stdout, proc.stdout + proc.stderr
    return proc


def _panels(shell, tmp_path, monkeypatch):
    monkeypatch.setenv("NBDEBUG_STATE_DIR", str(tmp_path))
    with capture_output() as out:
        shell.run_line_magic("load_ext", "nbdebug")
    try:
        return [o.data["text/plain"] for o in out.outputs if "kernel" in o.data.get("text/plain", "")], out
    finally:
        shell.run_line_magic("unload_ext", "nbdebug")


@POSIX
def test_a_segfault_names_the_dead_cell_and_line(shell, tmp_path, monkeypatch):
    proc = _die(tmp_path, "import ctypes\nctypes.string_at(0)")
    assert proc.returncode == -signal.SIGSEGV
    (panel,), _ = _panels(shell, tmp_path, monkeypatch)
    assert "[kernel_died]" in panel
    assert "In [2], line 2: ctypes.string_at(0)" in panel
    assert "Segmentation fault" in panel and "Python stack of every thread" in panel
    assert not [p for p in os.listdir(tmp_path) if p.startswith("kernel-")]  # removed once shown
    panels, _ = _panels(shell, tmp_path, monkeypatch)  # shown once only
    assert panels == []


@POSIX
def test_an_abort_names_the_dead_cell_and_line(shell, tmp_path, monkeypatch):
    proc = _die(tmp_path, "import os\nx = 2\nos.abort()")
    assert proc.returncode == -signal.SIGABRT
    (panel,), _ = _panels(shell, tmp_path, monkeypatch)
    assert "In [2], line 3: os.abort()" in panel and "Aborted" in panel


@POSIX
def test_sigkill_under_a_memory_limit_is_blamed_on_memory(shell, tmp_path, monkeypatch):
    # the child alone gets an address-space limit, fills most of it, and is killed as the OOM killer would
    setup = """
        status = open("/proc/self/status").read()
        vm = int(status.split("VmSize:")[1].split()[0]) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (vm + (384 << 20), resource.RLIM_INFINITY))
    """
    cell = ("import os, resource, signal, time\n"
            "vm = int(open('/proc/self/status').read().split('VmSize:')[1].split()[0]) * 1024\n"
            "block = b'x' * int((resource.getrlimit(resource.RLIMIT_AS)[0] - vm) * 0.8)\n"
            "time.sleep(2.5)\n"
            "os.kill(os.getpid(), signal.SIGKILL)")
    proc = _die(tmp_path, cell, setup)
    assert proc.returncode == -signal.SIGKILL
    (panel,), _ = _panels(shell, tmp_path, monkeypatch)
    assert "running In [2]" in panel
    assert "Address-space limit" in panel and "out-of-memory killer" in panel
    assert "Lower the batch size" in panel or "lower the batch size" in panel


@POSIX
def test_os_exit_leaves_a_record_and_a_clean_exit_none(shell, tmp_path, monkeypatch):
    _die(tmp_path, "import os\nos._exit(3)")
    (panel,), _ = _panels(shell, tmp_path, monkeypatch)
    assert "running In [2]" in panel and "os._exit" in panel
    env = dict(os.environ, PYTHONPATH=str(REPO), NBDEBUG_STATE_DIR=str(tmp_path))
    code = CHILD.format(cell="y = 2", setup="")
    subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, timeout=240, check=True)
    assert not [p for p in os.listdir(tmp_path) if p.startswith("kernel-")]  # a normal exit removes its record


def test_unload_takes_faulthandler_and_the_files_away(shell, tmp_path, monkeypatch):
    monkeypatch.setenv("NBDEBUG_STATE_DIR", str(tmp_path))
    before = faulthandler.is_enabled()
    shell.run_line_magic("load_ext", "nbdebug")
    try:
        from nbdebug.ipython._extension import get_state

        recorder = get_state(shell).crash_recorder
        assert recorder.on and faulthandler.is_enabled()
        # the sampling thread may be between writing the record's temporary file and renaming it over the record
        settled = [p for p in os.listdir(tmp_path) if not (p.startswith(".") and p.endswith(".tmp"))]
        assert sorted(settled) == sorted(os.path.basename(p) for p in (recorder.record_path, recorder.fault_path))
        shell.run_cell("z = 3", store_history=True)
        thread = recorder._thread
    finally:
        shell.run_line_magic("unload_ext", "nbdebug")
    assert os.listdir(tmp_path) == []
    assert not thread.is_alive()
    assert faulthandler.is_enabled() == before


def test_old_and_foreign_records_never_pile_up(tmp_path, monkeypatch):
    from nbdebug.core.explain._deadkernel import MAX_AGE_S, dead_kernels, host_name

    stale = tmp_path / f"kernel-{host_name()}-999999-1.json"
    stale.write_text('{"cell": "In [1]"}')
    os.utime(stale, (1, 1))
    assert dead_kernels(str(tmp_path), now=1 + MAX_AGE_S + 10) == []
    assert not stale.exists()
    (tmp_path / f"kernel-{host_name()}-999998-1.json").write_text("not json")
    (tmp_path / "notes.txt").write_text("someone else's")
    assert dead_kernels(str(tmp_path)) == []  # an unreadable record is removed, not shown
    assert os.listdir(tmp_path) == ["notes.txt"]


def test_a_folder_that_is_a_symlink_is_refused(tmp_path, monkeypatch):
    from nbdebug.core.explain._deadkernel import state_dir

    target = tmp_path / "real"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    monkeypatch.setenv("NBDEBUG_STATE_DIR", str(tmp_path / "link"))
    with pytest.raises(OSError, match="not a plain folder"):
        state_dir()


FORKS = """\
import ctypes, faulthandler, json, os, sys
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config
faulthandler.enable()  # what ipykernel does before nbdebug loads: fatal stacks go to the kernel's stderr
config = Config()
config.HistoryManager.hist_file = ":memory:"
ip = InteractiveShell.instance(config=config)
ip.run_line_magic("load_ext", "nbdebug")
ip.run_cell("x = 1", store_history=True)
from nbdebug.ipython._extension import get_state
rec = get_state(ip).crash_recorder
def worker_that_crashes():
    ctypes.string_at(0)
def files():
    return sorted(os.listdir(os.environ["NBDEBUG_STATE_DIR"]))
seen = {"before": files()}
pid = os.fork()
if pid == 0:
    worker_that_crashes()
seen["crashed"] = os.waitpid(pid, 0)[1]
seen["fault_after_crash"] = open(rec.fault_path).read()
pid = os.fork()
if pid == 0:
    sys.exit(0)  # a normal exit: the interpreter's exit functions run in the child
seen["exited"] = os.waitpid(pid, 0)[1]
seen["after"] = files()
seen["record_pid"] = json.load(open(rec.record_path))["pid"]
seen["pid"] = os.getpid()
print("SEEN " + json.dumps(seen), flush=True)
"""


@POSIX
def test_a_forked_child_leaves_the_parent_record_alone(tmp_path):
    # DataLoader workers are fork children on Linux: their segfault or exit is not the kernel's
    env = dict(os.environ, PYTHONPATH=str(REPO), NBDEBUG_STATE_DIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", FORKS], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = __import__("json").loads(proc.stdout.split("SEEN ", 1)[1])
    assert os.WIFSIGNALED(seen["crashed"]) and os.WTERMSIG(seen["crashed"]) == signal.SIGSEGV
    assert os.WIFEXITED(seen["exited"]) and os.WEXITSTATUS(seen["exited"]) == 0
    assert len(seen["before"]) == 2 and seen["after"] == seen["before"]  # the exiting child removed nothing
    assert seen["fault_after_crash"] == ""  # the worker's stack is not in the kernel's fault file...
    assert "worker_that_crashes" in proc.stderr  # ...but where faulthandler wrote before nbdebug
    assert seen["record_pid"] == seen["pid"]
    assert os.listdir(tmp_path) == []  # the kernel's own normal exit still removes its record


EXIT_THEN_CRASH = """\
import ctypes, faulthandler, os
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config
faulthandler.enable()
config = Config()
config.HistoryManager.hist_file = ":memory:"
ip = InteractiveShell.instance(config=config)
ip.run_line_magic("load_ext", "nbdebug")
from nbdebug.ipython._extension import get_state
get_state(ip).crash_recorder._remove()  # what the interpreter's exit runs
other = open("other.txt", "w")  # may get the descriptor number the fault file had
def late_crash():
    ctypes.string_at(0)
late_crash()
"""


@POSIX
def test_the_exit_hands_faulthandler_back_before_closing_its_file(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), NBDEBUG_STATE_DIR=str(tmp_path / "state"))
    proc = subprocess.run([sys.executable, "-c", EXIT_THEN_CRASH], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == -signal.SIGSEGV, proc.stdout + proc.stderr
    assert "Segmentation fault" in proc.stderr and "late_crash" in proc.stderr  # stderr, as before nbdebug
    assert (tmp_path / "other.txt").read_text() == ""
    assert os.listdir(tmp_path / "state") == []


def _finished_pid():
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    return int(proc.stdout)


def test_records_of_other_hosts_are_not_judged_here(tmp_path):
    from nbdebug.core.explain._deadkernel import MAX_AGE_S, dead_kernels, host_name

    pid = _finished_pid()
    running = '{"cell": "In [4]", "state": "running"}'
    elsewhere = tmp_path / f"kernel-{host_name()}x-{pid}-1.json"  # the same pid, on another machine: maybe alive
    elsewhere.write_text(running)
    older = tmp_path / f"kernel-{pid}-1.json"  # the name an older nbdebug gave, with no host: cannot be judged
    older.write_text(running)
    assert dead_kernels(str(tmp_path)) == []
    assert elsewhere.exists() and older.exists()
    here = tmp_path / f"kernel-{host_name()}-{pid}-1.json"
    here.write_text(running)
    (dead,) = dead_kernels(str(tmp_path))
    assert dead.pid == pid and dead.record["cell"] == "In [4]" and not here.exists()
    for path in (elsewhere, older):
        os.utime(path, (1, 1))
    assert dead_kernels(str(tmp_path), now=1 + MAX_AGE_S + 10) == []
    assert os.listdir(tmp_path) == []  # what nobody can judge ages out


def test_a_record_name_carries_the_host():
    from nbdebug.core.explain._deadkernel import host_name, record_paths

    record, fault = record_paths("/somewhere")
    assert os.path.basename(record).startswith(f"kernel-{host_name()}-{os.getpid()}-")
    assert fault == record[: -len(".json")] + ".fault"
    assert host_name() and all(c.isalnum() or c in "._-" for c in host_name())


@POSIX
def test_a_process_we_may_not_signal_is_alive(tmp_path):
    # a PermissionError from os.kill(pid, 0) means a process is there (another user's, or hidden by hidepid)
    from nbdebug.core.explain._deadkernel import _alive, process_start

    if os.getuid() != 0:
        target = 1
        if os.stat("/proc/1").st_uid == os.getuid():
            pytest.skip("pid 1 is this user's: no process here that this user may not signal")
        assert _alive(target, process_start(target))
        return
    target = os.getpid()  # root's; a child that drops to nobody may not signal it
    start = process_start(target)
    child = os.fork()
    if child == 0:
        code = 3
        try:
            os.setgid(65534)
            os.setuid(65534)
            try:
                os.kill(target, 0)
                code = 2  # the check below would prove nothing
            except PermissionError:
                code = 0 if _alive(target, start) else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
