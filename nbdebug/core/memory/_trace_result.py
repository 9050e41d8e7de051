"""``MemTrace``: what a traced block allocated, at its peak and still alive after it, and how it is made from a
recording's events (a CUDA snapshot's default device, or the CPU allocations straight from the profiler).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from nbdebug._units import fmt_bytes
from nbdebug.core._findings import Finding, Fix, HasFindings
from nbdebug.core._result import Result
from nbdebug.core.memory._cpu_record import Allocations, model_of, snapshot_dict_of, walk_allocations
from nbdebug.core.memory._device import pair_frees
from nbdebug.core.memory._kept_lists import KEEPS_TENSORS, KeptList, list_leak, source_line
from nbdebug.core.memory._model import ALLOC
from nbdebug.core.memory._results import RetainedPart, SiteBytes
from nbdebug.core.memory._sites import GRADIENTS, OTHER, ROLE_NAMES, stack_role
from nbdebug.core.memory._snapshot import MemorySnapshot, group_by_site
from nbdebug.errors import NbdebugError

__all__ = ["MemTrace", "profile_to_snapshot_dict", "build", "build_cpu"]


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
    # (file, line) of a line that appends to a list -> what that list was seen to hold (see look_at_lists)
    _kept_lists: Mapping[tuple[str, int], KeptList] = field(default_factory=dict, compare=False)

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
        # A graph kept alive holds the activations saved for its backward: memory beyond the kept tensors
        # themselves.  After backward() those are freed and a kept loss holds its own few bytes: no warning then.
        graph_least = threshold("memory_graph_min_bytes")
        kept_list = next((s for s in self.retained_sites if KEEPS_TENSORS.search(source_line(s))), None)
        if kept_list is not None:
            seen = self._kept_lists.get((kept_list.filename, kept_list.line))
            if (seen is None or seen.graphs is not False) and self._graph_bytes(unexplained, seen) >= graph_least:
                where = (kept_list.site, *[s.site for s in self.retained_sites if s is not kept_list][:2])
                return (list_leak(unexplained, besides, kept_list.site, source_line(kept_list), seen, where, evidence),)
        at, filled = next(((at, k) for at, k in self._kept_lists.items() if k.graphs and k.made_here
                           and self._graph_bytes(unexplained, k) >= graph_least), (None, None))
        if filled is not None:
            shown = [s for s in (other.sites if other is not None else self.retained_sites)
                     if (s.filename, s.line) != at]  # not the list's own line twice
            where = (filled.label, *[s.site for s in shown[:2] if s.bytes * 10 >= shown[0].bytes])
            return (list_leak(unexplained, besides, filled.label, "", filled, where, evidence),)
        least = threshold("memory_retained_min_bytes")
        if self.retained_bytes < least:
            return ()
        found: list[Finding] = []
        if other is not None and other.bytes >= least:  # not what training keeps: a leak, or a result kept on purpose
            top = other.sites[0] if other.sites else None
            share = f"; {fmt_bytes(top.bytes)} of it from {top.site}" if top is not None else ""
            fixes = _own_fixes(top, backward="gradients" in parts) or list(entry("memory_retained").fixes)
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

    def _graph_bytes(self, unexplained: int, seen: KeptList | None) -> int:
        """Of the bytes kept that training does not keep, those that are not the kept list's tensors themselves
        (what their graphs hold: the activations saved for a backward)."""
        if seen is None or not seen.addresses:
            return unexplained
        _, sizes, addresses = self._kept
        own = int(sizes[np.isin(addresses, np.asarray(seen.addresses, dtype=addresses.dtype))].sum())
        return unexplained - own

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the recording as a snapshot pickle (opens with ``load_snapshot`` and PyTorch's memory_viz)."""
        import pickle

        from nbdebug._files import write_file

        # a CPU recording keeps no snapshot dict: it is made from the model only when it is saved
        raw = self._raw if self._raw is not None else snapshot_dict_of(self.snapshot.model)
        # a temporary name renamed into place: a symlink planted at ``path`` is replaced, never written through
        write_file(os.path.expanduser(os.fspath(path)), pickle.dumps(raw, protocol=4))

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


def _own_fixes(site: SiteBytes | None, *, backward: bool) -> list[Fix]:
    """Fixes for memory kept by one line of the user's own code, written with that line (its own names): run it
    under no_grad (when no backward ran in the block), drop the name it binds.  Empty where the line cannot be
    read (a library's line, or one that binds no plain name)."""
    if site is None or not site.filename or site.line <= 0:
        return []
    line = source_line(site)
    if line == site.site:  # no source to read
        return []
    fixes = []
    if not backward:
        fixes.append(Fix("Run inference without building a graph", f"with torch.no_grad():\n    {line}"))
    bound = _BINDS.match(line)
    if bound is not None:
        fixes.append(Fix(f"Or drop {bound.group(1)} once it is no longer needed", f"del {bound.group(1)}"))
    return fixes


_BINDS = re.compile(r"^([A-Za-z_]\w*)\s*=(?!=)")


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


def build(snap: MemorySnapshot, device_kind: str, seconds: float, prof: Any = None, raw: Any = None,
           keys: list[tuple[int, int]] | None = None) -> MemTrace:
    """The report of a snapshot's default device, from its derived columns."""
    st = snap.state(snap.default_device)
    m, lo, hi = snap.model, st.lo, st.lo + st.n
    events = _Events(is_alloc=m.action[lo:hi] == ALLOC, size=m.size[lo:hi], stack=m.stack[lo:hi],
                     free_of=st.free_of, above=st.allocated - st.initial_allocated, address=m.address[lo:hi])
    return _report(events, snap._group, (m.frames, m.stacks), snap, device_kind, seconds, prof, raw, keys)


def build_cpu(allocations: Allocations, snap: MemorySnapshot, site_cols: tuple[np.ndarray, list[Any]],
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
