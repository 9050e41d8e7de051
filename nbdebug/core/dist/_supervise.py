"""Process supervision for the launcher: start N rank processes, stream their output, watch for hangs, take their
stacks, and leave no process behind.  What the ranks' ends mean is ``_verdict``'s business.

Design (each choice was measured on torch 2.9 and 2.13; benchmarks/bench_dist.py repeats the timings):

- The launcher hosts the rendezvous ``TCPStore`` itself on port 0 (the OS picks a free port atomically) and the
  ranks join it as clients with torchelastic's ``TORCHELASTIC_USE_AGENT_STORE=True``: no rank ever binds a port,
  so "Address already in use" cannot happen, and a stale listener on the default port is never contacted.
- Ranks are plain subprocesses (``python -m nbdebug.core.dist._bootstrap``), each in its own session so that the
  rank and anything it started can be killed by process group.  torch's elastic agent is not used in the
  kernel: it installs a SIGTERM handler there and SIGTERMs the survivors on the first failure, before they can be
  looked at (notes §2.4, §1.4).  torch's error-file format is kept: every rank runs under ``@record`` with its own
  ``TORCHELASTIC_ERROR_FILE``.
- Progress = a rank printed something, its main thread's Python frame moved, or a rank exited.  When no rank
  makes progress for ``timeout`` seconds (the process group's own timeout is set longer), every live rank is
  asked for its stack (a thread inside the rank answers while the main thread is blocked in a collective; py-spy
  or faulthandler when that thread cannot run) and its Flight Recorder entries, then every rank is killed.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from nbdebug.core.dist._failures import classify, signal_name
from nbdebug.core.dist._hang import (
    analyze_hang,
    collective_of,
    parse_faulthandler,
    parse_pyspy,
    parse_traceback,
)
from nbdebug.core.dist._types import Hang
from nbdebug.errors import DistRunError

__all__ = ["Echo", "default_echo", "make_store", "Session"]

Echo = Callable[[int, str, str], None]  # (rank, "stdout"|"stderr"|"nbdebug", line)


def default_echo(rank: int, stream: str, line: str) -> None:
    """Print a rank's line with a ``[rank N]`` prefix to the matching stream of this process."""
    out = sys.stderr if stream == "stderr" else sys.stdout
    prefix = "[nbdebug]" if stream == "nbdebug" else f"[rank {rank}]"
    print(f"{prefix} {line}", file=out, flush=True)


# Python's fatal-error handler prints every thread's stack after "Fatal Python error: Aborted": nbdebug's own
# threads in the rank, the launcher's frames and a list of extension modules.  The report shows the main thread's
# stack once, cut to the user's part; the live stream says so instead of printing the dump as well.
_DUMP_LINE = re.compile(r"(?:Current thread|Thread) 0x[0-9a-fA-F]+ .*\(most recent call first\):$|  File |\s*$|"
                        r"Extension modules: |Python runtime state: ")


def _live_line(r: Rank, kind: str, line: str) -> str | None:
    """The line to stream live for a rank's output line, or None while it is inside a fatal-error stack dump."""
    if kind != "stderr":
        return line
    if line.startswith("Fatal Python error:"):
        r.in_crash_dump = True
        return f"{line.rstrip()} (the stack of its main thread is in the report below)"
    if r.in_crash_dump:
        if _DUMP_LINE.match(line):
            return None
        r.in_crash_dump = False
    return line


def _find_pyspy() -> str | None:
    found = shutil.which("py-spy")
    if found:
        return found
    sibling = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return sibling if os.path.exists(sibling) else None


def make_store(requested_port: int | None, notes: list[str]) -> Any:
    from datetime import timedelta

    from torch.distributed import TCPStore

    def make(port: int) -> Any:
        return TCPStore("127.0.0.1", port, None, True, timeout=timedelta(seconds=60), wait_for_workers=False)

    taken = False
    if requested_port:
        try:
            return make(requested_port)
        except Exception:  # the requested port is taken (a stale run?): take a free one instead
            taken = True
    last: Exception | None = None
    for _ in range(5):
        try:
            store = make(0)
            if taken:
                notes.append(f"port {requested_port} was already in use (a stale run?); the ranks met on free port "
                             f"{store.port} instead")
            return store
        except Exception as e:  # pragma: no cover  (port 0 is assigned by the OS; retried only for safety)
            last = e
    raise DistRunError(f"could not start the rendezvous store on 127.0.0.1 (tried 5 free ports): {last}") from last


@dataclass
class Rank:
    rank: int
    proc: subprocess.Popen[bytes]
    control_w: int
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    open_streams: int = 3
    exc: dict[str, Any] | None = None
    dumped: dict[str, Any] | None = None
    main_ident: int | None = None
    exit_time: float | None = None
    killed: bool = False
    checks: list[dict[str, Any]] = field(default_factory=list)
    in_crash_dump: bool = False
    steps: list[dict[str, Any]] = field(default_factory=list)
    last_tick: float = field(default_factory=time.monotonic)
    finished_t: float | None = None
    in_collective: bool = False


def _reader(rank: int, kind: str, pipe: IO[bytes], q: queue.Queue[tuple[int, str, Any]]) -> None:
    try:
        for raw in iter(pipe.readline, b""):
            text = raw.decode("utf-8", errors="replace").rstrip("\n")
            if kind == "status":
                try:
                    q.put((rank, kind, json.loads(text)))
                except ValueError:
                    continue
            else:
                q.put((rank, kind, text))
    finally:
        q.put((rank, kind, None))
        pipe.close()


def _kill_group(r: Rank) -> None:
    """Kill a rank and everything it started: each rank leads its own session, so its process group holds its
    children (``os.fork``, ``subprocess``) too, also after the rank itself has exited."""
    for target in ("group", "pid"):
        try:
            if target == "group":
                os.killpg(r.proc.pid, signal.SIGKILL)
            elif r.proc.poll() is None:
                r.proc.kill()
        except (ProcessLookupError, PermissionError, OSError):
            pass


class Session:
    """One run: processes, pipes, the event loop and the watchdog."""

    def __init__(self, spec: dict[str, Any], nprocs: int, timeout: float, env: Mapping[str, str],
                 echo: Echo | None, notes: list[str], run_dir: str, port: int) -> None:
        self.spec, self.nprocs, self.timeout, self.echo = spec, nprocs, timeout, echo
        self.notes, self.run_dir, self.port = notes, run_dir, port
        self.q: queue.Queue[tuple[int, str, Any]] = queue.Queue()
        self.ranks: list[Rank] = []
        self.t0 = time.time()
        self.env = env
        self.hang: Hang | None = None
        self.interrupted = False

    # -- start -----------------------------------------------------------------------------------------------
    def start(self) -> None:
        for rank in range(self.nprocs):
            status_r, status_w = os.pipe()
            control_r, control_w = os.pipe()
            env = dict(self.env)
            env.update({
                "RANK": str(rank), "LOCAL_RANK": str(rank), "GROUP_RANK": "0", "LOCAL_WORLD_SIZE": str(self.nprocs),
                "TORCHELASTIC_ERROR_FILE": os.path.join(self.run_dir, f"rank_{rank}", "error.json"),
                "NBDEBUG_DIST_STATUS_FD": str(status_w), "NBDEBUG_DIST_CONTROL_FD": str(control_r),
            })
            os.makedirs(os.path.join(self.run_dir, f"rank_{rank}"), exist_ok=True)
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "nbdebug.core.dist._bootstrap", self.run_dir],
                    env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    pass_fds=(status_w, control_r), start_new_session=True, cwd=self.spec.get("cwd") or None,
                )
            finally:
                os.close(status_w)
                os.close(control_r)
            r = Rank(rank=rank, proc=proc, control_w=control_w)
            self.ranks.append(r)
            assert proc.stdout is not None and proc.stderr is not None
            for kind, pipe in (("stdout", proc.stdout), ("stderr", proc.stderr),
                               ("status", os.fdopen(status_r, "rb"))):
                threading.Thread(target=_reader, args=(rank, kind, pipe, self.q), daemon=True,
                                 name=f"nbdebug-rank{rank}-{kind}").start()

    # -- events ----------------------------------------------------------------------------------------------
    def _handle(self, rank: int, kind: str, payload: Any) -> bool:
        """Apply one event; return True when it counts as progress."""
        r = self.ranks[rank]
        if payload is None:
            r.open_streams -= 1
            return False
        if kind in ("stdout", "stderr"):
            (r.stdout if kind == "stdout" else r.stderr).append(payload)
            shown = _live_line(r, kind, payload)
            if self.echo is not None and shown is not None:
                self.echo(rank, kind, self._rename(shown))
            return True
        ev = payload.get("ev")
        if ev == "tick":
            r.last_tick = time.monotonic()
            r.in_collective = bool(payload.get("coll"))
        elif ev == "started":
            r.main_ident = payload.get("main")
        elif ev == "exc":
            if r.exc is None:
                r.exc = payload
        elif ev == "dumped":
            r.dumped = payload
            return False
        elif ev == "finished":
            r.finished_t = float(payload["t"])
        elif ev == "check":
            r.checks.append(payload)
        elif ev == "step":
            r.steps.append(payload)
        elif ev == "steps":
            r.steps.extend(s for s in payload.get("steps") or () if isinstance(s, dict))
        elif ev == "arrivals":
            if r.steps:  # read once at the end: they belong with the steps already logged
                r.steps[-1] = {**r.steps[-1], "arrivals": [*(r.steps[-1].get("arrivals") or ()),
                                                           *(payload.get("arrivals") or ())]}
        return ev in ("tick", "ready", "check", "step", "steps", "exc", "done", "started", "finished")

    def _rename(self, text: str) -> str:
        source = self.spec.get("source_path", "")
        if self.spec.get("mode") == "cell" and source:
            text = text.replace(f'"{source}"', '"<cell>"').replace(source, "<cell>")
        return text

    def _drain(self, until: float) -> None:
        while time.monotonic() < until:
            try:
                item = self.q.get(timeout=0.05)
            except queue.Empty:
                continue
            self._handle(*item)

    # -- loop ------------------------------------------------------------------------------------------------
    def loop(self) -> None:
        last_progress = time.monotonic()
        first_failure: float | None = None
        grace = min(self.timeout, 5.0)
        try:
            while True:
                try:
                    item = self.q.get(timeout=0.1)
                    if self._handle(*item):
                        last_progress = time.monotonic()
                except queue.Empty:
                    pass
                now = time.monotonic()
                for r in self.ranks:
                    if r.exit_time is None and r.proc.poll() is not None:
                        r.exit_time = time.time()
                        last_progress = now
                        if r.proc.returncode != 0 and first_failure is None:
                            first_failure = now
                alive = [r for r in self.ranks if r.exit_time is None]
                if not alive:
                    # every rank ended: what a rank started (os.fork, subprocess) ends with it, and no longer holds
                    # the rank's pipes open; then collect what is still in the pipes (bounded)
                    for r in self.ranks:
                        _kill_group(r)
                    deadline = now + 3.0
                    while any(r.open_streams > 0 for r in self.ranks) and time.monotonic() < deadline:
                        self._drain(time.monotonic() + 0.1)
                    self._drain(time.monotonic() + 0.05)
                    return
                stalled = now - last_progress
                # a rank blocked in a collective for longer than the timeout is a hang even while another
                # rank keeps moving (e.g. polls for a file that the blocked rank would write)
                blocked = [r for r in alive if r.in_collective and now - r.last_tick > self.timeout]
                after_failure = first_failure is not None and (stalled > grace or now - first_failure > self.timeout)
                if stalled > self.timeout or blocked or after_failure:
                    self._on_hang(alive, max(stalled, *(now - r.last_tick for r in blocked)) if blocked else stalled)
                    return
        except KeyboardInterrupt:
            self.interrupted = True
            self.notes.append("interrupted (KeyboardInterrupt): the ranks' stacks were taken at that moment and "
                              "every rank was killed")
            alive = [r for r in self.ranks if r.exit_time is None]
            if alive:
                try:
                    self._on_hang(alive, time.monotonic() - last_progress, deadline_s=2.0)
                except KeyboardInterrupt:  # a second interrupt: no stacks, just end the ranks (close() does)
                    self.notes.append("interrupted again while taking stacks: ranks killed without stacks")

    # -- hang --------------------------------------------------------------------------------------------------
    def _on_hang(self, alive: list[Rank], stalled: float, deadline_s: float = 3.0) -> None:
        for r in alive:
            try:
                os.write(r.control_w, b"dump\n")
            except OSError:
                pass
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline and any(r.dumped is None for r in alive):
            self._drain(time.monotonic() + 0.05)
        frames: dict[int, list[dict[str, Any]]] = {}
        stacks: dict[int, str] = {}
        fr: dict[int, list[dict[str, Any]]] = {}
        methods = set()
        pyspy = _find_pyspy()
        for r in alive:
            if r.dumped is not None:
                frames[r.rank], stacks[r.rank] = r.dumped.get("frames", []), r.dumped.get("stack", "")
                fr[r.rank] = r.dumped.get("fr", [])
                methods.add("in-rank thread")
                continue
            text = ""
            if pyspy:
                try:
                    text = subprocess.run([pyspy, "dump", "--full-filenames", "--pid", str(r.proc.pid)],
                                          capture_output=True, text=True, timeout=10).stdout
                except (OSError, subprocess.SubprocessError):
                    text = ""
            if text.strip():
                frames[r.rank], stacks[r.rank] = parse_pyspy(text), text
                methods.add("py-spy")
                continue
            path = os.path.join(self.run_dir, f"rank_{r.rank}", "faulthandler.txt")
            try:
                os.kill(r.proc.pid, signal.SIGUSR1)
                time.sleep(0.5)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
            except OSError:
                text = ""
            ident = f"0x{r.main_ident:016x}" if r.main_ident else None
            frames[r.rank], stacks[r.rank] = parse_faulthandler(text, ident), text or "(no stack could be taken)"
            methods.add("faulthandler")
        for r in self.ranks:
            _kill_group(r)
            if r.exit_time is None:
                r.killed = True
        exited = {}
        for r in self.ranks:
            if r.rank in frames:
                continue
            if r.exc is not None and classify(str(r.exc.get("message", "")))[0] == "victim":
                # it failed while waiting (its own process-group timeout, a closed connection): where it waited
                # is what matters, so it joins the waiting ranks with the stack of its traceback
                tb = str(r.exc.get("traceback", ""))
                tb_frames = parse_traceback(tb)
                if collective_of(tb_frames):
                    frames[r.rank] = tb_frames
                    stacks[r.rank] = f"(had already failed: {r.exc.get('message', '')[:200]})\n{tb}"
                    continue
            code = r.proc.returncode
            if r.exc is not None:
                exited[r.rank] = f"had already exited with {r.exc.get('message', '')[:200]}"
            elif code == 0:
                exited[r.rank] = "had already finished its code and exited (exit code 0)"
            else:
                exited[r.rank] = f"had already exited (exit code {code}{' ' + signal_name(code) if code and code < 0 else ''})"
        self.hang = analyze_hang(self.timeout if not self.interrupted else stalled, frames, stacks, exited, fr,
                                 ", ".join(sorted(methods)), rename=self._rename)

    # -- teardown ----------------------------------------------------------------------------------------------
    def close(self) -> None:
        for r in self.ranks:
            _kill_group(r)
        for r in self.ranks:
            try:
                r.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass
            if r.exit_time is None:
                r.exit_time = time.time()
            try:
                os.close(r.control_w)
            except OSError:
                pass

