"""From each rank's stack (and Flight Recorder entries) to: who waits in which collective, who never came."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from nbdebug.core.dist._types import Hang, StackGroup

__all__ = ["COLLECTIVES", "analyze_hang", "parse_pyspy", "parse_faulthandler", "parse_traceback", "user_frame",
           "collective_of"]

# public torch.distributed functions that block until every rank of the group has called them
COLLECTIVES = frozenset({
    "all_reduce", "broadcast", "barrier", "monitored_barrier", "all_gather", "all_gather_object",
    "all_gather_into_tensor", "_all_gather_base", "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base",
    "reduce", "gather", "gather_object", "scatter", "scatter_object_list", "broadcast_object_list", "all_to_all",
    "all_to_all_single", "send", "recv", "isend", "irecv", "batch_isend_irecv", "send_object_list",
    "recv_object_list", "new_group", "init_process_group", "destroy_process_group", "wait",
})


def _is_library(path: str) -> bool:
    p = path.replace("\\", "/")
    # py-spy prints library paths relative to site-packages ("torch/distributed/distributed_c10d.py")
    return ("/site-packages/" in p or "/dist-packages/" in p or "/lib/python3" in p or p.startswith("<frozen")
            or "/nbdebug/core/dist/" in p or p.startswith(("torch/", "nbdebug/", "threading.py")))


def collective_of(frames: Sequence[Mapping[str, Any]]) -> str:
    """The outermost torch.distributed collective on the stack ('' if none)."""
    for f in frames:
        path = str(f.get("file", "")).replace("\\", "/")
        if "torch/distributed/" in path and f.get("func") in COLLECTIVES:
            return str(f["func"])
    return ""


def user_frame(frames: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The innermost frame of the user's code (not torch, not the standard library, not nbdebug)."""
    for f in reversed(frames):
        if not _is_library(str(f.get("file", ""))):
            return f
    return frames[-1] if frames else None


def _where(f: Mapping[str, Any] | None) -> str:
    if not f:
        return "?"
    return f"{f.get('file')}:{f.get('line')} in {f.get('func')}"


_PYSPY_FRAME = re.compile(r"^\s+(?P<func>\S.*?) \((?P<file>.+):(?P<line>[0-9]{1,18})\)\s*$")
_FH_FRAME = re.compile(r'^\s+File "(?P<file>.+)", line (?P<line>[0-9]{1,18}) in (?P<func>\S+)')


def parse_pyspy(text: str) -> list[dict[str, Any]]:
    """Frames (outermost first) of the first (main) thread in a ``py-spy dump``."""
    frames: list[dict[str, Any]] = []
    seen_thread = False
    for line in text.splitlines():
        if line.startswith("Thread "):
            if seen_thread:
                break
            seen_thread = True
            continue
        m = _PYSPY_FRAME.match(line)
        if m and seen_thread:
            frames.append({"file": m["file"], "line": int(m["line"]), "func": m["func"], "code": ""})
    return frames[::-1]


def parse_faulthandler(text: str, main_thread_hex: str | None = None) -> list[dict[str, Any]]:
    """Frames (outermost first) of one thread in a ``faulthandler`` dump (the main thread if its id is given)."""
    blocks = re.split(r"^(?=(?:Current thread|Thread) 0x)", text, flags=re.M)
    chosen = ""
    for block in blocks:
        if not block.strip():
            continue
        if main_thread_hex is None or main_thread_hex.lower() in block.splitlines()[0].lower():
            chosen = block
            if main_thread_hex is not None or "nbdebug" not in block:
                break
    frames = [
        {"file": m["file"], "line": int(m["line"]), "func": m["func"], "code": ""}
        for m in (_FH_FRAME.match(line) for line in chosen.splitlines()) if m
    ]
    return frames[::-1]


_TB_FRAME = re.compile(r'^\s*File "(?P<file>.+)", line (?P<line>[0-9]{1,18}), in (?P<func>\S+)')


def parse_traceback(text: str) -> list[dict[str, Any]]:
    """Frames (outermost first) of a Python traceback text, with each frame's source line when shown."""
    frames: list[dict[str, Any]] = []
    for line in text.splitlines():
        m = _TB_FRAME.match(line)
        if m:
            frames.append({"file": m["file"], "line": int(m["line"]), "func": m["func"], "code": ""})
        elif frames and not frames[-1]["code"] and line.startswith("    ") and line.strip() \
                and not set(line.strip()) <= set("^~ "):
            frames[-1]["code"] = line.strip()
    return frames


def _fr_last(entries: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    coll = [e for e in entries if not e.get("is_p2p")]
    return coll[-1] if coll else None


def analyze_hang(
    after_seconds: float,
    frames: Mapping[int, Sequence[Mapping[str, Any]]],
    stacks: Mapping[int, str],
    exited: Mapping[int, str],
    flight_recorder: Mapping[int, Sequence[Mapping[str, Any]]] | None = None,
    method: str = "",
    rename: Any = None,
) -> Hang:
    """Group the live ranks by stack and work out which ranks never reached the collective the others wait in.

    ``frames``/``stacks`` hold the live ranks; ``exited`` maps ranks that had already ended to how they ended.
    ``rename`` (optional) maps a file path to what the user knows it as (e.g. the cell).
    """
    rename = rename or (lambda s: s)
    fr = dict(flight_recorder or {})
    by_key: dict[tuple[str, str], list[int]] = {}
    info: dict[int, tuple[str, Mapping[str, Any] | None]] = {}
    for rank in sorted(frames):
        fs = frames[rank]
        coll = collective_of(fs)
        uf = user_frame(fs)
        info[rank] = (coll, uf)
        by_key.setdefault((coll, rename(_where(uf))), []).append(rank)  # one group per place the user sees
    groups = tuple(
        StackGroup(
            ranks=tuple(ranks), collective=key[0], location=key[1],
            code=str((info[ranks[0]][1] or {}).get("code", "")), stack=rename(stacks.get(ranks[0], "")),
        )
        for key, ranks in sorted(by_key.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
    )
    waiting_groups = [g for g in groups if g.collective]
    missing_where: dict[int, str] = {}
    collective = location = ""
    waiting: tuple[int, ...] = ()
    if waiting_groups:
        main = waiting_groups[0]  # the biggest group blocked in a collective
        collective, location, waiting = main.collective, main.location, main.ranks
        seq = {r: (_fr_last(fr.get(r, ())) or {}).get("collective_seq_id") for r in waiting}
        for g in groups:
            if g is main:
                continue
            for r in g.ranks:
                where = f"{g.location}" + (f"  `{g.code}`" if g.code else "")
                if g.collective:
                    where = f"waiting in {g.collective} at {where}"
                missing_where[r] = where
        for r, how in exited.items():
            missing_where[r] = how
        missing = tuple(sorted(missing_where))
        other = ", ".join(f"rank {r} ({missing_where[r]})" for r in missing)
        seq_txt = ""
        seqs = {s for s in seq.values() if s is not None}
        if len(seqs) == 1:
            seq_txt = f" (collective #{seqs.pop()} per the Flight Recorder)"
        if missing:
            explanation = (
                f"Ranks {list(waiting)} are blocked in {collective} at {location}{seq_txt}; "
                f"{'it' if len(missing) == 1 else 'they'} never reached it: {other}. "
                "Every rank must call the same collectives in the same order: look for a branch on the rank, "
                "an early return/exit, or a data loader with fewer batches on the missing rank."
            )
        else:
            explanation = (
                f"All {len(waiting)} ranks are blocked in {collective} at {location}{seq_txt}, yet it does not "
                "complete: the ranks disagree on an earlier collective (one rank skipped or added one, so their "
                "sequences are shifted) or use different process groups."
            )
    else:
        for r, how in exited.items():
            missing_where[r] = how
        missing = tuple(sorted(missing_where))
        places = "; ".join(f"ranks {list(g.ranks)} at {g.location}" for g in groups)
        explanation = (
            f"No rank is waiting in a collective, yet none made progress for {after_seconds:g} s: {places}. "
            "This is a hang in ordinary code (a lock, input(), a data loader worker, a sleep), not a "
            "collective mismatch."
        )
    fr_summary = {
        r: tuple({"seq": e.get("collective_seq_id"), "op": e.get("profiling_name"), "sizes": e.get("input_sizes")}
                 for e in entries[-5:])
        for r, entries in fr.items()
    }
    return Hang(
        after_seconds=after_seconds, collective=collective, location=location, waiting_ranks=tuple(waiting),
        missing_ranks=missing, missing_where=missing_where, groups=groups,
        stacks={r: rename(s) for r, s in sorted(stacks.items())}, flight_recorder=fr_summary, method=method,
        explanation=explanation,
    )
