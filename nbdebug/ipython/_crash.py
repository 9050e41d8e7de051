"""A dead kernel explained (``%nbdebug crash on|off``, on by default).

On load: the records of kernels that died since (segfault, abort, the out-of-memory killer, ``os._exit``) are shown
as panels and removed; then this kernel starts its own record: ``faulthandler`` writes the stack of every thread
into a file of this kernel's own if a fatal signal comes, and a small JSON record holds the running cell and the
memory in use (sampled every second while a cell runs, by one daemon thread that sleeps between cells).
Unloading (or a normal exit) hands faulthandler back, stops the thread and removes both files.

A forked child (a DataLoader worker on Linux) inherits the fault file: right after the fork it hands faulthandler
back to where it wrote before nbdebug and owns no record, so its crash or exit never touches the kernel's.
"""

from __future__ import annotations

import atexit
import faulthandler
import json
import os
import sys
import threading
import time
import weakref
from typing import Any

from nbdebug.ipython._state import ExtensionState, Feature

__all__ = ["CrashRecorder", "register"]

_SAMPLE_S = 1.0
_ACTIVE: weakref.WeakSet[CrashRecorder] = weakref.WeakSet()  # the recorders on in this process
_AT_FORK: list[bool] = []  # the fork hook is registered once per process


def _after_fork_in_child() -> None:
    for recorder in list(_ACTIVE):
        recorder.forked()


class CrashRecorder:
    """This kernel's record and fault file; ``enable``/``disable`` put them in place and take them away."""

    def __init__(self, state: ExtensionState) -> None:
        self.state = state
        self.on = False
        self.record_path = self.fault_path = ""
        self._fault_file: Any = None
        self._was_enabled = False
        self._record: dict[str, Any] = {}
        self._running = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._removed = False
        self._pid = 0  # the process whose record this is

    # -- the record -----------------------------------------------------------------------------------------------
    def _write(self) -> None:
        from nbdebug._files import write_file

        if os.getpid() != self._pid:  # a forked child writes nothing into its parent's record
            return
        with self._lock:  # under the lock: a write never lands after _remove (a sampler racing the exit)
            if self._removed:
                return
            data = json.dumps(self._record, default=str)
            try:
                write_file(self.record_path, data, mode=0o600)
            except OSError:  # a full disk must not break the user's cell
                pass

    def _sample(self) -> None:
        from nbdebug.core.explain._live import host_memory

        mem = host_memory()
        with self._lock:
            for key in ("rss", "peak_rss", "vm_size"):
                self._record[key] = mem.get(key)

    def _loop(self) -> None:
        # the installed versions, off the load path (reading packages' metadata takes milliseconds)
        from nbdebug.core.explain._live import installed_versions

        versions = {k: v for k, v in installed_versions().items() if k in ("torch", "numpy", "torchvision")}
        with self._lock:
            self._record["versions"] = versions
        self._write()
        while not self._stop.is_set():
            if self._running.wait(_SAMPLE_S) and not self._stop.is_set():
                self._sample()
                self._write()
                self._stop.wait(_SAMPLE_S)

    def pre_run_cell(self, info: Any = None) -> None:
        if not self.on:
            return
        from nbdebug.core._cells import cell_names

        code = str(getattr(info, "raw_cell", "") or "")
        transformed = str(getattr(info, "transformed_cell", "") or code)
        shell = self.state.shell
        # IPython counts the cell before pre_run_cell: this cell is the number before it
        number = int(getattr(shell, "execution_count", 1)) - (1 if getattr(info, "store_history", False) else 0)
        try:  # the file name this cell's code will run under (ipykernel: a temp file; IPython: <ipython-input-N-…>)
            cell_file = shell.compile.get_code_name(code, transformed, number)
        except Exception:  # noqa: BLE001 - a shell without one: frames are named by their file's shape
            cell_file = ""
        names = cell_names()
        with self._lock:
            self._record.update(cell=f"In [{number}]", cell_file=cell_file, code=code[:20_000], started=time.time(),
                                state="running", cells=dict(list(names.items())[-200:]))
        self._sample()
        self._write()
        self._running.set()

    def post_run_cell(self, result: Any = None) -> None:
        if not self.on:
            return
        self._running.clear()
        with self._lock:
            self._record["state"] = "idle"
        self._write()

    # -- switching ------------------------------------------------------------------------------------------------
    def enable(self) -> None:
        if self.on:
            return
        from nbdebug._files import open_append
        from nbdebug.core.explain._deadkernel import record_paths, state_dir
        from nbdebug.core.explain._live import host_memory

        folder = state_dir()
        self.record_path, self.fault_path = record_paths(folder)
        self._fault_file = open_append(self.fault_path, mode=0o600)
        self._was_enabled = faulthandler.is_enabled()
        faulthandler.enable(file=self._fault_file, all_threads=True)
        self._pid = os.getpid()
        if not _AT_FORK and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_after_fork_in_child)
            _AT_FORK.append(True)
        _ACTIVE.add(self)
        mem = host_memory()
        limits = {k: mem[k] for k in ("cgroup_limit", "address_space_limit", "machine") if k in mem}
        self._record = {"pid": self._pid, "python": sys.version.split()[0], "state": "idle", "limits": limits,
                        "rss": mem.get("rss"), "peak_rss": mem.get("peak_rss")}
        self._removed = False
        self._write()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="nbdebug-crash-record", daemon=True)
        self._thread.start()
        atexit.register(self._remove)
        self.on = True

    def disable(self) -> None:
        if not self.on:
            return
        self.on = False
        self._stop.set()
        self._running.set()  # wake the sampler so it sees the stop
        if self._thread is not None:
            self._thread.join(timeout=2 * _SAMPLE_S + 1)
            self._thread = None
        self._running.clear()
        atexit.unregister(self._remove)
        _ACTIVE.discard(self)
        self._remove()

    def forked(self) -> None:
        """In a child just forked from this kernel: faulthandler as before nbdebug, and no record of its own."""
        if not self.on or os.getpid() == self._pid:
            return
        self.on = False
        self._lock = threading.Lock()  # the parent's sampler may have held it at the fork
        self._removed = True
        self._thread = None
        atexit.unregister(self._remove)
        _ACTIVE.discard(self)
        self._restore_faulthandler()
        self._fault_file = None  # the child's copy of the descriptor; the parent's stays open

    def _restore_faulthandler(self) -> None:
        faulthandler.disable()
        if self._was_enabled:  # put back what the kernel had (ipykernel writes fatal stacks to its stderr)
            if sys.__stderr__ is not None:
                try:
                    faulthandler.enable(file=sys.__stderr__, all_threads=True)
                except (ValueError, AttributeError, OSError):
                    pass

    def _remove(self) -> None:
        if os.getpid() != self._pid:  # a forked child never removes its parent's record
            return
        self._stop.set()
        with self._lock:
            self._removed = True
        if self._fault_file is not None:
            # faulthandler first: a fatal signal later in the exit must not write to a closed (or reused) descriptor
            self._restore_faulthandler()
            try:
                self._fault_file.close()
            except OSError:
                pass
            self._fault_file = None
        for path in (self.record_path, self.fault_path):
            if path:
                try:
                    os.unlink(path)
                except OSError:
                    pass


def show_dead_kernels() -> list[Any]:
    """Explain (and display) what kernels that died since left behind; the records are removed once read."""
    from nbdebug.core.explain._deadkernel import dead_kernels, explain_dead, state_dir

    try:
        folder = state_dir()
        if not any(name.startswith("kernel-") for name in os.listdir(folder)):  # the common case: nothing to read
            return []
        found = dead_kernels(folder)
    except OSError as e:
        print(f"nbdebug: the records of earlier kernels could not be read ({e})", file=sys.stderr)
        return []
    shown = [explain_dead(dead) for dead in found]
    if shown:
        from IPython.display import display

        for diagnosis in shown:
            display(diagnosis)
    return shown


def register(state: ExtensionState) -> None:
    """Show the panels of kernels that died, then keep this kernel's own record (feature ``crash``)."""
    try:
        state.dead_kernels = show_dead_kernels()  # type: ignore[attr-defined]
    except Exception as e:  # noqa: BLE001 - loading must go on whatever an old record holds
        print(f"nbdebug: an earlier kernel's record could not be shown ({type(e).__name__}: {e})", file=sys.stderr)
    recorder = CrashRecorder(state)
    state.crash_recorder = recorder  # type: ignore[attr-defined]
    state.register_event("pre_run_cell", recorder.pre_run_cell)
    state.register_event("post_run_cell", recorder.post_run_cell)
    feature = Feature("crash", "if the kernel dies (segfault, abort, out of memory), the next %load_ext nbdebug "
                      "shows what it was doing", recorder.enable, recorder.disable)
    try:
        state.add_feature(feature, on=True)
    except OSError as e:  # no private folder for the record: the rest of nbdebug works without it
        print(f"nbdebug: the crash record is off ({e})", file=sys.stderr)
