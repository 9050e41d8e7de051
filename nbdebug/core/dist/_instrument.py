"""``instrument()``: one call at the top of a training script so that a failed or hung job leaves what
``postmortem()`` needs, one folder for the whole job (on a shared file system for multi-node jobs).

Per rank it writes, in torch's own formats where torch has one:

- ``fr_rank_<R>``: the Flight Recorder dump (torch's pickle, the name ``fr_trace`` expects), written when the rank
  raises, when its main thread has not moved for ``hang_after`` seconds (a hang: gloo has no dump on timeout, and a
  background thread can dump while the main thread is blocked in a collective), and at exit (without stacks);
  with NCCL also by NCCL's own watchdog on timeout (``TORCH_NCCL_DUMP_ON_TIMEOUT``);
- ``error_rank<R>.json``: the error file of torchelastic's ``@record`` (message, traceback, timestamp) plus the
  rank, host and a sub-second time;
- ``stacks_rank<R>.txt``: ``faulthandler`` stacks of every thread on ``SIGUSR1`` (``kill -USR1 PID`` or
  ``scancel --signal=USR1``), on a fatal error (segfault, abort) and when the watchdog sees a hang;
- ``rank<R>.log``: the rank's stdout and stderr, each line prefixed ``[rankR]:``, headed by its host and pid;
- ``nccl_<host>_<pid>.log``: ``NCCL_DEBUG`` output, when the job uses NCCL.

Must run before ``init_process_group``: the Flight Recorder's buffer size is read when the process group starts.
"""

from __future__ import annotations

import atexit
import errno
import faulthandler
import io
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from nbdebug._files import open_append, write_file
from nbdebug.core._result import Result
from nbdebug.errors import InvalidArgumentError, describe_exception

__all__ = ["instrument", "Instrumented"]

_ACTIVE: dict[str, Any] = {}


@dataclass(frozen=True, repr=False)
class Instrumented(Result):
    """What ``instrument()`` set up for this rank.

    Attributes
    ----------
    path : str
        The job's artifact folder (give it to ``postmortem``).
    rank, world_size : int
        This process's rank and the job's size (from torchrun / SLURM variables; 0 and 1 when neither is set).
    host : str
        This machine's name.
    files : dict
        What is written where (kind -> path).
    env : dict
        Environment variables set for torch and NCCL (only those that were not set already).
    """

    path: str
    rank: int
    world_size: int
    host: str
    files: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)

    def _summary_line(self) -> str:
        return f"rank {self.rank}/{self.world_size} on {self.host} -> {self.path}"


def _rank_and_size() -> tuple[int, int, int]:
    env = os.environ
    rank = env.get("RANK") or env.get("SLURM_PROCID") or env.get("OMPI_COMM_WORLD_RANK") or "0"
    size = env.get("WORLD_SIZE") or env.get("SLURM_NTASKS") or env.get("OMPI_COMM_WORLD_SIZE") or "1"
    local = env.get("LOCAL_RANK") or env.get("SLURM_LOCALID") or "0"
    try:
        return int(rank), int(size), int(local)
    except ValueError as e:
        raise InvalidArgumentError(f"RANK={rank!r} WORLD_SIZE={size!r}: expected whole numbers (as torchrun or "
                                   "SLURM set them)") from e


def _default_path() -> str:
    job = (os.environ.get("SLURM_JOB_ID") or os.environ.get("TORCHELASTIC_RUN_ID") or "").strip()
    return os.path.join(os.getcwd(), "nbdebug-artifacts", job if job and job != "none" else "last")


class _Tee(io.TextIOBase):
    """Write to the original stream and, with a ``[rankN]:`` prefix on each line, to the rank's log."""

    def __init__(self, stream: TextIO, log: TextIO, prefix: str, lock: threading.Lock) -> None:
        self._stream, self._log, self._prefix, self._lock = stream, log, prefix, lock
        self._at_line_start = True

    def write(self, text: str) -> int:
        n = self._stream.write(text)
        try:
            with self._lock:
                parts = text.split("\n")
                for i, part in enumerate(parts):
                    if part and self._at_line_start and not part.startswith(self._prefix):
                        self._log.write(self._prefix)  # torch prefixes its own traceback lines already
                    self._log.write(part)
                    if i < len(parts) - 1:
                        self._log.write("\n")
                        self._at_line_start = True
                    elif part:
                        self._at_line_start = False
                if "\n" in text:
                    self._log.flush()
        except (OSError, ValueError):  # the log must never cost the user their output
            pass
        return n

    def flush(self) -> None:
        self._stream.flush()
        try:
            self._log.flush()
        except (OSError, ValueError):
            pass

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._stream, "encoding", "utf-8")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


_WRITTEN: dict[str, tuple[int, bool]] = {}  # path -> (entries, with stacks) of the dump written there


def _dump_fr(path: str, with_stacks: bool, tries: int = 1) -> bool:
    """Write this process's Flight Recorder buffer (torch's pickle) to ``path``; False when nothing was written.

    A dump never replaces one that holds more entries (or as many, with stacks): a dump taken while the process
    group is failing can come back empty.  An empty dump is retried ``tries`` times, 0.2 s apart.
    """
    import pickle

    torch = sys.modules.get("torch")
    if torch is None:
        return False
    for attempt in range(max(1, tries)):
        try:
            dump = torch._C._distributed_c10d._dump_fr_trace(True, with_stacks, False)
            entries = len(pickle.loads(dump).get("entries") or ())  # this process's own dump: plain data
        except Exception:
            return False
        if entries or attempt == tries - 1:
            break
        time.sleep(0.2)
    had = _WRITTEN.get(path)
    if had is not None and (had[0] > entries or (had[0] == entries and (had[1] or not with_stacks))):
        return False
    try:
        write_file(path, dump)  # a reader never sees half a dump; a symlink planted at the name is not followed
    except OSError:
        return False
    _WRITTEN[path] = (entries, with_stacks)
    return True


def _open_kept(path: str) -> TextIO:
    """``path`` opened for appending, never through a symlink: one planted at the name (a shared folder) is
    replaced by an empty file first, as ``write_file`` replaces one, and the open refuses a symlink planted again."""
    try:
        return open_append(path)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
    write_file(path, b"")
    return open_append(path)


def _stamp(fh: TextIO, what: str, rank: int, host: str) -> None:
    fh.write(f"# nbdebug: {what}; rank {rank} host {host} pid {os.getpid()} time {time.time():.6f}\n")
    fh.flush()


def _watch(state: dict[str, Any], hang_after: float) -> None:
    """Dump the Flight Recorder and every thread's stack once the main thread has not moved for ``hang_after``."""
    main = threading.main_thread().ident
    last: tuple[int, int] | None = None
    since = time.monotonic()
    dumped = False
    while not state.get("stop"):
        time.sleep(min(0.5, hang_after / 4))
        frame = sys._current_frames().get(main)  # type: ignore[arg-type]
        key = (id(frame.f_code), frame.f_lasti) if frame is not None else None
        now = time.monotonic()
        if key != last:
            last, since, dumped = key, now, False
            continue
        if not dumped and now - since >= hang_after:
            dumped = True
            with state["lock"]:
                fh = state["stacks"]
                _stamp(fh, f"main thread has not moved for {now - since:.1f} s", state["rank"], state["host"])
                faulthandler.dump_traceback(file=fh, all_threads=True)
                fh.flush()
            _dump_fr(state["fr"], with_stacks=False, tries=3)  # 1 ms; the launcher may kill this rank any moment
            _dump_fr(state["fr"], with_stacks=True)  # then with the Python frames (about 1 s the first time)


def instrument(path: str | os.PathLike[str] | None = None, *, hang_after: float = 120.0,
               fr_buffer: int = 2000, nccl_debug: str | None = "WARN", tee: bool = True) -> Instrumented:
    """Make this rank leave what ``nbdebug.dist.postmortem`` needs; call it first, before ``init_process_group``.

    Sets the Flight Recorder's buffer and dump-on-timeout (``TORCH_FR_BUFFER_SIZE``, ``TORCH_NCCL_DUMP_ON_TIMEOUT``,
    ``TORCH_FR_DUMP_TEMP_FILE``, ``TORCH_NCCL_ASYNC_ERROR_HANDLING=3`` so the dump is not aborted) unless already
    set, writes torch's error file when the rank raises, registers ``faulthandler`` on SIGUSR1 and for fatal
    errors, and keeps a ``[rankN]:``-prefixed log of stdout/stderr.  Calling it again in the same process returns
    the first call's result.

    Parameters
    ----------
    path : str or path, optional
        The job's artifact folder (created).  Default: ``$NBDEBUG_ARTIFACTS``, else
        ``./nbdebug-artifacts/<SLURM_JOB_ID or TORCHELASTIC_RUN_ID or "last">``.  For a multi-node job, a shared
        file system path.
    hang_after : float
        Seconds the main thread may stay on one line before the rank dumps its stacks and Flight Recorder (a hang
        on gloo, or before NCCL's own timeout).  Set it above your slowest step (checkpoint saving included).
    fr_buffer : int
        Flight Recorder entries kept per process (the last collectives).
    nccl_debug : str or None
        ``NCCL_DEBUG`` level to log to ``nccl_<host>_<pid>.log`` (None: leave NCCL's logging alone).
    tee : bool
        Keep the ``[rankN]:``-prefixed copy of stdout and stderr.

    Returns
    -------
    Instrumented
        The folder, this rank, and the files and variables set.

    Raises
    ------
    InvalidArgumentError
        For a negative ``hang_after`` / ``fr_buffer``, or a folder that cannot be created.
    """
    if _ACTIVE.get("result") is not None:
        return _ACTIVE["result"]  # type: ignore[no-any-return]
    if isinstance(hang_after, bool) or not isinstance(hang_after, (int, float)) or not hang_after > 0:
        raise InvalidArgumentError(f"hang_after={hang_after!r}: expected a positive number of seconds, e.g. 120")
    if isinstance(fr_buffer, bool) or not isinstance(fr_buffer, int) or fr_buffer < 0:
        raise InvalidArgumentError(f"fr_buffer={fr_buffer!r}: expected a number of entries >= 0, e.g. 2000")
    folder = os.fspath(path) if path is not None else (os.environ.get("NBDEBUG_ARTIFACTS") or _default_path())
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise InvalidArgumentError(f"path={folder!r}: cannot create the artifact folder ({e}); expected a "
                                   "writable folder, shared by every node of the job") from e
    rank, world, local = _rank_and_size()
    host = socket.gethostname()
    files = {
        "flight_recorder": os.path.join(folder, f"fr_rank_{rank}"),
        "error_file": os.path.join(folder, f"error_rank{rank}.json"),
        "stacks": os.path.join(folder, f"stacks_rank{rank}.txt"),
    }
    env: dict[str, str] = {}

    def setdefault(name: str, value: str) -> None:
        if name not in os.environ:
            os.environ[name] = env[name] = value

    if fr_buffer:
        setdefault("TORCH_FR_BUFFER_SIZE", str(fr_buffer))
        setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
        setdefault("TORCH_FR_DUMP_TEMP_FILE", os.path.join(folder, "fr_rank_"))
        setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")  # =1 aborts before the dump is written (pytorch#121055)
    if nccl_debug:
        setdefault("NCCL_DEBUG", str(nccl_debug))
        setdefault("NCCL_DEBUG_FILE", os.path.join(folder, "nccl_%h_%p.log"))
        files["nccl_log"] = os.path.join(folder, f"nccl_{host}_<pid>.log")

    lock = threading.Lock()
    try:
        stacks = _open_kept(files["stacks"])  # kept open for faulthandler
    except OSError as e:
        raise InvalidArgumentError(f"path={folder!r}: cannot open {files['stacks']!r} for the stacks ({e}); "
                                   "expected a writable folder where that name is not a symlink") from e
    _stamp(stacks, "instrumented", rank, host)
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True, chain=False)
    if not faulthandler.is_enabled():
        faulthandler.enable(file=stacks, all_threads=True)
    state: dict[str, Any] = {"lock": lock, "stacks": stacks, "rank": rank, "host": host,
                             "fr": files["flight_recorder"], "stop": False}
    if tee:
        files["log"] = os.path.join(folder, f"rank{rank}.log")
        try:
            log = _open_kept(files["log"])  # open for the life of the process
        except OSError as e:
            stacks.close()
            raise InvalidArgumentError(f"path={folder!r}: cannot open {files['log']!r} for the rank's log ({e}); "
                                       "expected a writable folder where that name is not a symlink") from e
        prefix = f"[rank{rank}]:"
        log.write(f"{prefix}# nbdebug: rank {rank} of {world} (local rank {local}) host {host} pid {os.getpid()} "
                  f"time {time.time():.6f}\n")
        log.flush()
        sys.stdout = _Tee(sys.stdout, log, prefix, lock)  # type: ignore[assignment]
        sys.stderr = _Tee(sys.stderr, log, prefix, lock)  # type: ignore[assignment]

    previous_hook = sys.excepthook

    def excepthook(tp: type[BaseException], value: BaseException, tb: Any) -> None:
        try:
            _write_error_file(files["error_file"], value, tb, rank, host)
            with lock:
                _stamp(stacks, f"uncaught {tp.__name__}", rank, host)
            _dump_fr(files["flight_recorder"], with_stacks=False)
            _dump_fr(files["flight_recorder"], with_stacks=True)
        except Exception:  # the user's own traceback comes first, whatever happens here
            pass
        previous_hook(tp, value, tb)

    sys.excepthook = excepthook
    _on_sigterm(state)
    threading.Thread(target=_watch, args=(state, float(hang_after)), daemon=True, name="nbdebug-hang-watch").start()

    def at_exit() -> None:
        state["stop"] = True
        _dump_fr(files["flight_recorder"], with_stacks=False)  # a rank that ended early: how far it got

    atexit.register(at_exit)
    result = Instrumented(path=folder, rank=rank, world_size=world, host=host, files=files, env=env)
    _ACTIVE["result"] = result
    return result


def _on_sigterm(state: dict[str, Any]) -> None:
    """On SIGTERM (torchrun ending the other ranks after a failure, ``scancel``), leave the stacks and the Flight
    Recorder entries first, then die of SIGTERM as before.

    A rank blocked in a collective cannot run a Python signal handler (its main thread is in C++), so the signal is
    also seen through ``signal.set_wakeup_fd`` by a thread, which does the same.  Only installed when SIGTERM has
    its default action and no wakeup fd is in use.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except ValueError:  # pragma: no cover  (only the main thread may)
        os.close(r)
        os.close(w)
        return
    if old != -1:  # someone else (an event loop) owns the wakeup fd: leave it alone
        signal.set_wakeup_fd(old)
        os.close(r)
        os.close(w)
        return
    once = threading.Lock()

    def leave_and_die(from_main: bool) -> None:
        if not once.acquire(blocking=False):
            return
        try:
            with state["lock"]:
                _stamp(state["stacks"], "terminated (SIGTERM)", state["rank"], state["host"])
                faulthandler.dump_traceback(file=state["stacks"], all_threads=True)
                state["stacks"].flush()
            _dump_fr(state["fr"], with_stacks=False)  # kept only if it holds more than what is there
        finally:
            if from_main:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            else:  # only the main thread may call signal.signal(); libc's signal() may be called from any thread
                import ctypes

                ctypes.CDLL(None).signal(int(signal.SIGTERM), 0)  # 0 == SIG_DFL
            os.kill(os.getpid(), signal.SIGTERM)

    def watch() -> None:
        while True:
            try:
                got = os.read(r, 64)
            except OSError:
                return
            if not got:
                return
            if int(signal.SIGTERM) in got:
                leave_and_die(from_main=False)

    signal.signal(signal.SIGTERM, lambda signum, frame: leave_and_die(from_main=True))
    threading.Thread(target=watch, daemon=True, name="nbdebug-sigterm").start()


def _write_error_file(path: str, exc: BaseException, tb: Any, rank: int, host: str) -> None:
    """torchelastic's error-file format (``ErrorHandler.record_exception``), with rank, host and a precise time."""
    message = describe_exception(exc)  # an exception whose __str__ fails still gets a file
    now = time.time()
    data = {
        "message": {
            "message": message,
            "extraInfo": {"py_callstack": "".join(traceback.format_exception(type(exc), exc, tb)),
                          "timestamp": str(int(now))},
        },
        "nbdebug": {"rank": rank, "host": host, "pid": os.getpid(), "time": now},
    }
    write_file(path, json.dumps(data))  # a new file renamed into place: a symlink at the name is replaced
