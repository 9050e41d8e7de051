"""Parse torch_xla's debug output (``PT_XLA_DEBUG_LEVEL`` / ``PT_XLA_DEBUG``, torch_xla 2.2 to 2.9+).

Blocks look like ``Compilation Analysis: Compilation Cause`` / ``Execution Analysis: Execution Cause`` followed
by the cause, ``Graph Hash``, the number of inputs/outputs and the Python frames that triggered the graph
(innermost first); ``pt-xla-profiler:`` lines carry torch_xla's own metric analysis (``PT_XLA_DEBUG=1``).
Each event is mapped to the first frame that is the user's own code (not torch, torch_xla or nbdebug).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from nbdebug.core._own import OWN_ANYWHERE
from nbdebug.core._result import Result

__all__ = ["Frame", "DebugEvent", "DebugLog", "parse_debug_log", "is_library_file", "CAUSES", "cause_kind"]

_PREFIX = re.compile(r"^(Unexpected Execution|Compilation|Execution|Post Compilation) Analysis: ?(.*)$")
# ASCII digits, bounded: "²" is a digit to str.isdigit but not to int(), and int() refuses 5000 digits
_FRAME = re.compile(r"^\s+(.+?) \((.+):([0-9]{1,9})\)\s*$")
_SMALL_COUNT = re.compile(r"[0-9]{1,9}")
_PROFILER = re.compile(r"pt-xla-profiler: (.*)$")
_LIBRARY_PARTS = ("site-packages", "dist-packages", "/torch/", "/torch_xla/", "<frozen ", "/lib/python3")


# Every cause line torch_xla prints (debug_util.cpp), 2.2-2.7 wording ("mark_step") and 2.8+ ("torch_xla.sync"),
# and what it means for a step timeline: "step" ends a step, "read" is user code reading a value mid-step.
CAUSES: tuple[tuple[str, str, str], ...] = (
    ("user torch_xla.sync", "step", "2.8+"),
    ("user mark_step", "step", "2.2-2.7"),
    ("torch_xla.sync in parallel loader at step end", "step", "2.8+"),
    ("mark_step in parallel loader at step end", "step", "2.2-2.7"),
    ("torch_xla.sync when exiting a profiler StepTrace region", "step", "2.8+"),
    ("mark_step when exiting a profiler StepTrace region", "step", "2.2-2.7"),
    ("torch_xla.compile", "step", "2.5+"),
    ("torch_xla.compile clear the pending graph prior calling the target function", "other", "2.5+"),
    ("torch_xla.sync when dynamo processing input graphs", "other", "2.8+"),
    ("mark_step when dynamo processing input graphs", "other", "2.2-2.7"),
    ("dynamo is compiling a FX graph to HLO", "other", "2.2+"),
    ("dynamo is executing a compiled program", "other", "2.2+"),
    ("most likely user code trying to access tensor value before torch_xla.sync", "read", "2.8+"),
    ("most likely user code trying to access tensor value before mark_step", "read", "2.2-2.7"),
)
_CAUSE_KIND = {cause: kind for cause, kind, _ in CAUSES}


def cause_kind(cause: str) -> str:
    """``"step"``, ``"read"`` or ``"other"`` for a cause line (unknown wording is read by its key words)."""
    kind = _CAUSE_KIND.get(cause.strip())
    if kind is not None:
        return kind
    if "access tensor value" in cause:
        return "read"
    return "step" if ("mark_step" in cause or "torch_xla.sync" in cause) and "dynamo" not in cause else "other"


def is_library_file(path: str) -> bool:
    """True for frames in torch, torch_xla, nbdebug, the standard library or any installed package."""
    return (any(part in path for part in _LIBRARY_PARTS) or path.startswith("<string>")
            or OWN_ANYWHERE.search(path) is not None)  # nbdebug's own files, wherever it is installed


@dataclass(frozen=True)
class Frame:
    """One Python frame printed by torch_xla: function, file, line."""

    function: str
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line} in {self.function}"


@dataclass(frozen=True)
class DebugEvent:
    """One "Compilation Analysis" or "Execution Analysis" block."""

    kind: str  # "compile" | "execute" | "unexpected"
    cause: str
    graph_hash: str = ""
    graph_name: str = ""
    n_inputs: int | None = None
    n_outputs: int | None = None
    frames: tuple[Frame, ...] = ()
    step: int = 0  # user syncs seen before this event (0-based step index)

    @property
    def user_frame(self) -> Frame | None:
        """The innermost frame in the user's own code, if any."""
        for f in self.frames:
            if not is_library_file(f.file):
                return f
        return None

    @property
    def is_sync(self) -> bool:
        """True when the cause is a step boundary (user sync, parallel loader, profiler step, compile)."""
        return cause_kind(self.cause) == "step"

    @property
    def is_host_read(self) -> bool:
        """True when the cause is user code reading a tensor value before the sync."""
        return cause_kind(self.cause) == "read"


@dataclass(frozen=True, repr=False)
class DebugLog(Result):
    """Everything recognised in a debug log.

    Attributes
    ----------
    events : tuple of DebugEvent
        Every compilation and execution block, in order, each with its cause and the Python frames behind it.
    profiler : tuple of str
        Text of every ``pt-xla-profiler:`` line (torch_xla's own analysis), in order.
    """

    events: tuple[DebugEvent, ...]
    profiler: tuple[str, ...]

    @property
    def compiles(self) -> tuple[DebugEvent, ...]:
        """The compilation events."""
        return tuple(e for e in self.events if e.kind == "compile")

    @property
    def executions(self) -> tuple[DebugEvent, ...]:
        """The execution events."""
        return tuple(e for e in self.events if e.kind != "compile")

    @property
    def steps(self) -> int:
        """Step boundaries seen (executions caused by a sync; compiles when there are no execution blocks)."""
        execs = self.executions
        source = execs if execs else self.compiles
        return sum(1 for e in source if e.is_sync)

    def __bool__(self) -> bool:
        return bool(self.events or self.profiler)

    def _summary_line(self) -> str:
        return (f"{len(self.compiles)} compiles, {len(self.executions)} executions, {self.steps} steps, "
                f"{len(self.profiler)} profiler lines")

    def _records(self) -> list[dict[str, Any]]:
        return [
            {"step": e.step, "kind": e.kind, "cause": e.cause, "graph_hash": e.graph_hash, "graph_name": e.graph_name,
             "n_inputs": e.n_inputs, "n_outputs": e.n_outputs,
             "user_frame": str(e.user_frame) if e.user_frame is not None else None}
            for e in self.events
        ]


def parse_debug_log(text: str) -> DebugLog:
    """Parse PT_XLA_DEBUG output (any other lines, such as the user's prints, are ignored)."""
    events: list[DebugEvent] = []
    profiler: list[str] = []
    block: dict | None = None
    section = ""
    step = 0
    last_exec_sync = False

    def close() -> None:
        nonlocal block, step
        if block is None:
            return
        ev = DebugEvent(
            kind=block["kind"],
            cause=block.get("cause", ""),
            graph_hash=block.get("hash", ""),
            graph_name=block.get("name", ""),
            n_inputs=block.get("inputs"),
            n_outputs=block.get("outputs"),
            frames=tuple(block.get("frames", ())),
            step=step,
        )
        events.append(ev)
        block = None

    for raw in text.splitlines():
        prof = _PROFILER.search(raw)
        if prof:
            profiler.append(prof.group(1).strip())
            continue
        m = _PREFIX.match(raw)
        if not m:
            continue
        who, body = m.groups()
        if who == "Post Compilation":
            continue
        stripped = body.strip()
        if stripped.startswith("====="):
            if block is not None and block.get("done"):
                close()
            continue
        if stripped in ("Compilation Cause", "Execution Cause"):
            close()
            kind = {"Compilation": "compile", "Execution": "execute"}.get(who, "unexpected")
            if kind != "compile" and last_exec_sync:
                pass
            block = {"kind": kind, "frames": []}
            section = "cause"
            continue
        if block is None:
            continue
        if stripped.startswith("-----"):
            block["done"] = True
            ev_kind = block["kind"]
            close()
            ev = events[-1]
            # a sync-caused execution ends a step; without execution blocks (level 1) the sync compile does
            if ev_kind != "compile" and ev.is_sync:
                step += 1
            continue
        if stripped.startswith("Graph Info"):
            section = "graph"
            continue
        if stripped.startswith("Python Frame Triggered Execution"):
            section = "frames"
            continue
        if section == "cause" and stripped:
            block["cause"] = stripped
        elif section == "graph":
            key, _, value = stripped.partition(":")
            value = value.strip()
            if key == "Graph Hash":
                block["hash"] = value
            elif key == "Graph Name":
                block["name"] = value
            elif key == "Number of Graph Inputs" and _SMALL_COUNT.fullmatch(value):
                block["inputs"] = int(value)
            elif key == "Number of Graph Outputs" and _SMALL_COUNT.fullmatch(value):
                block["outputs"] = int(value)
        elif section == "frames":
            fm = _FRAME.match(body)
            if fm:
                block["frames"].append(Frame(fm.group(1), fm.group(2), int(fm.group(3))))
    if block is not None:
        close()
    return DebugLog(tuple(events), tuple(profiler))
