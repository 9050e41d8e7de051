"""``memtrace()``: what a block of code allocated, at its peak and still alive after it, on CUDA or on CPU.

On CUDA the allocator's own history is recorded (``torch.cuda.memory._record_memory_history``) and snapshotted at
the end.  On CPU, PyTorch's profiler records every allocation and free with the Python calls above it (memory and
the Python tracer only, see ``_cpu_record``); the allocations are converted into the same snapshot model.  Recording is
switched off in ``finally`` whatever the block does (exception, ``KeyboardInterrupt``).
"""

from __future__ import annotations

import linecache
import os
import re
import sys
import time
from collections import ChainMap
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from nbdebug._units import fmt_bytes
from nbdebug.core._findings import Finding, HasFindings
from nbdebug.core._result import Result
from nbdebug.core.memory._cpu_record import (
    Allocations,
    CpuRecording,
    model_of,
    snapshot_dict_of,
    walk_allocations,
)
from nbdebug.core.memory._device import pair_frees
from nbdebug.core.memory._model import ALLOC, site_columns
from nbdebug.core.memory._results import RetainedPart, SiteBytes
from nbdebug.core.memory._sites import GRADIENTS, OTHER, ROLE_NAMES, short_path, stack_role
from nbdebug.core.memory._snapshot import MemorySnapshot, group_by_site, load_snapshot
from nbdebug.errors import NbdebugError

__all__ = ["MemTrace", "memtrace", "MemTraceRecorder", "profile_to_snapshot_dict", "cuda_recording"]

# The OOM feature keeps CUDA history recording on; memtrace restores its settings afterwards instead of stopping.
cuda_recording: dict[str, Any] = {"keep_on": None}


@dataclass(frozen=True, repr=False)
class MemTrace(HasFindings, Result):
    """What a traced block allocated.

    Attributes
    ----------
    device_kind : str
        ``"cuda:N"`` (allocator history) or ``"cpu"`` (profiler).
    peak_bytes : int
        Highest allocated memory during the block above the lowest level reached before that moment (the start,
        unless the block first freed memory, e.g. a list an earlier cell filled and this one rebinds).
    retained_bytes : int
        Bytes allocated during the block and still alive after it (a leak, or a result kept on purpose).
    delta_bytes : int
        Allocated after the block minus allocated before it (frees of older memory count).
    events : int
        Allocation events recorded.
    top_sites : tuple of SiteBytes
        What was alive at the peak, by allocation site (memory allocated during the block).
    retained_sites : tuple of SiteBytes
        What is still alive after the block, by allocation site.
    retained_parts : tuple of RetainedPart
        What is still alive after the block, by kind (``"parameters"``, ``"gradients"``, ``"optimizer state"``,
        ``"other"``), largest first: what training keeps on purpose is told apart from what may be a leak.
    timeline : tuple of int
        Allocated bytes above the start, downsampled to at most 200 points.
    snapshot : MemorySnapshot
        The full recording, for the viewer and every snapshot analysis.
    """

    device_kind: str
    peak_bytes: int
    retained_bytes: int
    delta_bytes: int
    events: int
    top_sites: tuple[SiteBytes, ...]
    retained_sites: tuple[SiteBytes, ...]
    timeline: tuple[int, ...]
    seconds: float
    snapshot: MemorySnapshot = field(compare=False)
    _profile: Any = field(default=None, compare=False)
    _memory_profile: list[Any] = field(default_factory=list, compare=False)
    _raw: Any = field(default=None, compare=False)
    _alloc_keys: list[tuple[int, int]] = field(default_factory=list, compare=False)
    # what retained_parts and the list checks are made from: the kept allocations' stack ids, bytes and addresses,
    # the frames and stacks those ids index, and the grouping of stack ids into sites
    _kept: tuple[np.ndarray, np.ndarray, np.ndarray] = field(
        default=(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)), compare=False)
    _frames_stacks: tuple[list[Any], list[Any]] = field(default=([], []), compare=False)
    _group: Any = field(default=None, compare=False)
    # (file, line) of a line that appends to a list -> what that list was seen to hold (see _look_at_lists)
    _kept_lists: Mapping[tuple[str, int], _KeptList] = field(default_factory=dict, compare=False)

    def _summary_line(self) -> str:
        return f"{self.device_kind}: peak {fmt_bytes(self.peak_bytes)}, retained {fmt_bytes(self.retained_bytes)}"

    def to_dict(self) -> dict[str, Any]:  # noqa: D102
        d = {k: getattr(self, k) for k in ("device_kind", "peak_bytes", "retained_bytes", "delta_bytes", "events",
                                           "seconds")}
        d["top_sites"] = [vars(s) for s in self.top_sites]
        d["retained_sites"] = [vars(s) for s in self.retained_sites]
        d["retained_parts"] = [{"kind": p.kind, "bytes": p.bytes, "sites": [vars(s) for s in p.sites]}
                               for p in self.retained_parts]
        return d

    def _records(self) -> list[dict[str, Any]]:
        rows = [{"kind": "retained", **vars(s)} for s in self.retained_sites]
        return rows + [{"kind": "at_peak", **vars(s)} for s in self.top_sites]

    @cached_property
    def retained_parts(self) -> tuple[RetainedPart, ...]:
        """What is still alive after the block, by kind, largest first (see ``stack_role``)."""
        stacks, sizes, _ = self._kept
        if self._group is None:  # made without its allocations: all of it, unexplained
            return (RetainedPart("other", self.retained_bytes, self.retained_sites),) if self.retained_bytes else ()
        if not stacks.size:
            return ()
        frames, stack_frames = self._frames_stacks
        role_of = {i: stack_role([frames[f] for f in stack_frames[i]]) if i >= 0 else OTHER
                   for i in set(stacks.tolist())}
        if self.device_kind.startswith("cuda") and any(i < 0 or not stack_frames[i] for i in role_of):
            # on CUDA the backward pass runs on autograd's own thread, which has no Python frame: an allocation
            # with no stack in a block that called backward from Python was made by it
            backward = any(stack_role([frames[f] for f in ids]) == GRADIENTS for ids in stack_frames)
            for i in role_of:
                if i < 0 or not stack_frames[i]:
                    role_of[i] = GRADIENTS if backward else OTHER
        if len(set(role_of.values())) == 1:  # the common case: one kind, whose sites are the retained sites
            role = next(iter(role_of.values()))
            return (RetainedPart(ROLE_NAMES[role], self.retained_bytes, self.retained_sites),)
        roles = np.fromiter(map(role_of.__getitem__, stacks.tolist()), dtype=np.int8, count=stacks.size)
        parts = []
        for role, name in enumerate(ROLE_NAMES):
            mine = roles == role
            if mine.any():
                parts.append(RetainedPart(name, int(sizes[mine].sum()), self._group(stacks[mine], sizes[mine])))
        return tuple(sorted(parts, key=lambda p: -p.bytes))

    @cached_property
    def retained_kinds(self) -> dict[str, str]:
        """What each retained site's memory mostly is (``"parameters"``, ``"gradients"``, ``"optimizer state"``),
        for the sites where that is not ``"other"`` (the "kept as" column of the report)."""
        most: dict[str, tuple[int, str]] = {}
        for part in self.retained_parts:
            for site in part.sites:
                if site.bytes > most.get(site.site, (-1, ""))[0]:
                    most[site.site] = (site.bytes, part.kind)
        return {site: kind for site, (_, kind) in most.items() if kind != "other"}

    @cached_property
    def findings(self) -> tuple[Finding, ...]:
        """What the memory kept alive after the block says.

        - ``memory_retained`` (warning): a list that keeps tensors (the classic leak, whatever its size), or at
          least ``memory_retained_min_bytes`` kept that is not what training keeps (see ``retained_parts``); the
          message counts that training state apart.
        - ``training_state`` (info): what training keeps on purpose (the model's parameters, its gradients, the
          optimizer's state) is most of what was kept: expected, made once, and not a leak.
        """
        from nbdebug.core.knowledge import entry, finding, threshold

        evidence = {"retained_bytes": self.retained_bytes, "delta_bytes": self.delta_bytes, "device": self.device_kind}
        if self.retained_bytes <= 0:
            return ()
        parts = {p.kind: p for p in self.retained_parts}
        other = parts.get("other")
        training = [p for p in self.retained_parts if p.kind != "other"]
        besides = (f" (besides the {_and(p.kind for p in training)} that training keeps, "
                   f"{fmt_bytes(sum(p.bytes for p in training))})" if training else "")
        unexplained = other.bytes if other is not None and other.bytes > 0 else self.retained_bytes
        # the classic leak, named whatever its size: a list filled in the block that keeps tensors with their
        # graphs.  A retained line that appends to it, or a line of the block that fills a list (or a dict) seen
        # after it to hold such tensors made in the block.  Not one seen to hold tensors with no graph
        # (predictions made under no_grad, detached values): results kept on purpose, judged below with the rest.
        kept_list = next((s for s in self.retained_sites if _KEEPS_TENSORS.search(_source(s))), None)
        if kept_list is not None:
            seen = self._kept_lists.get((kept_list.filename, kept_list.line))
            if seen is None or seen.graphs is not False:
                where = (kept_list.site, *[s.site for s in self.retained_sites if s is not kept_list][:2])
                return (_list_leak(unexplained, besides, kept_list.site, _source(kept_list), seen, where, evidence),)
        filled = next((k for k in self._kept_lists.values() if k.graphs and k.made_here), None)
        if filled is not None:
            shown = other.sites if other is not None else self.retained_sites
            where = (filled.label, *[s.site for s in shown[:2] if s.bytes * 10 >= shown[0].bytes])
            return (_list_leak(unexplained, besides, filled.label, "", filled, where, evidence),)
        least = threshold("memory_retained_min_bytes")
        if self.retained_bytes < least:
            return ()
        found: list[Finding] = []
        if other is not None and other.bytes >= least:  # not what training keeps: a leak, or a result kept on purpose
            top = other.sites[0] if other.sites else None
            share = f"; {fmt_bytes(top.bytes)} of it from {top.site}" if top is not None else ""
            fixes = list(entry("memory_retained").fixes)
            if "gradients" not in parts:  # no backward in the block: graphs kept by inference, not by losses
                fixes.sort(key=lambda f: "no_grad" not in f.code)
            found.append(finding(
                "memory_retained", f"{fmt_bytes(other.bytes)} allocated in the block is still alive after it{besides}"
                                   f"{share}.", tuple(s.site for s in other.sites[:3] if top and s.bytes * 10 >= top.bytes),
                fixes=fixes, evidence=evidence))
        kept_training = sum(p.bytes for p in training)
        if kept_training >= least and (other is None or other.bytes < least):
            fixes = [f for f in entry("training_state").fixes  # only those of the parts kept
                     if any(f.title.lower().startswith(p.kind) for p in training)]
            found.append(finding("training_state", _training_message(training, self.delta_bytes, least),
                                 tuple(p.sites[0].site for p in training if p.sites), fixes=fixes,
                                 evidence={**evidence, **{p.kind.replace(" ", "_") + "_bytes": p.bytes
                                                          for p in training}}))
        return tuple(found)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the recording as a snapshot pickle (opens with ``load_snapshot`` and PyTorch's memory_viz)."""
        import pickle

        # a CPU recording keeps no snapshot dict: it is made from the model only when it is saved
        raw = self._raw if self._raw is not None else snapshot_dict_of(self.snapshot.model)
        with open(os.path.expanduser(os.fspath(path)), "wb") as fh:
            pickle.dump(raw, fh, protocol=4)

    def by_category(self) -> tuple[tuple[str, int], ...]:
        """Bytes alive at the peak by category (parameter, activation, gradient, optimizer state, temporary, ...).

        On CPU the categories come from the profiler's memory profile, built once on first use and reused; the
        recording must have been made with ``categories=True`` (``%%memtrace --categories``), which records the
        tensor shapes the memory profile needs.
        """
        if self.device_kind == "cpu" and not self.snapshot.model.categories:
            if self._profile is None or not getattr(self._profile, "record_shapes", True):
                raise NbdebugError("by_category() needs a recording made with memtrace(..., categories=True) "
                                   "(%%memtrace --categories): the categories come from the profiler's tensor shapes, "
                                   "which are recorded only then")
            _apply_categories(self.snapshot, self._profile, self._memory_profile, self._alloc_keys)
        return self.snapshot.peak().by_category

    def plot(self, ax: Any = None) -> Any:
        """The recording's stacked timeline (a matplotlib ``Figure``)."""
        return self.snapshot.plot(ax=ax)


def profile_to_snapshot_dict(prof: Any, keys: list[tuple[int, int]] | None = None) -> dict[str, Any]:
    """Convert a finished ``torch.profiler.profile(profile_memory=True, with_stack=True)`` into a snapshot dict.

    Every CPU allocation and free becomes an ``alloc`` / ``free_requested`` + ``free_completed`` entry with its
    Python stack; there are no segments (the CPU allocator has no cache to show).  ``keys`` receives
    ``(ptr, start_ns)`` of each ``alloc`` entry, in order (to attach categories later).

    The stack of an allocation is the chain of Python calls above it: for each call, the frame that made it, at
    the line of the call.  ``prof`` may also be the profiler's kineto results.
    """
    results = getattr(getattr(prof, "profiler", None), "kineto_results", prof)
    allocations = walk_allocations(results)
    if keys is not None:
        keys.extend(allocations.alloc_keys())
    return snapshot_dict_of(model_of(allocations))


def _apply_categories(snap: MemorySnapshot, prof: Any, cache: list[Any], keys: list[tuple[int, int]]) -> None:
    """Set the snapshot's category column from the profiler's memory profile (built once, kept in ``cache``)."""
    from torch.profiler._memory_profiler import Action, TensorKey

    if not cache:
        cache.append(prof._memory_profile())
    mp = cache[0]
    by_key: dict[Any, str] = {}
    for _, action, (key, version), _ in mp.timeline:
        if action in (Action.CREATE, Action.PREEXISTING) and isinstance(key, TensorKey) and key not in by_key:
            cat = mp._categories.get(key, version)
            by_key[key] = cat.name.lower() if cat is not None else "unknown"
    from torch._C._profiler import _EventType

    ptr_time: dict[tuple[int, int], str] = {}
    for node in mp._op_tree.sorted_nodes:
        if node.tag == _EventType.Allocation and node.extra_fields.alloc_size > 0:
            key = TensorKey.from_allocation(node.extra_fields)
            if key is not None and key in by_key:
                ptr_time[(node.extra_fields.ptr, node.start_time_ns)] = by_key[key]
    m = snap.model
    names: dict[str, int] = {}
    cat = np.full(m.action.size, -1, dtype=np.int8)
    for i, key in zip(np.flatnonzero(m.action == ALLOC).tolist(), keys):
        name = ptr_time.get(key, "unknown")
        cat[i] = names.setdefault(name, len(names))
    m.category = cat
    m.categories = tuple(names)


def _and(words: Any) -> str:
    words = list(words)
    return " and ".join(words) if len(words) < 3 else ", ".join(words[:-1]) + " and " + words[-1]


_KIND_NOTES = {
    "parameters": "the model's weights, made when it is built or moved",
    "gradients": "alive until the next zero_grad()",
    "optimizer state": "made by the optimizer's first step(): Adam and AdamW keep two buffers the size of the "
                       "parameters, SGD with momentum one",
}


def _training_message(training: list[RetainedPart], delta: int, least: float) -> str:
    """What the model and training state kept by a block are, and whether memory grew (a first step, a new model)
    or not (a later step)."""
    total = sum(p.bytes for p in training)
    # the sites are the finding's `where`, in the same order: the message keeps to what each part is
    described = "; ".join(f"the {p.kind}, {fmt_bytes(p.bytes)} ({_KIND_NOTES[p.kind]})" for p in training)
    head = f"{fmt_bytes(total)} still alive after the block is what training keeps, not a leak: {described}."
    if delta >= least:
        return head + "  Each is made once and then reused, so running the block again does not add to it."
    return head + (f"  The block freed the previous ones as it ran, so memory did not grow (delta "
                   f"{fmt_bytes(delta)}).")


# a line that appends to a list without turning the tensor into a number or detaching it
_KEEPS_TENSORS = re.compile(r"\.append\((?![^)]*\.(?:item|detach|tolist|cpu\(\)\.numpy)\(|[^)]*\bfloat\()")
# the list of such a line; its value runs to the matching parenthesis (see _appended)
_APPEND = re.compile(r"(?<![\w.])([A-Za-z_][\w.]*)\.append\(")


def _appended(line: str) -> tuple[str, str] | None:
    """``(list, value)`` of the first ``name.append(value)`` in a line of code, the value up to its matching
    parenthesis (a comment after it, or calls inside it, are not part of it); None when there is none."""
    found = _append_call(line)
    return found[:2] if found is not None else None


def _append_call(line: str) -> tuple[str, str, int] | None:
    """``(list, value, end)`` of the first ``name.append(value)`` in a line; ``end`` is just past the call."""
    m = _APPEND.search(line)
    if m is None:
        return None
    depth, quote, i = 1, "", m.end()
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                value = line[m.end():i].strip()
                return (m.group(1), value, i + 1) if value else None
        i += 1
    return None


# a line that stores a value under a key (``cache[k] = out``) without turning it into a number or detaching it
_STORE = re.compile(r"^\s*([A-Za-z_]\w*)\[(.+?)\]\s*=(?!=)\s*(.+?)\s*(?:#.*)?$")
_KEPT_AS_IS = re.compile(r"\.(?:item|detach|tolist|numpy)\(\)\s*$|^float\(|^int\(")


def _stored(line: str) -> tuple[str, str, str] | None:
    """``(dict, key, value)`` of a line ``name[key] = value`` whose value is kept as a tensor; None otherwise."""
    m = _STORE.match(line)
    if m is None or _KEPT_AS_IS.search(m.group(3)):
        return None
    return m.group(1), m.group(2).strip(), m.group(3)


@dataclass(frozen=True)
class _KeptList:
    """A list that a line of the block appends tensors to, as seen after the block: whether they keep autograd
    graphs, whether they are single numbers, whether some were made in the block (None: not seen, e.g. an
    attribute or a list of dicts)."""

    label: str  # the line, named as the sites are
    name: str
    value: str
    graphs: bool | None = None
    scalars: bool | None = None
    made_here: bool | None = None
    key: str = ""  # filled by ``name[key] = value`` (a dict), not by ``name.append(value)``


def _source(site: SiteBytes) -> str:
    """The source line of a site (a notebook cell's too: IPython keeps them in linecache), else its label."""
    if site.filename and site.line > 0:
        text = linecache.getline(site.filename, site.line).strip()
        if text:
            return text
    return site.site


def _look_at_lists(sites: tuple[SiteBytes, ...], namespace: Mapping[str, Any], cells: Mapping[str, str],
                   kept_addresses: np.ndarray, block: tuple[str, int] | None = None) -> dict[tuple[str, int], _KeptList]:
    """The lines of the block's code that append a tensor to a list (the cells of the retained sites, or the
    lines around them in a file), nearest the sites first, with that list looked up by name where the block
    ran: do its (last 256) tensors keep graphs, are they numbers, were some made in the block (their storage
    is memory the block kept).  Only plain names are looked up: nothing of the user's runs (no attribute, no
    property)."""
    torch = sys.modules.get("torch")
    found: list[tuple[int, tuple[str, int], _KeptList]] = []
    near: dict[str, list[int]] = {}  # file -> the lines of its retained sites (and of the block)
    if block is not None and block[0]:  # the block's own code first: its sites may all lie in a library
        near[block[0]] = [block[1]] if block[1] > 0 else []
    for site in sites:
        if site.filename and site.line > 0:
            near.setdefault(site.filename, []).append(site.line)
    kept: set[int] | None = None
    for filename, at in list(near.items())[:8]:
        lines = linecache.getlines(filename)
        # a cell whole; in a file, the lines around the sites and after the with-statement (the loop that filled
        # the list is there, and elsewhere in the file the same names may mean other things)
        if filename in cells or not at:
            lo, hi = 1, len(lines)
        elif block is not None and filename == block[0]:
            lo, hi = min(at) - 30, max(max(at) + 30, block[1] + 80)
        else:
            lo, hi = min(at) - 30, max(at) + 30
        if not at:
            at = [1]
        for number in range(max(lo, 1), min(hi, len(lines)) + 1):
            line = lines[number - 1]
            if line.lstrip().startswith("#"):
                continue
            key = ""
            call = _append_call(line) if ".append(" in line and _KEEPS_TENSORS.search(line) else None
            if call is not None:
                name, value, end = call
            elif "]" in line and "=" in line and (stored := _stored(line)) is not None:
                name, key, value = stored
                end = len(line.split("#", 1)[0].rstrip())
            else:
                continue
            graphs = scalars = made_here = None
            held = namespace.get(name) if "." not in name else None
            if isinstance(held, dict) and type(held) is dict and key:
                held = list(held.values())
            elif type(held) not in (list, tuple):
                held = None
            if torch is not None and held is not None:
                tensors = [t for t in held[-256:] if isinstance(t, torch.Tensor)]
                if kept is None:
                    kept = set(kept_addresses.tolist())
                try:  # a tensor subclass answers through its own code: what it raises leaves the list unseen
                    if tensors:
                        graphs = any(t.grad_fn is not None for t in tensors)
                        scalars = all(t.numel() == 1 for t in tensors)
                        made_here = any(_storage_address(t) in kept for t in tensors)
                except Exception:
                    graphs = scalars = made_here = None
            code = line[:end].strip()[:80]  # the statement, without a comment after it
            label = (f"{cells[filename]}, line {number}: {code}" if filename in cells
                     else f"{short_path(filename)}:{number}: {code}")
            distance = min(abs(number - site_line) for site_line in at)
            found.append((distance, (filename, number),
                          _KeptList(label, name, value, graphs, scalars, made_here, key)))
    found.sort(key=lambda f: f[0])  # the nearest the sites first
    return {key: kept_list for _, key, kept_list in found}


def _storage_address(t: Any) -> int:
    """Where a tensor's memory starts (its allocation); -1 for a tensor with no storage (sparse, nested)."""
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return -1


def _list_leak(retained: int, besides: str, label: str, source: str, seen: _KeptList | None,
               where: tuple[str, ...], evidence: dict[str, Any]) -> Finding:
    """The classic leak: a list that keeps tensors with their graphs; the fix in the user's own names."""
    from nbdebug.core._findings import Fix
    from nbdebug.core.knowledge import finding

    if seen is None:
        appended = _appended(source)
        seen = _KeptList(label, *appended) if appended else _KeptList(label, "the list", "loss")
    name, value = seen.name, seen.value
    number = seen.scalars if seen.scalars is not None else "loss" in value.lower()
    if seen.key:  # a dict filled as name[key] = value
        what, verb = "dict", "store"

        def keep(v: str) -> str:
            return f"{name}[{seen.key}] = {v}"
    else:
        what, verb = "list", "append"
        append = f"{name}.append" if seen.name != "the list" else "losses.append"

        def keep(v: str) -> str:
            return f"{append}({v})"
    if number:  # a loss or a metric: keep the number
        advice = f"{verb} a number ({value}.item()) instead, or a detached tensor ({value}.detach())"
        fixes = [Fix("Keep numbers, not graphs", keep(f"{value}.item()")),
                 Fix("Or keep the tensor without its graph", keep(f"{value}.detach()"))]
    else:  # predictions, activations: no graph is needed to keep them
        advice = (f"run the loop under torch.no_grad() when no backward follows, or {verb} {value}.detach() "
                  "instead")
        fixes = [Fix("Run inference without building a graph", f"with torch.no_grad():\n    ...\n    {keep(value)}"),
                 Fix("Or keep the tensor without its graph", keep(f"{value}.detach()"))]
    graphs = "with their autograd graphs" if seen.graphs else "and each keeps its autograd graph"
    return finding(
        "memory_retained",
        f"{fmt_bytes(retained)} allocated in the block is still alive after it{besides}: the {what} {name}, filled at "
        f"{label}, keeps tensors {graphs} (the activations of each step) alive; {advice}.",
        where, fixes=fixes, evidence=evidence)


@dataclass(frozen=True)
class _Events:
    """One device's events as the report needs them: is an alloc, bytes, stack id, the index of the alloc's free
    (-1: never freed), and allocated bytes after each event above the level before the first."""

    is_alloc: np.ndarray
    size: np.ndarray
    stack: np.ndarray
    free_of: np.ndarray
    above: np.ndarray
    address: np.ndarray


def _build(snap: MemorySnapshot, device_kind: str, seconds: float, prof: Any = None, raw: Any = None,
           keys: list[tuple[int, int]] | None = None) -> MemTrace:
    """The report of a snapshot's default device, from its derived columns."""
    st = snap.state(snap.default_device)
    m, lo, hi = snap.model, st.lo, st.lo + st.n
    events = _Events(is_alloc=m.action[lo:hi] == ALLOC, size=m.size[lo:hi], stack=m.stack[lo:hi],
                     free_of=st.free_of, above=st.allocated - st.initial_allocated, address=m.address[lo:hi])
    return _report(events, snap._group, (m.frames, m.stacks), snap, device_kind, seconds, prof, raw, keys)


def _build_cpu(allocations: Allocations, snap: MemorySnapshot, site_cols: tuple[np.ndarray, list[Any]],
               seconds: float, prof: Any = None, keys: list[tuple[int, int]] | None = None) -> MemTrace:
    """The report of a CPU recording straight from its allocations (one entry per allocation and per free), so
    that the snapshot model is built only when something asks for it (the viewer, an analysis, ``save``)."""
    signed = allocations.size
    is_alloc = signed > 0
    free_of, _ = pair_frees(is_alloc, ~is_alloc, allocations.ptr)
    events = _Events(is_alloc=is_alloc, size=np.abs(signed), stack=allocations.stack, free_of=free_of,
                     above=np.cumsum(signed), address=allocations.ptr)
    stack_site, sites = site_cols

    def group(stacks: np.ndarray, sizes: np.ndarray) -> tuple[SiteBytes, ...]:
        return group_by_site(stack_site, sites, stacks, sizes, cells=snap.cells)

    return _report(events, group, (allocations.frames, allocations.stacks), snap, "cpu", seconds, prof, None,
                   keys)


def _report(e: _Events, group: Any, frames_stacks: tuple[list[Any], list[Any]], snap: MemorySnapshot,
            device_kind: str, seconds: float, prof: Any, raw: Any, keys: list[tuple[int, int]] | None) -> MemTrace:
    above = e.above
    if above.size:
        # the peak is the largest rise above the lowest level reached before it: a cell that first frees what an
        # earlier cell kept (a list it rebinds) still shows the working memory its own loop needed
        level = np.concatenate([[0], above])
        rise = level - np.minimum.accumulate(level)
        p = int(np.argmax(rise)) - 1  # index into `above` (-1: the start itself)
        peak = max(0, int(rise[p + 1]))
        delta = int(above[-1])
    else:
        above, p, peak, delta = np.zeros(0, np.int64), -1, 0, 0
    kept = np.flatnonzero(e.is_alloc & (e.free_of < 0))
    kept_stacks, kept_sizes = e.stack[kept].astype(np.int64), e.size[kept]
    retained = int(kept_sizes.sum())
    retained_sites = group(kept_stacks, kept_sizes)
    if p >= 0 and peak > 0:
        alive = np.flatnonzero(e.is_alloc[:p + 1] & ((e.free_of[:p + 1] < 0) | (e.free_of[:p + 1] > p)))
        top = group(e.stack[alive].astype(np.int64), e.size[alive])
    else:
        top = ()
    series = np.concatenate([[0], above])
    if series.size > 200:  # keep each bucket's maximum so the peak stays visible
        edges = np.arange(200, dtype=np.int64) * series.size // 200
        series = np.maximum.reduceat(series, edges)
    return MemTrace(device_kind=device_kind, peak_bytes=peak, retained_bytes=retained, delta_bytes=delta,
                    events=int(np.count_nonzero(e.is_alloc)), top_sites=top, retained_sites=retained_sites,
                    timeline=tuple(series.tolist()), seconds=seconds, snapshot=snap, _profile=prof, _raw=raw,
                    _alloc_keys=keys or [], _kept=(kept_stacks, kept_sizes, e.address[kept]),
                    _frames_stacks=frames_stacks, _group=group)


class MemTraceRecorder:
    """The object ``with memtrace() as rec:`` gives; ``rec.result`` is the ``MemTrace`` once the block ends."""

    def __init__(self, device: Any = None, *, max_entries: int = 1_000_000, stacks: bool = True,
                 save: str | os.PathLike[str] | None = None, categories: bool = False) -> None:
        self.device = device
        self.max_entries = int(max_entries)
        self.stacks = stacks
        self.save_path = save
        self.categories = categories
        self.result: MemTrace | None = None
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
            result = _build_cpu(allocations, snap, site_cols, seconds, recording.profile, keys)
            if self.categories:
                result.by_category()
        else:
            if self._raw is None:
                raise NbdebugError(f"memtrace: no snapshot could be taken on {self._kind}")
            dev = int(self._kind.split(":")[1])
            snap = load_snapshot(self._raw, name=f"memtrace ({self._kind})")
            snap._default = dev
            snap.cells = dict(cells or {})
            result = _build(snap, self._kind, seconds, raw=self._raw)
        if namespace is not None and result.retained_bytes > 0:
            object.__setattr__(result, "_kept_lists", _look_at_lists(result.retained_sites, namespace, snap.cells,
                                                                     result._kept[2], block))
        self.result = result
        if self.save_path:
            try:
                result.save(self.save_path)
            except OSError as e:  # reported beside the recording (and the cell's own error), never instead of them
                import warnings

                warnings.warn(f"memtrace: the recording was not saved to {os.fspath(self.save_path)!r} "
                              f"({type(e).__name__}: {e}); the report below is complete", RuntimeWarning,
                              stacklevel=2)
        return result

    def __getattr__(self, name: str) -> Any:
        # after the block, the recorder reads like its MemTrace (rec.peak_bytes, rec.top_sites, ...)
        result = self.__dict__.get("result")
        if result is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(result, name)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        if self.result is None:
            return {"text/plain": f"<memtrace recorder on {self._kind or 'an unresolved device'}: not finished>"}
        return self.result._repr_mimebundle_(include, exclude)

    def __enter__(self) -> MemTraceRecorder:
        return self.start()

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

    Notes
    -----
    On CPU, in IPython, the first recording starts building a compiled reader of the profiler's event tree in a
    child process (a C++ compiler and ninja, about 10 s, once per torch), checked against the Python reader
    before it is used.  Later recordings use it and spend a third to a sixth of the time on that step; the report
    is the same either way.  ``python -m nbdebug compile`` builds it now (also for scripts, which start no
    build); ``NBDEBUG_COMPILE=0`` turns it off; ``--status`` says whether it is in use.

    Examples
    --------
    >>> with nbdebug.memtrace("cpu") as rec:          # doctest: +SKIP
    ...     loss = model(x).sum()
    >>> rec.retained_bytes, rec.retained_sites[0].site  # doctest: +SKIP
    """
    return MemTraceRecorder(device, max_entries=max_entries, stacks=stacks, save=save, categories=categories)
