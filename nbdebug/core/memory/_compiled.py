"""The compiled walk of the profiler's event tree (``_walk.cpp``): built once per torch, in the background.

``%%memtrace`` on CPU turns the profiler's event tree into columns after the cell.  In Python that walk costs
a call into C++ per node and per field (1.3 ms after one small training step, 12 to 16 ms after twenty); the
compiled walk does the same in a third to a sixth of that.  It reads torch's own structs, so it is built
against the headers of the torch that is installed, with ``torch.utils.cpp_extension`` (a C++ compiler and
ninja), into nbdebug's cache folder.

How it goes, so that no cell ever waits for a compiler and no kernel loads an unchecked build:

- In IPython (a notebook's kernel), the first time a CPU recording is walked, a child process builds it; the walk
  goes on in Python meanwhile.  A plain script starts nothing: ``python -m nbdebug compile`` builds it for all.
- The build is then checked: real recordings walked both ways must give the same allocations, frames and stacks.
  Only then is ``verified.json`` written; a failed build or check writes ``failed.txt`` with the reason, and
  nothing is tried again for that torch, Python and source.
- A kernel loads the build only once it is verified, for exactly its torch, Python and source.
- A build still running when its kernel exits is ended, compiler included, and its locks are removed; one that
  was killed otherwise leaves stale locks, which the next build takes over.  No build runs past
  ``BUILD_DEADLINE_S``.

``NBDEBUG_COMPILE=0`` turns all of it off; ``NBDEBUG_CACHE_DIR`` moves the cache (by default
``$XDG_CACHE_HOME/nbdebug``, else ``~/.cache/nbdebug``).  ``python -m nbdebug compile`` builds it now and says why
when it cannot.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["compiled_walker", "build", "build_dir", "status", "SWITCH", "CACHE"]

SWITCH = "NBDEBUG_COMPILE"
CACHE = "NBDEBUG_CACHE_DIR"
SOURCE = Path(__file__).with_name("_walk.cpp")
RULES = Path(__file__).with_name("_cpu_record.py")  # the Python side of the walk, which the check compares with
BUILD_DEADLINE_S = 600.0  # a build process ends itself, compiler included, after this long
STALE_LOCK_S = BUILD_DEADLINE_S + 60  # so a lock held longer than this belongs to a build that died
BUSY = 3  # the exit code of a build process that found another one building the same thing
_CRASHES = {-signal.SIGSEGV, -signal.SIGBUS, -signal.SIGILL, -signal.SIGABRT, -signal.SIGFPE}

_module: Any = None
_child: subprocess.Popen[bytes] | None = None
_child_dir: Path | None = None
_gave_up = False  # a verified build did not load in this process: not tried again here


def enabled() -> bool:
    """Whether the compiled walk may be built and used (``NBDEBUG_COMPILE`` is not ``0``)."""
    return os.environ.get(SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


@functools.lru_cache(maxsize=1)
def _tag() -> str:
    import torch

    key = "\n".join([SOURCE.read_text(), RULES.read_text(), torch.__version__,
                     str(getattr(torch.version, "git_version", "")), sys.version, platform.machine(),
                     os.path.dirname(torch.__file__)])
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def build_dir() -> Path:
    """The folder of the build for this torch, Python and source."""
    root = os.environ.get(CACHE) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "nbdebug")
    return Path(root) / f"walk-{_tag()}"


def _module_name(d: Path) -> str:
    return "nbdebug_walk_" + d.name.split("-", 1)[1]


def _in_ipython() -> bool:
    """Whether this process runs IPython (a notebook's kernel): the one place a build starts by itself."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        return ipython.get_ipython() is not None
    except Exception:  # noqa: BLE001 - an IPython that cannot say: do not start anything
        return False


def compiled_walker(*, start: bool = True) -> Any:
    """The compiled walk's module when it is built and verified here, else ``None``.

    With ``start``, in IPython, a missing build is started in a child process (once; never waited for).
    """
    global _module, _gave_up
    if not enabled():
        return None
    if _module is not None:
        return _module
    if _gave_up or not SOURCE.is_file():
        return None
    try:
        d = build_dir()
        if (d / "verified.json").is_file():
            try:
                _module = _load(d)
            except Exception:
                _gave_up = True
                raise
            return _module
        if start and _in_ipython() and not (d / "failed.txt").exists():
            _start_child(d)
    except Exception:  # noqa: BLE001 - a cache that cannot be read or a module that does not load: walk in Python
        return None
    return None


def _load(d: Path) -> Any:
    info = json.loads((d / "verified.json").read_text())
    name = _module_name(d)
    path = d / "build" / info["file"]
    if info.get("module") != name or not path.is_file():
        raise RuntimeError(f"{d}: verified.json does not describe this build")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"{path}: not a loadable module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _lock_is_fresh(lock: Path) -> bool:
    try:
        age = time.time() - lock.stat().st_mtime
        pid = int(lock.read_text().strip() or 0)
    except (OSError, ValueError):
        return False
    if age > STALE_LOCK_S:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # alive, someone else's
        return True
    return True


def _start_child(d: Path) -> None:
    global _child, _child_dir
    if _child is not None:
        code = _child.poll()
        if code is None:
            return
        failed = code in _CRASHES or (code > 0 and code != BUSY)
        if failed and not (d / "failed.txt").exists():  # it could not say why itself: no second try anywhere
            with contextlib.suppress(OSError):
                (d / "failed.txt").write_text(f"the build process ended with code {code} (see build.log)\n")
        if failed or code == 0:
            return
        _child = None  # another process was building it, or this one was stopped: it may be started again
    d.mkdir(parents=True, exist_ok=True)
    if _lock_is_fresh(d / "building.pid"):
        return
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")  # the venv's ninja
    # this process's own path, so that the child imports this torch and this nbdebug (a checkout, a path the
    # notebook added); the child checks that its torch gives the same folder before it builds
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env.setdefault("KINETO_LOG_LEVEL", "99")
    with open(d / "build.log", "ab") as log:
        _child = subprocess.Popen([sys.executable, "-m", "nbdebug.core.memory._compiled", str(d), d.name],
                                  stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                  start_new_session=True)
    _child_dir = d
    atexit.register(_stop_child)


def _stop_child() -> None:
    """End a build still running (when this process exits), the compiler's processes with it, and take its
    locks away: the next build would otherwise wait on the lock torch's extension builder left."""
    child = _child
    if child is None or child.poll() is not None:
        return
    with contextlib.suppress(OSError):
        os.killpg(child.pid, signal.SIGTERM)
    try:
        child.wait(timeout=5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=5)
    if _child_dir is not None:  # its locks: ours (when still its own) and torch's
        lock = _child_dir / "building.pid"
        with contextlib.suppress(OSError, ValueError):
            if int(lock.read_text().strip() or 0) == child.pid:
                lock.unlink()
        _remove_torch_lock(_child_dir)


def _remove_torch_lock(d: Path) -> None:
    """Remove the lock torch.utils.cpp_extension's builder (a FileBaton) left in the build folder: it waits on
    it without a timeout.  Only for a build that is over (stopped, or ours held the folder's lock since)."""
    with contextlib.suppress(OSError):
        (d / "build" / "lock").unlink()


def wait_for_child(timeout: float) -> int | None:
    """Wait for a build this process started in the background (the tests do); its exit code."""
    if _child is None:
        return None
    try:
        return _child.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop_child()
        raise


def status() -> str:
    """One line: whether the compiled walk is used here, and if not, why."""
    if not enabled():
        return f"off ({SWITCH}={os.environ.get(SWITCH)})"
    d = build_dir()
    if (d / "verified.json").is_file():
        return f"built and verified, in {d}"
    if (d / "failed.txt").exists():
        return f"not available: {(d / 'failed.txt').read_text().strip()} (see {d / 'build.log'})"
    if _lock_is_fresh(d / "building.pid") or (_child is not None and _child.poll() is None):
        return f"being built, in {d}"
    return (f"not built yet (a notebook builds it the first time memtrace records on CPU, and "
            f"`python -m nbdebug compile` builds it now, into {d})")


def build(d: Path | None = None) -> str:
    """Build and check the compiled walk now, in this process; ``"ok"`` or the reason it failed.

    The reason is also written to ``failed.txt``, so that no kernel tries again for this torch and source.
    """
    d = build_dir() if d is None else d
    lock = d / "building.pid"
    try:
        d.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            if _lock_is_fresh(lock):
                return "busy: another process is building it"
            lock.unlink(missing_ok=True)  # a build that died; another process may take it over first
            try:
                fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return "busy: another process is building it"
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
    except OSError as e:
        return f"the cache folder {str(d)!r} cannot be written ({type(e).__name__}: {e}); set {CACHE} to a " \
               "folder that can"
    try:
        _remove_torch_lock(d)  # this process holds the folder's lock: torch's is from a build that is over
        for old in ("failed.txt", "verified.json"):
            (d / old).unlink(missing_ok=True)
        try:
            module = _compile(d)
            _self_check(module)
        except Exception as e:  # noqa: BLE001 - any failure means: walk in Python, and say why
            import traceback

            with open(d / "build.log", "a") as log:  # the compiler's own output is in the message
                log.write(traceback.format_exc())
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
            if len(lines) > 1:  # torch's "Error building extension 'name': <command>" then the compiler's output
                text = f"{lines[0].split(': [', 1)[0][:160]}: ... {lines[-1][:160]}"
            else:
                text = lines[0] if lines else ""
            reason = f"{type(e).__name__}: {text}"
            (d / "failed.txt").write_text(reason + "\n")
            return reason
        info = {"module": _module_name(d), "file": Path(module.__file__).name}
        tmp = d / "verified.json.tmp"
        tmp.write_text(json.dumps(info))
        tmp.replace(d / "verified.json")
        return "ok"
    finally:
        lock.unlink(missing_ok=True)


def _compile(d: Path) -> Any:
    import torch
    import torch.utils.cpp_extension as cpp

    include = os.path.join(cpp.include_paths()[0], "kineto")  # the profiler's headers include kineto's
    flags = ["-O2"]
    if torch.autograd.kineto_available():  # the headers' layout follows how torch itself was built
        flags.append("-DUSE_KINETO")
    (d / "build").mkdir(exist_ok=True)
    return cpp.load(name=_module_name(d), sources=[str(SOURCE)], build_directory=str(d / "build"),
                    extra_cflags=flags, extra_include_paths=[include], verbose=False)


def _self_check(module: Any) -> None:
    """Walk real recordings both ways; raise unless they agree exactly."""
    from nbdebug.core.memory._cpu_record import compare_walks

    for results in _check_recordings():
        problem = compare_walks(results, module)
        if problem:
            raise RuntimeError(f"the compiled walk disagrees with the Python walk: {problem}")


def _check_recordings() -> list[Any]:
    """A few recordings with each kind of node the walk meets: module and function calls, C functions,
    operators in a function's own lines, a record_function scope, frees, and an allocation under no call."""
    import torch

    from nbdebug.core.memory._cpu_record import CpuRecording

    os.environ.setdefault("KINETO_LOG_LEVEL", "99")  # the profiler's start and stop lines, in a build's output

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.Adam(model.parameters())
    x, y = torch.randn(16, 32), torch.randn(16, 1)

    def step() -> None:
        opt.zero_grad()
        with torch.autograd.profiler.record_function("nbdebug check scope"):
            loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        a = x @ x.T + 1  # operators, no call
        kept.append(torch.relu(a))  # a C function
        with torch.autograd.profiler.record_function("[memory]"):  # a scope that only looks like an allocation
            torch.ones(3)

    kept: list[Any] = []
    out = []
    for ops in (False, True):
        rec = CpuRecording(ops=ops)
        rec.start()
        try:
            step()
            torch.zeros(5)
        finally:
            rec.stop()
        out.append(rec.results)
    return out


def _deadline() -> None:
    """End this build process and its compiler: a build never runs past ``BUILD_DEADLINE_S``."""
    print(f"nbdebug compiled walk: not done after {BUILD_DEADLINE_S:.0f} s, stopped", flush=True)
    if os.getpgrp() == os.getpid():  # started in a session of its own: the group is this build
        os.killpg(0, signal.SIGKILL)
    os._exit(1)


def _main(argv: list[str]) -> int:
    """The child process of ``_start_child``: ``FOLDER EXPECTED_NAME``."""
    import threading

    timer = threading.Timer(BUILD_DEADLINE_S, _deadline)
    timer.daemon = True
    timer.start()
    d = Path(argv[0])
    if len(argv) > 1 and argv[1] != build_dir().name:  # another torch or Python than the kernel's
        reason = (f"the build process imported another torch or Python than the kernel ({build_dir().name}, "
                  f"expected {argv[1]})")
        print(f"nbdebug compiled walk: {reason}")
        (d / "failed.txt").write_text(reason + "\n")
        return 1
    result = build(d)
    print(f"nbdebug compiled walk: {result}", flush=True)
    if result.startswith("busy"):
        return BUSY
    return 0 if result == "ok" else 1


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
