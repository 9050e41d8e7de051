"""CPU allocations with their Python stacks, recorded by PyTorch's profiler and turned straight into columns.

What ``%%memtrace`` needs on CPU is every allocation and free (``profile_memory``) and the chain of Python calls
above each (``with_stack``: the profiler's Python tracer).  ``torch.profiler.profile`` records more than that: an
event for every ATen operator, through a RecordFunction callback on each op.  Restricting the profiler to the
user-annotated scope drops those callbacks and their events, and nothing is lost for the attribution to lines:
an allocation's stack is made of the Python calls above it, which the Python tracer records whatever the scopes.

PyTorch's profiler reports memory only on the thread that started it (its state lives in that thread's
thread-local debug info; ``_ExperimentalConfig(profile_all_threads=True)`` records other threads' operators but no
memory at all, torch 2.13): an allocation made by another thread in the block is not in the recording.  So the
recording notes which threads could have allocated unseen: the threads started in the block (a
``threading.setprofile`` hook that removes itself at a new thread's first call) and the threads that were there
and ran Python code meanwhile (the Python tracer's event tree has roots per thread), and how much the process's
resident memory grew, for the report to say plainly what is not covered.

The recording is then converted without the intermediate snapshot dict: one walk of the event tree collects the
allocations with their call chains, and the columnar model is built from numpy arrays.  The snapshot dict (the
format ``torch.cuda.memory._dump_snapshot`` writes) is made only when the recording is saved.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from functools import lru_cache
from operator import attrgetter
from typing import Any

import numpy as np

from nbdebug.core.memory._model import (
    ACTIONS,
    ALLOC,
    FREE_COMPLETED,
    FREE_REQUESTED,
    Model,
    clip_text,
    site_columns,
)
from nbdebug.core.memory._sites import OPERATOR_LINE, Frame
from nbdebug.errors import NbdebugError

__all__ = ["CpuRecording", "Allocations", "walk_allocations", "other_threads_ran", "model_of", "snapshot_dict_of"]

_EXTRA, _START = attrgetter("extra_fields"), attrgetter("start_time_ns")
_ALLOC_SIZE, _PTR, _DEVICE_TYPE = attrgetter("alloc_size"), attrgetter("ptr"), attrgetter("device.type")


class CpuRecording:
    """The profiler switched on for memory and Python stacks only, and off again; ``results`` once stopped.

    With ``ops=True`` (the categories need the operators and their input shapes) ``torch.profiler.profile`` is
    used as it is, with ``record_shapes``.
    """

    def __init__(self, *, ops: bool = False) -> None:
        self.ops = ops
        self.results: Any = None  # the profiler's kineto results (``experimental_event_tree()``)
        self.profile: Any = None  # the torch.profiler.profile, when ops are recorded
        self._on = False
        self.thread_name = ""  # the thread that recorded (the only one whose allocations are recorded)
        self.started_threads: list[str] = []  # names of the threads started while recording (not recorded)
        self.rss_growth: int | None = None  # how much the process's resident memory grew while other threads ran
        self._rss0: int | None = None
        self._hook: Any = None

    def start(self) -> None:
        """Start recording on this thread.

        Raises ``NbdebugError`` when a profiler is already recording: starting another would end the user's own
        profile without a word (torch replaces the session), and neither would get a complete trace.
        """
        from torch._C._autograd import _profiler_enabled

        if _profiler_enabled():
            raise NbdebugError("memtrace on CPU records through torch.profiler, and a profiler is already recording "
                               "(a torch.profiler.profile that is still open); end it first, or read memory from that "
                               "profile (profile_memory=True)")
        self._watch_threads()
        if self.ops:
            from torch.profiler import ProfilerActivity, profile

            prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True)
            prof.__enter__()
            self.profile, self._on = prof, True
            return
        import torch.autograd.profiler as autograd_profiler
        from torch._C._autograd import _enable_profiler, _prepare_profiler
        from torch._C._profiler import (
            ProfilerActivity,
            ProfilerConfig,
            ProfilerState,
            RecordScope,
            _ExperimentalConfig,
        )

        # state, report_input_shapes, profile_memory, with_stack, with_flops, with_modules, experimental_config
        config = ProfilerConfig(ProfilerState.KINETO, False, True, True, False, False, _ExperimentalConfig())
        activities = {ProfilerActivity.CPU}
        _prepare_profiler(config, activities)
        # only user-annotated scopes (record_function): no callback and no event per ATen op (the scopes argument
        # is missing from torch's type stubs)
        enable: Any = _enable_profiler
        enable(config, activities, {RecordScope.USER_SCOPE})
        self._on = True
        started = getattr(autograd_profiler, "_run_on_profiler_start", None)
        if started is not None:  # what torch.profiler does: its Python-side "profiler is on" flag
            started()

    def _watch_threads(self) -> None:
        """Note the threads started from now on (their first Python call), and the process's resident memory from
        when more than this thread runs (reading it costs tens of microseconds: not paid when none does)."""
        self.thread_name = threading.current_thread().name
        if threading.active_count() > 1:
            self._rss0 = _resident_bytes()
        if threading.getprofile() is not None:  # someone's own hook for new threads: left alone, not noted
            return
        started = self.started_threads

        def note_thread(frame: Any, event: str, arg: Any) -> None:
            sys.setprofile(None)  # once per thread: the thread then runs without any hook
            if self._rss0 is None:  # before the first thread started here runs its own code
                self._rss0 = _resident_bytes()
            started.append(threading.current_thread().name)

        self._hook = note_thread
        threading.setprofile(note_thread)

    def _unwatch_threads(self) -> None:
        if self._hook is not None:
            if threading.getprofile() is self._hook:
                threading.setprofile(None)  # type: ignore[arg-type]  # None takes the hook off
            self._hook = None
        if self._rss0 is not None:
            rss = _resident_bytes()
            self.rss_growth = rss - self._rss0 if rss is not None else None
            self._rss0 = None

    def stop(self) -> None:
        """Stop recording (safe to call twice, or after a failed start)."""
        self._unwatch_threads()
        if not self._on:
            return
        self._on = False
        if self.profile is not None:
            self.profile.__exit__(None, None, None)
            self.results = self.profile.profiler.kineto_results
            return
        import torch.autograd.profiler as autograd_profiler
        from torch._C._autograd import _disable_profiler

        try:
            self.results = _disable_profiler()
        finally:
            stopped = getattr(autograd_profiler, "_run_on_profiler_stop", None)
            if stopped is not None:
                stopped()


def _resident_bytes() -> int | None:
    """The process's resident memory (``/proc/self/statm``), None where there is no such file."""
    try:  # a kernel file of one short line; os.open/os.read: a third of what open() costs
        fd = os.open("/proc/self/statm", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            return int(os.read(fd, 200).split()[1]) * os.sysconf("SC_PAGE_SIZE")
        finally:
            os.close(fd)
    except (OSError, ValueError, IndexError):
        return None


def other_threads_ran(results: Any) -> int:
    """How many threads besides the recording one ran Python code while recording (their memory is not recorded).

    The Python tracer's event tree has root calls per thread whose stack it saw; a thread that ran no Python code
    while recording has no thread id (the largest unsigned one); the recording thread is one of the others.
    """
    return max(0, len({r.start_tid for r in results.experimental_event_tree()} - {(1 << 64) - 1}) - 1)


class Allocations:
    """The CPU allocations and frees of a recording, in time order, with interned stacks (innermost frame first).

    ``t_ns``, ``ptr`` and ``size`` (negative for a free) are int64 arrays; ``stack`` is an int32 id into
    ``stacks`` (-1 for a free); ``frames`` are ``(filename, line, function)``.
    """

    def __init__(self, t_ns: np.ndarray, ptr: np.ndarray, size: np.ndarray, stack: np.ndarray,
                 frames: list[Frame], stacks: list[tuple[int, ...]]) -> None:
        self.t_ns, self.ptr, self.size, self.stack = t_ns, ptr, size, stack
        self.frames, self.stacks = frames, stacks

    def alloc_keys(self) -> list[tuple[int, int]]:
        """``(ptr, start_ns)`` of each allocation, in order (to find it again in the profiler's memory profile)."""
        keep = self.size > 0
        return list(zip(self.ptr[keep].tolist(), self.t_ns[keep].tolist()))


UNREADABLE_FILE, UNREADABLE_FUNCTION = "<unreadable file name>", "<unreadable function name>"


def _caller_frame(c: Any) -> Frame:
    """The frame that made a Python call (the call's ``caller``), at the line of the call."""
    try:
        frame = (c.file_name, c.line_number, c.function_name)
    except UnicodeDecodeError:
        # the profiler's Python tracer now and then hands back a name that is not valid UTF-8 (seen with torch
        # 2.13 on CPU): keep the frame, with a placeholder, rather than lose the whole trace
        frame = (_readable(c, "file_name", UNREADABLE_FILE), c.line_number,
                 _readable(c, "function_name", UNREADABLE_FUNCTION))
    return (clip_text(frame[0]), frame[1], clip_text(frame[2]))  # C++ template names run to a few KB


def _readable(c: Any, attr: str, placeholder: str) -> str:
    try:
        return str(getattr(c, attr))
    except UnicodeDecodeError:
        return placeholder


_CALLEE = re.compile(r"(.*)\((\d+)\): (.*)", re.S)


@lru_cache(maxsize=65_536)
def _callee_frame(name: str) -> Frame | None:
    """The function a Python call ran, from the call's name (``file(first line): function``), as the frame an
    operator's allocation in it is given (its line not recorded); None for a module call
    ("nn.Module: Linear_0"), which names no file.  The same few hundred functions come back in every recording of
    a session."""
    m = _CALLEE.fullmatch(name)
    if m is None:
        return None
    return (clip_text(m.group(1)), OPERATOR_LINE, clip_text(m.group(3)))


def _other_devices_possible() -> bool:
    """Whether an accelerator is there, whose allocations the profiler would report beside the CPU's."""
    import torch

    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "is_available"):
        return bool(accelerator.is_available())
    return bool(torch.cuda.is_available())


# the kinds of the chain's links: a record_function scope (or an ATen op, when they are recorded), a Python call
# (a function written in Python), a call of a C function from Python (``torch.relu``)
_SCOPE, _PY_CALL, _PY_C_CALL = 0, 1, 2


def walk_allocations(results: Any) -> Allocations:
    """Collect the CPU allocations of a profiler recording, each with the Python calls above it.

    One walk of the event tree.  Each node costs a call into C++ per attribute read (and the first read of a
    node, just recorded, costs more), so the walk reads as little as it can: a node's children (every node), a
    leaf's name (an allocation is the leaf named ``[memory]``), and an inner node's kind and caller only when an
    allocation lies under it, once whatever the allocations under it.  The chain of inner nodes is carried down
    the walk as a linked list ``(node, outer link)`` (asking a node for its parent costs a call per node).
    """
    from torch._C._profiler import _ExtraFields_Allocation, _ExtraFields_PyCall, _ExtraFields_PyCCall

    nodes: list[Any] = []  # the allocation leaves, in the tree's order
    chains: list[Any] = []  # the chain of inner nodes above each
    add_node, add_chain = nodes.append, chains.append
    # depth first, in the tree's order (so that ties in time keep it): a stack of (iterator over a node's children,
    # chain down to that node); a node's leaves are read in one tight loop
    pending: list[tuple[Any, Any]] = [(iter(results.experimental_event_tree()), None)]
    push, pop = pending.append, pending.pop
    while pending:
        children, chain = pending[-1]
        for node in children:
            kids = node.children
            if kids:
                push((iter(kids), (node, chain)))
                break
            try:
                if node.name == "[memory]":
                    add_node(node)
                    add_chain(chain)
            except UnicodeDecodeError:  # a Python call whose name the tracer garbled (torch 2.13 on CPU), not ours
                continue
        else:
            pop()

    # the allocations' fields, each read in one C-level loop (a Python loop pays for its own bytecode on top)
    fields = list(map(_EXTRA, nodes))
    if fields and set(map(type, fields)) != {_ExtraFields_Allocation}:  # a user scope named "[memory]"
        keep_i = [i for i, f in enumerate(fields) if type(f) is _ExtraFields_Allocation]
        nodes, chains, fields = [nodes[i] for i in keep_i], [chains[i] for i in keep_i], [fields[i] for i in keep_i]
    n = len(fields)
    size = np.fromiter(map(_ALLOC_SIZE, fields), dtype=np.int64, count=n)
    if _other_devices_possible():
        on_cpu = np.fromiter(map("cpu".__eq__, map(_DEVICE_TYPE, fields)), dtype=bool, count=n)
    else:  # a CPU-only machine: reading each allocation's device costs a device object per allocation
        on_cpu = np.ones(n, dtype=bool)
    t_ns = np.fromiter(map(_START, nodes), dtype=np.int64, count=n)
    ptr = np.fromiter(map(_PTR, fields), dtype=np.int64, count=n)

    kinds = {_ExtraFields_PyCall: _PY_CALL, _ExtraFields_PyCCall: _PY_C_CALL}
    frames: list[Frame] = []
    frame_ids: dict[Frame, int] = {}
    stacks: list[tuple[int, ...]] = []
    stack_ids: dict[tuple[int, ...], int] = {}
    # id of a chain link (alive in `chains`) -> (the frame ids of its calls, innermost first; its kind); chains
    # share their outer links, so each link is read once whatever the allocations under it
    of_link: dict[int, tuple[tuple[int, ...], int]] = {}
    of_chain: dict[int, int] = {}  # id of a whole chain -> its stack id
    sid_of = [-1] * n
    for i in np.flatnonzero((size > 0) & on_cpu).tolist():
        chain = chains[i]
        sid = of_chain.get(id(chain), -1)
        if sid < 0:
            unread = []
            c = chain
            while c is not None and id(c) not in of_link:
                unread.append(c)
                c = c[1]
            ids = of_link[id(c)][0] if c is not None else ()
            for c in reversed(unread):  # outermost first, each link prepending its own frame
                call = c[0].extra_fields
                kind = kinds.get(type(call), _SCOPE)
                if kind:
                    frame = _caller_frame(call.caller)
                    fid = frame_ids.get(frame)
                    if fid is None:
                        fid = frame_ids[frame] = len(frames)
                        frames.append(frame)
                    ids = (fid, *ids)
                of_link[id(c)] = (ids, kind)
            # the innermost Python call above the allocation (past operator scopes): when it ran a Python
            # function, the allocation was made by an operator in it, not by a call (`a @ b`, `x[i]`, `a + 1`),
            # and that function is its innermost frame, with no line (see _operator_frame)
            c = chain
            while c is not None and not of_link[id(c)][1]:
                c = c[1]
            if c is not None and of_link[id(c)][1] == _PY_CALL:
                callee = _operator_frame(c[0])
                if callee is not None:
                    fid = frame_ids.get(callee)
                    if fid is None:
                        fid = frame_ids[callee] = len(frames)
                        frames.append(callee)
                    ids = (fid, *ids)
            sid = stack_ids.get(ids, -1)
            if sid < 0:
                sid = stack_ids[ids] = len(stacks)
                stacks.append(ids)
            of_chain[id(chain)] = sid
        sid_of[i] = sid
    stack = np.array(sid_of, dtype=np.int32)
    if n and on_cpu.all() and size.all() and (t_ns[1:] >= t_ns[:-1]).all():  # the usual case: in order already
        found = Allocations(t_ns, ptr, size, stack, frames, stacks)
    else:
        keep = np.flatnonzero((size != 0) & on_cpu)
        order = keep[np.argsort(t_ns[keep], kind="stable")]  # stable: ties in time keep the tree's order
        found = Allocations(t_ns[order], ptr[order], size[order], stack[order], frames, stacks)
    return found


def _operator_frame(call: Any) -> Frame | None:
    """The function an allocation was made in, when no recorded call made it (``a @ b``, ``x[i]``, ``a + 1``):
    ``call`` is the innermost Python call above the allocation (past operator scopes), a call of a Python function.

    The Python tracer records calls, each with the line it was made at; an operator is no call, so its allocation
    lands directly under the Python function running it.  That function (the callee of the innermost Python call,
    whose name reads ``file(first line): function``) is then the allocation's innermost frame, with its line
    marked as not recorded.  An allocation under a C function (``torch.relu``) needs nothing more: its call's
    line is the caller frame.
    """
    try:
        return _callee_frame(call.name)
    except UnicodeDecodeError:
        return None


def model_of(a: Allocations, site_cols: tuple[np.ndarray, list[Frame | None]] | None = None) -> Model:
    """The snapshot model of a CPU recording: one device, an ``alloc`` per allocation and a ``free_requested`` +
    ``free_completed`` pair per free (the entries a CUDA trace has), no segments (the CPU allocator caches nothing).
    ``site_cols`` are the stacks' sites when they are known already (``site_columns``)."""
    is_free = a.size < 0
    src = np.repeat(np.arange(a.size.size), np.where(is_free, 2, 1))  # entry -> event
    n = src.size
    action = np.full(n, ALLOC, dtype=np.int8)
    first = np.ones(n, dtype=bool)
    first[1:] = src[1:] != src[:-1]
    freed = is_free[src]
    action[freed & first] = FREE_REQUESTED
    action[freed & ~first] = FREE_COMPLETED
    stack = a.stack[src].astype(np.int32)
    stack[freed] = -1
    stack_site, sites = site_cols if site_cols is not None else site_columns(a.frames, a.stacks)
    empty = np.zeros(0, dtype=np.int64)
    return Model(
        time_us=a.t_ns[src] / 1000.0, action=action, address=a.ptr[src], size=np.abs(a.size[src]),
        stream=np.zeros(n, dtype=np.int64), device=np.zeros(n, dtype=np.int16), stack=stack,
        category=np.full(n, -1, dtype=np.int8), categories=(), device_range={0: (0, n)}, frames=a.frames,
        stacks=a.stacks, stack_site=stack_site, sites=sites, block_segment=empty, block_address=empty,
        block_size=empty, block_requested=empty, block_state=np.zeros(0, dtype=np.int8),
        block_stack=np.zeros(0, dtype=np.int32), segments=[], ooms=[], annotations=[])


def snapshot_dict_of(model: Model) -> dict[str, Any]:
    """The snapshot dict of a trace-only model (what ``torch.cuda.memory._snapshot()`` returns, for saving):
    ``load_snapshot`` and PyTorch's memory_viz open the pickle of it."""
    frame_dicts = [{"filename": f, "line": line, "name": name} for f, line, name in model.frames]
    stack_lists = [[frame_dicts[i] for i in ids] for ids in model.stacks]
    traces: list[list[dict[str, Any]]] = []
    for dev in range(max(model.device_range, default=-1) + 1):
        lo, hi = model.device_range.get(dev, (0, 0))
        trace = []
        for act, addr, size, t, sid in zip(model.action[lo:hi].tolist(), model.address[lo:hi].tolist(),
                                           model.size[lo:hi].tolist(), model.time_us[lo:hi].tolist(),
                                           model.stack[lo:hi].tolist()):
            entry = {"action": ACTIONS[act], "addr": addr, "size": size, "stream": 0, "time_us": t}
            if sid >= 0:
                entry["frames"] = stack_lists[sid]
            elif act == ALLOC:
                entry["frames"] = []
            trace.append(entry)
        traces.append(trace)
    return {"segments": [], "device_traces": traces}

