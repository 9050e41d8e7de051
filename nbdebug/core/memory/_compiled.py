"""The compiled walk of the profiler's event tree (``_walk.cpp``): built once per torch, in the background.

``%%memtrace`` on CPU turns the profiler's event tree into columns after the cell.  In Python that walk costs
a call into C++ per node and per field (about 1.3 ms for one small training step, a sixth of a second for twenty
steps of a small Transformer); compiled, it costs a twentieth of that.  The compiled walk reads torch's own
structs, so it is built against the headers of the torch that is installed, with
``torch.utils.cpp_extension`` (a C++ compiler and ninja), into nbdebug's cache folder.

How it goes, so that no cell ever waits for a compiler and no kernel loads an unchecked build:

- The first time a walk asks for it, a child process builds it; the walk goes on in Python meanwhile.
- The child then checks it: real recordings walked both ways must give the same allocations, frames and stacks.
  Only then does it write ``verified.json``; a failed build or check writes ``failed.txt`` with the reason, and
  nothing is tried again for that torch and that source.
- A kernel loads the build only once it is verified, for exactly its torch, Python and source.

``NBDEBUG_COMPILE=0`` turns all of it off; ``NBDEBUG_CACHE_DIR`` moves the cache (default
``$XDG_CACHE_HOME/nbdebug`` or ``~/.cache/nbdebug``).  ``python -m nbdebug compile`` builds it now and says why
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
STALE_LOCK_S = 600.0  # a build that has held its lock this long died without removing it

_module: Any = None
_child: subprocess.Popen[bytes] | None = None
_gave_up = False  # a verified build did not load in this process: not tried again here


def enabled() -> bool:
    """Whether the compiled walk may be built and used (``NBDEBUG_COMPILE`` is not ``0``)."""
    return os.environ.get(SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


@functools.lru_cache(maxsize=1)
def _tag() -> str:
    import torch

    key = "\n".join([SOURCE.read_text(), torch.__version__, str(getattr(torch.version, "git_version", "")),
                     sys.version, platform.machine(), os.path.dirname(torch.__file__)])
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def build_dir() -> Path:
    """The folder of the build for this torch, Python and source."""
    root = os.environ.get(CACHE) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "nbdebug")
    return Path(root) / f"walk-{_tag()}"


def _module_name(d: Path) -> str:
    return "nbdebug_walk_" + d.name.split("-", 1)[1]


def compiled_walker(*, start: bool = True) -> Any:
    """The compiled walk's module when it is built and verified here, else ``None``.

    With ``start``, a missing build is started in a child process (once; never waited for).
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
        if start and not (d / "failed.txt").exists():
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
    global _child
    if _child is not None and _child.poll() is None:
        return
    if _child is not None:  # it ended without verified.json: no second try, here or in another kernel
        if not (d / "failed.txt").exists():
            with contextlib.suppress(OSError):
                (d / "failed.txt").write_text(f"the build process ended with code {_child.returncode} "
                                              "(see build.log)\n")
        return
    d.mkdir(parents=True, exist_ok=True)
    if _lock_is_fresh(d / "building.pid"):
        return
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")  # the venv's ninja
    # this nbdebug, wherever it was imported from (a checkout on sys.path, not installed)
    package_root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    env.setdefault("KINETO_LOG_LEVEL", "99")
    with open(d / "build.log", "ab") as log:
        _child = subprocess.Popen([sys.executable, "-m", "nbdebug.core.memory._compiled", str(d)],
                                  stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                  start_new_session=True)
    atexit.register(_stop_child)


def _stop_child() -> None:
    """End a build still running when this process exits (the compiler's processes with it)."""
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


def wait_for_child(timeout: float) -> int | None:
    """Wait for a build this process started (tests, ``python -m nbdebug compile``); its exit code."""
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
    if (d / "building.pid").exists() or (_child is not None and _child.poll() is None):
        return f"being built, in {d}"
    return f"not built yet (it is built the first time memtrace records on CPU, into {d})"


def build(d: Path | None = None) -> str:
    """Build and check the compiled walk now, in this process; ``"ok"`` or the reason it failed.

    The reason is also written to ``failed.txt``, so that no kernel tries again for this torch and source.
    """
    d = build_dir() if d is None else d
    d.mkdir(parents=True, exist_ok=True)
    lock = d / "building.pid"
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        if _lock_is_fresh(lock):
            return "busy: another process is building it"
        lock.unlink(missing_ok=True)
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    try:
        (d / "failed.txt").unlink(missing_ok=True)
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
    import torch.utils.cpp_extension as cpp

    include = os.path.join(cpp.include_paths()[0], "kineto")  # the profiler's headers include kineto's
    (d / "build").mkdir(exist_ok=True)
    return cpp.load(name=_module_name(d), sources=[str(SOURCE)], build_directory=str(d / "build"),
                    extra_cflags=["-O2", "-DUSE_KINETO"], extra_include_paths=[include], verbose=False)


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


if __name__ == "__main__":  # the child process of _start_child
    result = build(Path(sys.argv[1]))
    print(f"nbdebug compiled walk: {result}")
    sys.exit(0 if result == "ok" else 1)
