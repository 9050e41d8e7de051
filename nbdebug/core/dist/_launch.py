"""Run code on N local ranks and say what happened: the public ``run`` / ``run_script``, the ranks' environment,
and the run folder's life.

The launcher is three rooms: this one (arguments, environment, SIGTERM, the run folder), ``_supervise`` (start the
rank processes, stream their output, the hang watchdog, kill them all: its text says why each choice) and
``_verdict`` (what each rank's end means, and which rank failed first, by ``_blame``'s rule order that the
post-mortem uses too).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Any

from nbdebug._files import write_file
from nbdebug.core.dist._supervise import Echo, Session, default_echo, make_store
from nbdebug.core.dist._types import DistRun, RunInterrupted
from nbdebug.core.dist._verdict import session_result
from nbdebug.errors import DistRunError, DistUsageError

__all__ = ["Backend", "run", "run_script", "Echo"]



class Backend(str, Enum):
    """Process-group backends the runner can initialise."""

    GLOO = "gloo"
    NCCL = "nccl"

    @classmethod
    def parse(cls, value: str | Backend) -> Backend:
        try:
            return cls(str(getattr(value, "value", value)).lower())
        except ValueError as e:
            raise DistUsageError(f"backend {value!r} is not supported; expected one of: gloo, nccl") from e


def _package_root() -> str:
    import nbdebug

    return os.path.dirname(os.path.dirname(os.path.abspath(nbdebug.__file__)))



def _prepare_env(env: Mapping[str, str] | None, nprocs: int, port: int, backend: str,
                 flight_recorder: bool, detail: bool) -> dict[str, str]:
    base = dict(os.environ)
    base.update({k: str(v) for k, v in (env or {}).items()})
    root = _package_root()
    base["PYTHONPATH"] = os.pathsep.join(p for p in (root, base.get("PYTHONPATH", "")) if p)
    base.update({
        "WORLD_SIZE": str(nprocs), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
        "TORCHELASTIC_USE_AGENT_STORE": "True", "PYTHONUNBUFFERED": "1",
    })
    base.setdefault("OMP_NUM_THREADS", "1")  # what torchrun does for nproc > 1
    if flight_recorder:
        base.setdefault("TORCH_FR_BUFFER_SIZE", "200")  # the last steps; each dump reads all (~5 ms at 200)
    if detail:
        base["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    if backend == "nccl":
        base.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")  # =1 aborts before the FR dump (pytorch#121055)
    return base


class _Terminated(BaseException):
    """SIGTERM reached the launcher during a run: end the ranks, remove the run folder, then let it act."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise _Terminated()


def _launch(spec: dict[str, Any], nprocs: int, timeout: float, env: Mapping[str, str] | None,
            echo: Echo | None, flight_recorder: bool, detail: bool, keep_files: bool, run_dir: str,
            notes: list[str]) -> DistRun:
    # SIGTERM (a job scheduler, `kill`): without a handler the launcher would die before killing the ranks' process
    # groups; the ranks would still notice (their control pipe closes), but only after a moment
    previous: Any = None
    installed = False
    if threading.current_thread() is threading.main_thread():
        try:
            previous = signal.signal(signal.SIGTERM, _on_sigterm)
            installed = True
        except (ValueError, OSError):  # pragma: no cover  (not the main thread of the main interpreter)
            pass
    try:
        result = _launch_in(spec, nprocs, timeout, env, echo, flight_recorder, detail, run_dir, notes)
    except _Terminated:
        shutil.rmtree(run_dir, ignore_errors=True)
        if installed:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
            installed = False
        signal.raise_signal(signal.SIGTERM)  # what SIGTERM would have done without us
        raise KeyboardInterrupt("terminated (SIGTERM) during a distributed run") from None
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    finally:
        if installed:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
    if not keep_files:
        shutil.rmtree(run_dir, ignore_errors=True)
    return result


def _launch_in(spec: dict[str, Any], nprocs: int, timeout: float, env: Mapping[str, str] | None,
               echo: Echo | None, flight_recorder: bool, detail: bool, run_dir: str, notes: list[str]) -> DistRun:
    if spec["backend"] == "nccl":
        import torch

        gpus = torch.cuda.device_count()  # NVML-based: does not initialise CUDA in this process
        if gpus < nprocs:
            raise DistUsageError(
                f"backend='nccl' with {nprocs} ranks needs one GPU per rank, but {gpus} GPU(s) are visible here; "
                "use fewer ranks, or backend='gloo' to run on CPU"
            )
    requested = None
    if env and "MASTER_PORT" in env:
        try:
            requested = int(env["MASTER_PORT"])
        except ValueError as e:
            raise DistUsageError(f"MASTER_PORT={env['MASTER_PORT']!r}: expected a port number") from e
    store = make_store(requested, notes)
    spec.setdefault("pg_timeout", max(3.0 * timeout, timeout + 30.0))
    write_file(os.path.join(run_dir, "spec.json"), json.dumps(spec), mode=0o600)
    child_env = _prepare_env(env, nprocs, store.port, spec["backend"], flight_recorder, detail)
    session = Session(spec, nprocs, float(timeout), child_env, echo, notes, run_dir, store.port)
    try:
        try:
            session.start()
        except OSError as e:
            raise DistRunError(f"could not start the {nprocs} rank processes: {e}") from e
        session.loop()
    finally:
        session.close()
        del store
    result = session_result(session, session.port)
    if session.interrupted:  # the ranks are gone; the user's interrupt goes on, carrying what was seen
        raise RunInterrupted(result)
    return result


def run(source: str, nprocs: int, *, timeout: float = 60.0, backend: str | Backend = "gloo",
        env: Mapping[str, str] | None = None, use: Iterable[str] | str | None = None,
        namespace: Mapping[str, Any] | None = None, echo: Echo | None | bool = True, flight_recorder: bool = True,
        detail: bool = False, keep_files: bool = False) -> DistRun:
    """Run ``source`` on ``nprocs`` local ranks with the process group initialised.

    Each rank is a fresh Python process with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free
    MASTER_PORT (the launcher owns the rendezvous store, so the port can never be "already in use").  Output is
    streamed live with ``[rank N]`` prefixes and kept.  No process survives the call: not after a failure, a
    hang, or a KeyboardInterrupt.  An interrupt kills every rank (after taking their stacks) and is re-raised as
    ``RunInterrupted``, a ``KeyboardInterrupt`` whose ``.run`` is the ``DistRun`` of what was seen.

    Parameters
    ----------
    source : str
        Python code run as ``__main__`` in every rank, after ``init_process_group(backend)``.
    nprocs : int
        Number of ranks.
    timeout : float
        Hang watchdog: when no rank makes progress (prints, moves to another Python line, exits) for this many
        seconds, every rank's stack and Flight Recorder entries are taken and every rank is killed.  The process
        group's own timeout is set longer (``max(3 * timeout, timeout + 30)``) so that the watchdog fires first.
    backend : {"gloo", "nccl"}
        Process-group backend; with ``nccl`` each rank calls ``torch.cuda.set_device(LOCAL_RANK)`` first.
    env : mapping, optional
        Extra environment variables for the ranks (``NCCL_DEBUG=INFO``, ...).  A ``MASTER_PORT`` here is tried
        first; when taken, a free port is used and the run's ``notes`` say so.
    use : iterable of str or str, optional
        Names from the notebook to ship: functions and classes by source, modules as imports, other values
        pickled.  Lambdas, closures, CUDA tensors, open files and other unpicklable values are refused with the
        reason.
    namespace : mapping, optional
        Where to look the ``use`` names up (default: the caller's globals).
    echo : bool or callable, optional
        True prints each rank's lines as they arrive; a callable ``(rank, stream, line)`` receives them; False
        keeps them quiet (still kept in the result).
    flight_recorder : bool
        Record collectives (``TORCH_FR_BUFFER_SIZE=200``) so that a hang report can show each rank's last ones.
    detail : bool
        Set ``TORCH_DISTRIBUTED_DEBUG=DETAIL``: collective mismatches (op, shape, dtype) raise at once with a
        message that the result explains; costs extra latency per collective.
    keep_files : bool
        Keep the run folder (torch error files, per-rank dumps); its path is ``DistRun.run_dir``.

    Returns
    -------
    DistRun
        ``ok``, ``ranks`` (exit code, output, traceback per rank), ``primary`` (the rank whose failure came first
        and caused the rest), ``hang`` (what the watchdog found) and a text/HTML summary.
    """
    from nbdebug.core.dist._ship import ship

    _check_source(source)
    _check_sizes(nprocs, timeout)
    be = Backend.parse(backend)
    if isinstance(use, str):
        use = [u for u in use.split(",") if u.strip()]
    notes: list[str] = []
    shipment = ship(use or (), namespace if namespace is not None else _caller_globals())
    notes += shipment.notes
    run_dir = tempfile.mkdtemp(prefix="nbdebug-dist-")
    try:
        source_path = os.path.join(run_dir, "cell.py")
        write_file(source_path, source, mode=0o600)
    except BaseException:  # never leave a run folder behind
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    try:
        if shipment.preamble:
            write_file(os.path.join(run_dir, "preamble.py"), shipment.preamble, mode=0o600)
        if shipment.values is not None:  # the notebook's values: readable by this user only
            write_file(os.path.join(run_dir, "values.pkl"), shipment.values, mode=0o600)
    except BaseException:  # never leave a run folder behind
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    if shipment.shipped:
        notes.append("shipped to the ranks: " + ", ".join(shipment.shipped))
    # like multiprocessing's spawn: the ranks see the modules the kernel sees (sys.path edits in the notebook too)
    spec = {"mode": "cell", "backend": be.value, "source_path": source_path, "cwd": os.getcwd(),
            "sys_path": [p for p in sys.path if isinstance(p, str)]}
    return _launch(spec, nprocs, timeout, env, default_echo if echo is True else (echo or None), flight_recorder,
                   detail, keep_files, run_dir, notes)


def run_script(path: str, nprocs: int, *, argv: Iterable[str] = (), timeout: float = 60.0,
               backend: str | Backend = "gloo", env: Mapping[str, str] | None = None, echo: Echo | None | bool = True,
               flight_recorder: bool = True, detail: bool = False, keep_files: bool = False) -> DistRun:
    """Run a script on ``nprocs`` local ranks, like ``torchrun --standalone --nproc-per-node N``.

    The script initialises the process group itself (``init_process_group`` gets the launcher's timeout when it
    does not pass one).  Everything else is as in ``run``.

    Parameters
    ----------
    path : str
        The script.
    nprocs : int
        Number of ranks.
    argv : iterable of str
        Arguments for the script (``sys.argv[1:]``).
    timeout, backend, env, echo, flight_recorder, detail, keep_files
        As in ``run``.

    Returns
    -------
    DistRun
        The outcome, as for ``run``.
    """
    if not os.path.isfile(path):
        raise DistUsageError(f"script {path!r} does not exist; expected a Python file to run on every rank")
    _check_sizes(nprocs, timeout)
    be = Backend.parse(backend)
    run_dir = tempfile.mkdtemp(prefix="nbdebug-dist-")
    spec = {"mode": "script", "backend": be.value, "source_path": os.path.abspath(path), "argv": list(argv),
            "cwd": os.getcwd()}
    return _launch(spec, nprocs, timeout, env, default_echo if echo is True else (echo or None), flight_recorder,
                   detail, keep_files, run_dir, [])


def _check_source(source: object) -> None:
    """The cell's code: a str that can be written as UTF-8 (checked before anything is created)."""
    if not isinstance(source, str):
        raise DistUsageError(f"source={type(source).__name__} {source!r:.60}: expected the code to run, as a str")
    try:
        source.encode("utf-8")
    except UnicodeEncodeError as e:
        raise DistUsageError(f"source has a character that cannot be written as UTF-8 at position {e.start} "
                             f"({source[e.start]!r}, a lone surrogate?): expected text Python can save") from e


def _check_sizes(nprocs: object, timeout: object) -> None:
    if isinstance(nprocs, bool) or not isinstance(nprocs, int) or nprocs < 1:
        raise DistUsageError(f"nprocs={nprocs!r}: expected a positive number of ranks, e.g. 2")
    if isinstance(timeout, bool) or not (isinstance(timeout, (int, float)) and timeout > 0):
        raise DistUsageError(f"timeout={timeout!r}: expected a positive number of seconds, e.g. 30")


def _caller_globals() -> Mapping[str, Any]:
    import inspect

    frame = inspect.currentframe()
    # run() <- nbdebug.dist.run facade? walk out of nbdebug's own frames
    while frame is not None and frame.f_globals.get("__name__", "").startswith("nbdebug"):
        frame = frame.f_back
    return frame.f_globals if frame is not None else {}
