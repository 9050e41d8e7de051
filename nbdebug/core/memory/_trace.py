"""``memtrace()``: what a block of code allocated, at its peak and still alive after it, on CUDA or on CPU.

On CUDA the allocator's own history is recorded (``torch.cuda.memory._record_memory_history``) and snapshotted at
the end.  On CPU, PyTorch's profiler records every allocation and free with the Python calls above it (memory and
the Python tracer only, see ``_cpu_record``); the allocations are converted into the same snapshot model.  Recording is
switched off in ``finally`` whatever the block does (exception, ``KeyboardInterrupt``).
"""

from __future__ import annotations

import os
import sys
import time
from collections import ChainMap
from collections.abc import Mapping
from typing import Any

from nbdebug.core._findings import sort_findings
from nbdebug.core._recorder import Recorder
from nbdebug.core.memory._cpu_record import CpuRecording, model_of, other_threads_ran, walk_allocations
from nbdebug.core.memory._kept_lists import look_at_lists
from nbdebug.core.memory._model import site_columns
from nbdebug.core.memory._snapshot import MemorySnapshot, load_snapshot
from nbdebug.core.memory._trace_result import MemTrace, build, build_cpu
from nbdebug.errors import NbdebugError

__all__ = ["memtrace", "MemTraceRecorder", "MemTrace", "cuda_recording"]

# The OOM feature keeps CUDA history recording on; memtrace restores its settings afterwards instead of stopping.
cuda_recording: dict[str, Any] = {"keep_on": None}


class MemTraceRecorder(Recorder):
    """The object ``with memtrace() as rec:`` gives; ``rec.result`` is the ``MemTrace`` once the block ends (the
    one recorder shape, ``core._recorder``), and the recorder then reads like it (``rec.peak_bytes``)."""

    _label = "memtrace recorder"

    def __init__(self, device: Any = None, *, max_entries: int = 1_000_000, stacks: bool = True,
                 save: str | os.PathLike[str] | None = None, categories: bool = False) -> None:
        self.device = device
        self.max_entries = int(max_entries)
        self.stacks = stacks
        self.save_path = save
        self.categories = categories
        self._result: MemTrace | None = None
        self._kind = ""
        self._recording: Any = None
        self._finished: Any = None
        self._raw: Any = None
        self._t0 = 0.0

    def _resolve(self) -> str:
        import torch

        dev = self.device
        if dev is None:
            return f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu"
        if isinstance(dev, int):
            return f"cuda:{dev}"
        try:
            d = torch.device(dev)
        except (RuntimeError, TypeError) as e:
            raise NbdebugError(f"memtrace(device={dev!r}): not a device; expected a CUDA device or 'cpu'") from e
        if d.type == "cuda":
            if not torch.cuda.is_available():
                raise NbdebugError(f"memtrace(device={dev!r}): CUDA is not available here; expected 'cpu' or None")
            return f"cuda:{d.index if d.index is not None else torch.cuda.current_device()}"
        if d.type != "cpu":
            raise NbdebugError(f"memtrace(device={dev!r}): expected a CUDA device or 'cpu'")
        return "cpu"

    def start(self) -> MemTraceRecorder:
        """Start recording."""
        self._kind = self._resolve()
        self._t0 = time.perf_counter()
        if self._kind == "cpu":
            # Kineto prints "profiler_start/stop" lines into the cell unless its log level is raised; a user's
            # own setting wins, and ours is taken back when recording stops
            self._set_kineto = "KINETO_LOG_LEVEL" not in os.environ
            os.environ.setdefault("KINETO_LOG_LEVEL", "99")
            # the categories need the operators and their input shapes (the memory profile's tensor identities),
            # which cost a fifth of a step and more: recorded only when categories are asked for
            recording = CpuRecording(ops=self.categories)
            try:
                recording.start()
            except BaseException:
                recording.stop()
                self._restore_env()
                raise
            self._recording = recording
        else:
            import torch

            if cuda_recording.get("keep_on"):  # start a fresh ring buffer so the trace holds only this block
                torch.cuda.memory._record_memory_history(enabled=None)
            torch.cuda.memory._record_memory_history(
                enabled="all", context="all" if self.stacks else None, stacks="python",
                max_entries=self.max_entries)
        return self

    def stop(self) -> None:
        """Stop recording (always safe to call); the conversion into a ``MemTrace`` happens in :meth:`finish`."""
        if self._kind == "cpu":
            recording, self._recording = self._recording, None
            try:
                if recording is not None:
                    recording.stop()
                    self._finished = recording
            finally:
                self._restore_env()
        elif self._kind.startswith("cuda"):
            import torch

            try:
                self._raw = torch.cuda.memory._snapshot()
            finally:
                keep = cuda_recording.get("keep_on")
                if keep:  # the OOM feature wants history on: restore its settings
                    torch.cuda.memory._record_memory_history(**keep)
                else:
                    torch.cuda.memory._record_memory_history(enabled=None)

    def _restore_env(self) -> None:
        if getattr(self, "_set_kineto", False):
            os.environ.pop("KINETO_LOG_LEVEL", None)
            self._set_kineto = False

    def finish(self, *, cells: Mapping[str, str] | None = None, namespace: Mapping[str, Any] | None = None,
               block: tuple[str, int] | None = None) -> MemTrace:
        """Convert the recording into a ``MemTrace``.

        ``cells`` maps notebook cells' file names to the names the user knows (``In [12]``), for the sites;
        ``namespace`` is where the block ran (a notebook's, or the caller's locals), where a list that a retained
        line appends to is looked at (does it keep graphs?).  Nothing of it is kept.  ``block`` is where the
        block's code is, ``(file, line of the with-statement)``, or ``(file, 0)`` for a whole cell.
        """
        seconds = time.perf_counter() - self._t0
        if self._kind == "cpu":
            recording = self._finished
            if recording is None or recording.results is None:
                raise NbdebugError("memtrace: nothing was recorded (the recorder was never started)")
            allocations = walk_allocations(recording.results)
            site_cols = site_columns(allocations.frames, allocations.stacks)
            snap = MemorySnapshot(lambda: model_of(allocations, site_cols), source="memtrace (cpu)")
            snap._default = 0
            snap.cells = dict(cells or {})
            keys = allocations.alloc_keys() if self.categories else []
            result = build_cpu(allocations, snap, site_cols, seconds, recording.profile, keys)
            if self.categories:
                result.by_category()
            _note_other_threads(result, recording)
        else:
            if self._raw is None:
                raise NbdebugError(f"memtrace: no snapshot could be taken on {self._kind}")
            dev = int(self._kind.split(":")[1])
            snap = load_snapshot(self._raw, name=f"memtrace ({self._kind})")
            snap._default = dev
            snap.cells = dict(cells or {})
            result = build(snap, self._kind, seconds, raw=self._raw)
        if namespace is not None and result.retained_bytes > 0:
            object.__setattr__(result, "_kept_lists", look_at_lists(result.retained_sites, namespace, snap.cells,
                                                                     result._kept[2], block))
        self._result = result
        if self.save_path:
            try:
                result.save(self.save_path)
            except OSError as e:  # reported beside the recording (and the cell's own error), never instead of them
                import warnings

                warnings.warn(f"memtrace: the recording was not saved to {os.fspath(self.save_path)!r} "
                              f"({type(e).__name__}: {e}); the report below is complete", RuntimeWarning,
                              stacklevel=2)
        return result

    @property
    def result(self) -> MemTrace | None:
        """The ``MemTrace`` of the block, once it ended; None before."""
        return self._result

    def __getattr__(self, name: str) -> Any:
        # after the block, the recorder reads like its MemTrace (rec.peak_bytes, rec.top_sites, ...)
        result = self.__dict__.get("_result")
        if result is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(result, name)

    def __repr__(self) -> str:
        if self._result is None:
            return f"<memtrace recorder on {self._kind or 'an unresolved device'}: not finished>"
        return super().__repr__()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
        caller = sys._getframe(1)  # the frame running the with-block: its names and code, for the lists it filled
        namespace = ChainMap(caller.f_locals, caller.f_globals)
        block = (caller.f_code.co_filename, caller.f_lineno)
        del caller
        if exc[0] is None:
            self.finish(namespace=namespace, block=block)
        else:  # still give the user the numbers of a failing block, without masking its error
            try:
                self.finish(namespace=namespace, block=block)
            except Exception as e:  # pragma: no cover - the user's error matters more
                print(f"nbdebug memtrace: could not build the report ({e})", file=sys.stderr)


#: memory grown unseen while only threads from before the block ran, past which they are named (see below)
_OTHER_THREADS_UNSEEN = 64 << 20


def _note_other_threads(result: MemTrace, recording: CpuRecording) -> None:
    """Add a remark (a warning when memory grew unseen) when threads other than the recording one ran in the block:
    PyTorch's profiler records the memory of the thread that started it only (see ``_cpu_record``)."""
    from nbdebug._units import fmt_bytes
    from nbdebug.core._findings import Severity
    from nbdebug.core.knowledge import finding

    started, growth = recording.started_threads, recording.rss_growth
    unseen = growth - max(result.delta_bytes, 0) if growth is not None else 0
    # the resident memory also grows for what no thread allocates through torch (Python objects, library
    # buffers, the C allocator's arenas): a thread started in the block, known not to be recorded, makes 1 MiB
    # unseen a warning; threads that were there before (a kernel's own, which run Python in every cell) are named
    # only when far more grew unseen than was recorded, and then as a remark, never a warning
    if started:
        warn = unseen >= 1 << 20
    else:
        warn = False
        if unseen < max(_OTHER_THREADS_UNSEEN, max(result.delta_bytes, 0)):
            return
    ran = other_threads_ran(recording.results)  # read only here: the event tree's roots cost a call each
    if not started and not ran:  # the memory grew on this thread's own, outside torch's allocator
        return
    names = ", ".join(started[:5]) + (f" and {len(started) - 5} more" if len(started) > 5 else "")
    who = []
    if started:
        who.append(f"{len(started)} thread{'s' * (len(started) > 1)} started in the block ({names})")
    if ran:
        who.append(f"{ran} other thread{'s' * (ran > 1)} that ran Python code meanwhile")
    rss = (f"; the process's resident memory grew by {fmt_bytes(growth)} while other threads ran, against "
           f"{fmt_bytes(max(result.delta_bytes, 0))} recorded" if growth is not None else "")
    note = finding(
        "memory_other_threads",
        (f"memtrace on CPU recorded the allocations of the thread that ran the block "
         f"({recording.thread_name}) only (PyTorch's profiler reports memory per thread); not covered: "
         f"{' and '.join(who)}{rss}."),
        where=tuple(started[:3]), severity=Severity.WARNING if warn else Severity.INFO,
        evidence={"recorded_thread": recording.thread_name, "threads_started": len(started),
                  "other_threads_ran": ran, "rss_growth_bytes": growth, "recorded_delta_bytes": result.delta_bytes})
    # findings is a cached property of the frozen result: computed here, with the remark added, only in this case
    result.__dict__["findings"] = sort_findings((*result.findings, note))


def memtrace(device: Any = None, *, max_entries: int = 1_000_000, stacks: bool = True,
             save: str | os.PathLike[str] | None = None, categories: bool = False) -> MemTraceRecorder:
    """Record what a block of code allocates.

    Parameters
    ----------
    device : int, str or torch.device, optional
        CUDA device to record (allocator history), or ``"cpu"`` (profiler).  Default: the current CUDA device
        when CUDA is available, else CPU.
    max_entries : int
        Size of CUDA's history ring buffer.
    stacks : bool
        Record Python stacks of CUDA allocations (needed for sites).
    save : path, optional
        Also write the recording as a snapshot pickle.
    categories : bool
        On CPU, label allocations parameter/activation/gradient/optimizer state/temporary (records tensor shapes,
        about a fifth of a step more, and runs the profiler's memory-profile analysis).  Without it the
        recording is cheaper and ``MemTrace.by_category()`` raises ``NbdebugError`` saying so.

    Returns
    -------
    MemTraceRecorder
        A context manager; after the block, ``.result`` is the :class:`MemTrace` (and the recorder reads like
        it: ``rec.peak_bytes``, ``rec.retained_sites``).

    Examples
    --------
    >>> with nbdebug.memtrace("cpu") as rec:          # doctest: +SKIP
    ...     loss = model(x).sum()
    >>> rec.retained_bytes, rec.retained_sites[0].site  # doctest: +SKIP
    """
    return MemTraceRecorder(device, max_entries=max_entries, stacks=stacks, save=save, categories=categories)
