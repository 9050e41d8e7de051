"""What to show under a CUDA out-of-memory error, and how to give back the memory a failed cell still holds.

The section answers "what is using the memory?" from the snapshot taken when the allocation failed: what was alive,
by site; the failing request against the largest free block (if the request is smaller than the free memory in
total but larger than every free block, it is fragmentation); and how much is reserved but unallocated.
"""

from __future__ import annotations

import dataclasses
import gc
import inspect
import re
import sys
from typing import Any

from nbdebug._units import fmt_bytes, parse_bytes
from nbdebug.core._findings import Finding
from nbdebug.core.explain._diagnosis import Section

__all__ = ["is_cuda_oom", "parse_oom_request", "oom_findings", "oom_section", "enrich_oom", "enrich_oom_prediction",
           "release_failed_cell", "RELEASE_NOTE"]

_REQUEST = re.compile(r"Tried to allocate ([0-9][0-9.,]{0,40} ?(?:[KMGTP]i?B|bytes?|B))\b")
_GPU = re.compile(r"GPU ([0-9]{1,4})")
TITLE = "Memory at the OOM (nbdebug oom capture)"
RELEASE_NOTE = (
    "The failed cell's tensors are still alive: the stored traceback (sys.last_traceback, and IPython's record of "
    "the last error) keeps every frame of the failed cell, with its local tensors, in memory. Run "
    "nbdebug.core.memory.release_failed_cell() to drop those references and return the memory before retrying."
)


def is_cuda_oom(exc: BaseException | None, diagnosis: Any = None) -> bool:
    """True for ``torch.OutOfMemoryError`` / a "CUDA out of memory" message / a ``cuda_oom`` diagnosis."""
    if diagnosis is not None and getattr(diagnosis, "kind", "") == "cuda_oom":
        return True
    if exc is None:
        return False
    return type(exc).__name__ == "OutOfMemoryError" or "CUDA out of memory" in str(exc)


def parse_oom_request(text: str) -> tuple[int | None, int | None]:
    """(requested bytes, GPU index) from a CUDA OOM message, None where absent."""
    m = _REQUEST.search(text)
    g = _GPU.search(text)
    req = None
    if m:
        try:
            req = parse_bytes(m.group(1))
        except ValueError:
            req = None
    return req, int(g.group(1)) if g else None


def oom_findings(requested: int | None, largest_free_block: int, cached_free_bytes: int, *,
                 device: int | None = None) -> tuple[Finding, ...]:
    """What the request against the free memory says: fragmentation, or memory genuinely in use (or nothing).

    Fragmentation: the request is no larger than the reserved-but-free memory, yet larger than every free block.
    In use: the request is larger than the largest free block and than all the reserved-but-free memory.
    """
    from nbdebug.core.knowledge import finding

    if requested is None or requested <= largest_free_block:
        return ()
    where = (f"cuda:{device}",) if device is not None else ()
    evidence = {"requested_bytes": requested, "largest_free_block": largest_free_block,
                "cached_free_bytes": cached_free_bytes}
    if requested <= cached_free_bytes:
        return (finding("memory_fragmentation",
                        f"{fmt_bytes(cached_free_bytes)} is reserved but free, yet no free block holds "
                        f"{fmt_bytes(requested)} (the largest is {fmt_bytes(largest_free_block)}).",
                        where, evidence=evidence),)
    return (finding("memory_exhausted",
                    f"The request ({fmt_bytes(requested)}) is larger than the largest free block "
                    f"({fmt_bytes(largest_free_block)}) and than all reserved-but-free memory "
                    f"({fmt_bytes(cached_free_bytes)}): the memory is genuinely in use.", where, evidence=evidence),)


def oom_section(snapshot: Any, message: str = "", *, limit: int = 8) -> Section:
    """A diagnosis ``Section`` (data only) built from the snapshot of the moment of an OOM.

    ``facts``: the failing request, alive, reserved-but-free, the largest free block (and CUDA's free memory);
    ``text``: the verdict (fragmentation or memory in use); the table: what was alive, by site; ``fixes``: the
    verdict's fixes and how to release the failed cell's tensors.
    """
    from nbdebug.core.knowledge import entry

    requested, gpu = parse_oom_request(message)
    oom_events = [o for o in snapshot.model.ooms if gpu is None or o.device == gpu]
    device = oom_events[-1].device if oom_events else (gpu if gpu in snapshot.devices else snapshot.default_device)
    frag = snapshot.fragmentation(device)
    row = frag.ooms[-1] if frag.ooms else None
    if row is not None:
        alive = snapshot.alive_at(index=row.event_index - 1, device=device)
        requested = requested or row.requested_bytes
        largest, cached_free = row.largest_free_block, row.cached_free_bytes
        cuda_free = row.device_free_bytes
    else:
        alive = snapshot.alive_at(device=device)
        largest, cached_free, cuda_free = frag.largest_free_block, frag.free_bytes, None
    facts: list[tuple[str, str]] = [("alive (allocated)", fmt_bytes(alive.bytes)),
                                    ("reserved but unallocated", fmt_bytes(cached_free)),
                                    ("largest free block", fmt_bytes(largest))]
    if requested is not None:
        facts.insert(0, ("failing request", fmt_bytes(requested)))
    if cuda_free is not None:
        facts.append(("free on the GPU (CUDA)", fmt_bytes(cuda_free)))
    verdicts = oom_findings(requested, largest, cached_free, device=device)
    text = " ".join(f"{f.title}: {f.message}" for f in verdicts)
    text = (text + " " if text else "") + f"Alive on device {device} when the allocation failed, by site:"
    sites = alive.by_site
    rows = [(s.site, fmt_bytes(s.bytes), s.count) for s in sites[:limit]]
    if len(sites) > limit:
        rows.append((f"({len(sites) - limit} more sites)", fmt_bytes(sum(s.bytes for s in sites[limit:])),
                     sum(s.count for s in sites[limit:])))
    fixes = tuple(fix for f in verdicts for fix in f.fixes) + entry("failed_cell_holds_memory").fixes
    return Section(title=TITLE, text=text, facts=tuple(facts), header=("site", "bytes", "blocks"), rows=tuple(rows),
                   fixes=fixes, notes=(RELEASE_NOTE,))


def enrich_oom_prediction(exc: BaseException, diagnosis: Any, namespace: Any) -> Any:
    """Add the step's predicted need and the fixes with their predicted peaks to a CUDA OOM diagnosis, when a model
    and a batch are in ``namespace`` (unchanged otherwise)."""
    if not is_cuda_oom(exc, diagnosis) or namespace is None:
        return diagnosis
    from nbdebug.core.memory._predict_oom import prediction_section

    section = prediction_section(exc, diagnosis, namespace)
    if section is None:
        return diagnosis
    return dataclasses.replace(diagnosis, sections=tuple(diagnosis.sections) + (section,))


def enrich_oom(exc: BaseException, diagnosis: Any, snapshot: Any | None) -> Any:
    """Add the OOM section (or, without a snapshot, only the release note) to a CUDA OOM diagnosis."""
    if not is_cuda_oom(exc, diagnosis):
        return diagnosis
    if snapshot is not None:
        section = oom_section(snapshot, str(exc))
    else:
        from nbdebug.core.knowledge import entry

        section = Section(title=TITLE, text="No snapshot was recorded (switch on %nbdebug oom on before the failing "
                                            "cell).", fixes=entry("failed_cell_holds_memory").fixes,
                          notes=(RELEASE_NOTE,))
    return dataclasses.replace(diagnosis, sections=tuple(diagnosis.sections) + (section,))


def release_failed_cell(shell: Any = None, *, clear_output_cache: bool = False) -> int | None:
    """Drop the references that keep a failed cell's tensors alive, then return cached CUDA memory.

    Clears the locals of every frame of the stored traceback, ``sys.last_value`` / ``last_traceback`` /
    ``last_exc``, IPython's record of the last error and, with ``clear_output_cache``, IPython's ``Out`` cache
    (``_``, ``__``, ``Out[N]``).

    Returns
    -------
    int or None
        Bytes of CUDA memory released (None when CUDA is not in use).
    """
    torch: Any = sys.modules.get("torch")
    cuda = torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized()
    before = torch.cuda.memory_allocated() if cuda else 0
    if shell is None:
        try:
            from IPython import get_ipython

            shell = get_ipython()
        except ImportError:  # pragma: no cover
            shell = None
    excs = [getattr(sys, "last_value", None), getattr(sys, "last_exc", None)]
    if shell is not None:
        last = getattr(shell, "last_execution_result", None)
        if last is not None:
            excs.append(getattr(last, "error_in_exec", None))
            last.error_in_exec = None
    tbs = [getattr(sys, "last_traceback", None)] + [getattr(e, "__traceback__", None) for e in excs if e is not None]
    for tb in tbs:
        while tb is not None:
            frame = tb.tb_frame
            try:
                frame.clear()
            except RuntimeError:  # a frame still executing (the caller's own): leave it
                pass
            else:
                # Only function frames own their locals: a module frame's locals are the user's namespace.
                # The traceback formatter materialized f_locals; that cached dict still holds the tensors.
                if frame.f_code.co_flags & inspect.CO_OPTIMIZED:
                    locals_ = frame.f_locals
                    if isinstance(locals_, dict) and locals_ is not frame.f_globals:
                        locals_.clear()
            tb = tb.tb_next
    for e in excs:
        if e is not None:
            e.__traceback__ = None
    for name in ("last_value", "last_traceback", "last_type", "last_exc"):
        if hasattr(sys, name):
            delattr(sys, name)
    if shell is not None and clear_output_cache:
        shell.displayhook.flush()
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
        return int(before - torch.cuda.memory_allocated())
    return None
