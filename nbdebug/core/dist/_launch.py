"""Run code on N local ranks, stream their output, watch for hangs, explain failures, leave no process behind.

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
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import IO, Any

from nbdebug.core._findings import Finding, Fix, sort_findings
from nbdebug.core.dist._checks import check_finding
from nbdebug.core.dist._failures import classify, explain_detail_mismatch, meaning, signal_name
from nbdebug.core.dist._hang import (
    analyze_hang,
    collective_of,
    parse_faulthandler,
    parse_pyspy,
    parse_traceback,
)
from nbdebug.core.dist._types import RunInterrupted, CheckRecord, DistRun, Hang, RankResult
from nbdebug.core.explain import Diagnosis, explain
from nbdebug.core.knowledge import finding
from nbdebug.errors import DistRunError, DistUsageError

__all__ = ["Backend", "run", "run_script", "Echo"]

Echo = Callable[[int, str, str], None]  # (rank, "stdout"|"stderr"|"nbdebug", line)


class Backend(str, Enum):
    """Process-group backends the runner can initialise."""

    GLOO = "gloo"
    NCCL = "nccl"

    @classmethod
    def parse(cls, value: str | Backend) -> Backend:
        try:
            return cls(str(getattr(value, "value", value)).lower())
        except ValueError as e:
            raise DistUsageError(f"backend {value!r} is not supported; expected one of: gloo, nccl") from e


def default_echo(rank: int, stream: str, line: str) -> None:
    """Print a rank's line with a ``[rank N]`` prefix to the matching stream of this process."""
    out = sys.stderr if stream == "stderr" else sys.stdout
    prefix = "[nbdebug]" if stream == "nbdebug" else f"[rank {rank}]"
    print(f"{prefix} {line}", file=out, flush=True)


def _package_root() -> str:
    import nbdebug

    return os.path.dirname(os.path.dirname(os.path.abspath(nbdebug.__file__)))


def _find_pyspy() -> str | None:
    found = shutil.which("py-spy")
    if found:
        return found
    sibling = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return sibling if os.path.exists(sibling) else None


def _make_store(requested_port: int | None, notes: list[str]) -> Any:
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
class _Rank:
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


def _kill_group(r: _Rank) -> None:
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


class _Session:
    """One run: processes, pipes, the event loop and the watchdog."""

    def __init__(self, spec: dict[str, Any], nprocs: int, timeout: float, env: Mapping[str, str],
                 echo: Echo | None, notes: list[str], run_dir: str, port: int) -> None:
        self.spec, self.nprocs, self.timeout, self.echo = spec, nprocs, timeout, echo
        self.notes, self.run_dir, self.port = notes, run_dir, port
        self.q: queue.Queue[tuple[int, str, Any]] = queue.Queue()
        self.ranks: list[_Rank] = []
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
            r = _Rank(rank=rank, proc=proc, control_w=control_w)
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
            if self.echo is not None:
                self.echo(rank, kind, self._rename(payload))
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
    def _on_hang(self, alive: list[_Rank], stalled: float, deadline_s: float = 3.0) -> None:
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

    # -- result ------------------------------------------------------------------------------------------------
    def result(self, store_port: int) -> DistRun:
        results: list[RankResult] = []
        for r in self.ranks:
            results.append(self._rank_result(r))
        primary, reason = _pick_primary(results, self.hang, self.t0)
        ok = all(x.exitcode == 0 for x in results) and self.hang is None and not self.interrupted
        checks = []
        seen = set()
        for r in self.ranks:
            for c in r.checks:
                key = (c.get("kind"), c.get("summary"))
                if key in seen:
                    continue
                seen.add(key)
                checks.append(CheckRecord(kind=str(c.get("kind")), ok=bool(c.get("ok")),
                                          summary=str(c.get("summary", "")), details=str(c.get("details", "")),
                                          result=str(c.get("result", ""))))
        steps = tuple(
            {"rank": r.rank, "step": s.get("step"), "seconds": s.get("seconds"), "loss": s.get("loss"),
             "arrivals": tuple(tuple(a) for a in s.get("arrivals") or ())}
            for r in self.ranks for s in r.steps
        )
        findings = _name_errors(results) if self.spec.get("mode") == "cell" else []
        for check in checks:
            f = None if check.ok else check_finding(check.result, check.summary, check.details)
            if f is not None:
                findings.append(f)
        return DistRun(
            ok=ok, nprocs=self.nprocs, backend=str(self.spec["backend"]), ranks=tuple(results),
            primary_rank=primary, primary_reason=reason, hang=self.hang, seconds=time.time() - self.t0,
            port=store_port, notes=tuple(self.notes), checks=tuple(checks), steps=steps, run_dir=self.run_dir,
            findings=sort_findings(findings),
            diagnosis=_diagnose(results[primary]) if primary is not None else None,
        )

    def _rank_result(self, r: _Rank) -> RankResult:
        error_file = os.path.join(self.run_dir, f"rank_{r.rank}", "error.json")
        file_msg, file_tb, file_ts = "", "", None
        try:
            with open(error_file, encoding="utf-8") as fh:
                data = json.load(fh)
            msg = data.get("message", {})
            if isinstance(msg, dict):
                file_msg = str(msg.get("message", ""))
                extra = msg.get("extraInfo", {})
                file_tb = str(extra.get("py_callstack", ""))
                file_ts = float(extra.get("timestamp")) if extra.get("timestamp") else None
            else:
                file_msg = str(msg)
        except (OSError, ValueError, TypeError):
            pass
        code = r.proc.returncode
        error, tb, when = "", "", None
        stderr = "\n".join(r.stderr)
        if r.exc is not None:
            error, tb, when = str(r.exc.get("message", "")), str(r.exc.get("traceback", "")), float(r.exc["t"])
        elif file_msg:
            error, tb, when = file_msg, file_tb, file_ts
        elif code not in (0, None) and not r.killed:
            sig = signal_name(code)
            line, tb = _crash_summary(r.stderr)
            error = f"{sig or f'exit code {code}'}" + (f": {line[:300]}" if line else "")
            when = r.exit_time
        if r.killed:
            kind, what = "killed", "ended by nbdebug (hang watchdog or interrupt); see the hang report"
            if not error:
                error = "killed by nbdebug after the hang watchdog fired" if not self.interrupted else \
                    "killed by nbdebug after an interrupt"
        elif error:
            kind, entry, _ = classify(error + "\n" + stderr[-4000:])
            what = meaning(entry) if entry else ""
            if entry is not None and entry.slug == "collective_mismatch":
                what = explain_detail_mismatch(error) or what
        else:
            kind, what = "", ""
        return RankResult(
            rank=r.rank, pid=r.proc.pid, exitcode=code, stdout="\n".join(r.stdout), stderr=self._rename(stderr),
            traceback=self._rename(tb), error=self._rename(error), error_time=when, error_kind=kind,
            error_meaning=what, error_file=error_file,
            ended_at=r.finished_t if r.finished_t is not None else r.exit_time,
        )


_NAME_ERROR = re.compile(r"NameError: name '(\w+)' is not defined")


def _name_errors(ranks: Sequence[RankResult]) -> list[Finding]:
    """Every rank failed with ``NameError``: the ranks are fresh processes, without the notebook's names."""
    names: dict[str, None] = {}
    for r in ranks:
        m = _NAME_ERROR.search(r.error)
        if m is None:
            return []
        names.setdefault(m.group(1))
    if not names:
        return []
    listed = ",".join(names)
    return [finding(
        "name_not_shipped",
        f"every rank failed with NameError ({', '.join(repr(n) for n in names)} is not defined there): each rank is "
        "a fresh Python process that does not have the notebook's variables, functions or imports",
        where=tuple(names),
        fixes=[Fix("Ship the names from the notebook to the ranks", f"%%torchrun -n {len(ranks)} --use {listed}"),
               Fix("From Python, pass them with use=", f"nbdebug.dist.run(source, {len(ranks)}, use={list(names)!r})"),
               Fix("Or import / define them inside the cell itself")],
        evidence={"ranks": len(ranks)},
    )]


def _diagnose(rank: RankResult) -> Diagnosis | None:
    """The explainer's diagnosis of a rank's error (its traceback when there is one), None when unrecognised."""
    if not rank.error:
        return None
    try:
        diagnosis = explain(rank.traceback if rank.error in rank.traceback else f"{rank.traceback}\n{rank.error}")
    except Exception:  # the explainer must never cost the user the run's report
        return None
    return diagnosis if diagnosis.known else None


def _crash_summary(stderr: list[str]) -> tuple[str, str]:
    """For a rank killed by a signal: its most telling stderr line, and its main thread's stack when Python's
    fatal-error handler printed one (``Fatal Python error: Aborted`` followed by per-thread stacks)."""
    telling = ""
    for ln in stderr:
        if classify(ln)[1] is not None:
            telling = ln.strip()
            break
    if not telling:
        telling = next((ln.strip() for ln in stderr if ln.startswith(("Fatal Python error", "terminate called"))), "")
    if not telling:
        telling = next((ln.strip() for ln in reversed(stderr) if ln.strip()), "")
    text = "\n".join(stderr)
    blocks = re.split(r"^(?=(?:Current thread|Thread) 0x)", text, flags=re.M)
    main = next((b for b in blocks if "in run_user_code" in b or "_bootstrap.py" in b and " in main" in b), "")
    frames = [ln for ln in main.splitlines()[1:] if ln.strip().startswith("File ")
              and "nbdebug/core/dist/_bootstrap.py" not in ln and "<frozen runpy>" not in ln
              and "elastic/multiprocessing/errors" not in ln]
    tb = ""
    if frames:
        tb = "Stack of the main thread when the process died (most recent call first):\n" + "\n".join(frames)
        tb += f"\n{telling}"
    return telling, tb


def _pick_primary(ranks: list[RankResult], hang: Hang | None, t0: float) -> tuple[int | None, str]:
    failed = [r for r in ranks if r.error_kind in ("cause", "victim")]
    key = lambda r: (r.error_time if r.error_time is not None else float("inf"), r.rank)  # noqa: E731
    causes = sorted((r for r in failed if r.error_kind == "cause"), key=key)
    victims = sorted((r for r in failed if r.error_kind == "victim"), key=key)
    after = ""
    if victims:
        after = "; then " + ", ".join(f"rank {v.rank} failed as a consequence ({v.error_meaning})" for v in victims)
    if causes:
        p = causes[0]
        at = f" at +{p.error_time - t0:.2f} s" if p.error_time is not None else ""
        also = ""
        if len(causes) > 1:
            also = "; also failed: " + ", ".join(f"rank {c.rank} ({c.error[:80]})" for c in causes[1:])
        error = p.error if len(p.error) <= 300 else p.error[:300] + " ..."
        why = f" ({p.error_meaning})" if p.error_meaning else ""
        return p.rank, f"rank {p.rank} failed first{at}: {error}{why}{also}{after}"
    if hang is not None and hang.missing_ranks:
        m = hang.missing_ranks[0]
        return m, f"rank {m} never reached {hang.collective or 'the collective'} ({hang.missing_where.get(m, '')})"
    first_victim = victims[0].error_time if victims else None
    if first_victim is not None:
        # a rank that finished cleanly while the others still expected it in a collective ran fewer of them
        early = sorted((r for r in ranks if r.exitcode == 0 and r.ended_at is not None and r.ended_at <= first_victim),
                       key=lambda r: (r.ended_at, r.rank))
        if early:
            e = early[0]
            return e.rank, (f"rank {e.rank} finished its code (exit code 0) while rank(s) "
                            f"{[v.rank for v in victims]} still expected it in a collective: it ran fewer collectives "
                            "(fewer batches, an early return or a rank-dependent branch)" + after)
    for v in victims:
        kind, _, culprit = classify(v.error)
        if culprit is not None and 0 <= culprit < len(ranks):
            return culprit, f"rank {v.rank}'s error names rank {culprit} as the one that never arrived: {v.error}"
    if victims:
        v = victims[0]
        return v.rank, f"only secondary errors were seen; rank {v.rank} failed first: {v.error}"
    return None, ""


def _prepare_env(env: Mapping[str, str] | None, nprocs: int, port: int, backend: str,
                 flight_recorder: bool, detail: bool) -> dict[str, str]:
    base = dict(os.environ)
    base.update({k: str(v) for k, v in (env or {}).items()})
    root = _package_root()
    base["PYTHONPATH"] = os.pathsep.join(p for p in (root, base.get("PYTHONPATH", "")) if p)
    base.update({
        "WORLD_SIZE": str(nprocs), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
        "TORCHELASTIC_USE_AGENT_STORE": "True", "PYTHONUNBUFFERED": "1",
    })
    base.setdefault("OMP_NUM_THREADS", "1")  # what torchrun does for nproc > 1
    if flight_recorder:
        base.setdefault("TORCH_FR_BUFFER_SIZE", "200")  # the last steps; each dump reads all (~5 ms at 200)
    if detail:
        base["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    if backend == "nccl":
        base.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")  # =1 aborts before the FR dump (pytorch#121055)
    return base


class _Terminated(BaseException):
    """SIGTERM reached the launcher during a run: end the ranks, remove the run folder, then let it act."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise _Terminated()


def _launch(spec: dict[str, Any], nprocs: int, timeout: float, env: Mapping[str, str] | None,
            echo: Echo | None, flight_recorder: bool, detail: bool, keep_files: bool, run_dir: str,
            notes: list[str]) -> DistRun:
    # SIGTERM (a job scheduler, `kill`): without a handler the launcher would die before killing the ranks' process
    # groups; the ranks would still notice (their control pipe closes), but only after a moment
    previous: Any = None
    installed = False
    if threading.current_thread() is threading.main_thread():
        try:
            previous = signal.signal(signal.SIGTERM, _on_sigterm)
            installed = True
        except (ValueError, OSError):  # pragma: no cover  (not the main thread of the main interpreter)
            pass
    try:
        result = _launch_in(spec, nprocs, timeout, env, echo, flight_recorder, detail, run_dir, notes)
    except _Terminated:
        shutil.rmtree(run_dir, ignore_errors=True)
        if installed:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
            installed = False
        signal.raise_signal(signal.SIGTERM)  # what SIGTERM would have done without us
        raise KeyboardInterrupt("terminated (SIGTERM) during a distributed run") from None
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    finally:
        if installed:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
    if not keep_files:
        shutil.rmtree(run_dir, ignore_errors=True)
    return result


def _launch_in(spec: dict[str, Any], nprocs: int, timeout: float, env: Mapping[str, str] | None,
               echo: Echo | None, flight_recorder: bool, detail: bool, run_dir: str, notes: list[str]) -> DistRun:
    if spec["backend"] == "nccl":
        import torch

        gpus = torch.cuda.device_count()  # NVML-based: does not initialise CUDA in this process
        if gpus < nprocs:
            raise DistUsageError(
                f"backend='nccl' with {nprocs} ranks needs one GPU per rank, but {gpus} GPU(s) are visible here; "
                "use fewer ranks, or backend='gloo' to run on CPU"
            )
    requested = None
    if env and "MASTER_PORT" in env:
        try:
            requested = int(env["MASTER_PORT"])
        except ValueError as e:
            raise DistUsageError(f"MASTER_PORT={env['MASTER_PORT']!r}: expected a port number") from e
    store = _make_store(requested, notes)
    spec.setdefault("pg_timeout", max(3.0 * timeout, timeout + 30.0))
    with open(os.path.join(run_dir, "spec.json"), "w", encoding="utf-8") as fh:
        json.dump(spec, fh)
    child_env = _prepare_env(env, nprocs, store.port, spec["backend"], flight_recorder, detail)
    session = _Session(spec, nprocs, float(timeout), child_env, echo, notes, run_dir, store.port)
    try:
        try:
            session.start()
        except OSError as e:
            raise DistRunError(f"could not start the {nprocs} rank processes: {e}") from e
        session.loop()
    finally:
        session.close()
        del store
    result = session.result(session.port)
    if session.interrupted:  # the ranks are gone; the user's interrupt goes on, carrying what was seen
        raise RunInterrupted(result)
    return result


def run(source: str, nprocs: int, *, timeout: float = 60.0, backend: str | Backend = "gloo",
        env: Mapping[str, str] | None = None, use: Iterable[str] | str | None = None,
        namespace: Mapping[str, Any] | None = None, echo: Echo | None | bool = True, flight_recorder: bool = True,
        detail: bool = False, keep_files: bool = False) -> DistRun:
    """Run ``source`` on ``nprocs`` local ranks with the process group initialised.

    Each rank is a fresh Python process with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free
    MASTER_PORT (the launcher owns the rendezvous store, so the port can never be "already in use").  Output is
    streamed live with ``[rank N]`` prefixes and kept.  No process survives the call: not after a failure, a
    hang, or a KeyboardInterrupt.  An interrupt kills every rank (after taking their stacks) and is re-raised as
    ``RunInterrupted``, a ``KeyboardInterrupt`` whose ``.run`` is the ``DistRun`` of what was seen.

    Parameters
    ----------
    source : str
        Python code run as ``__main__`` in every rank, after ``init_process_group(backend)``.
    nprocs : int
        Number of ranks.
    timeout : float
        Hang watchdog: when no rank makes progress (prints, moves to another Python line, exits) for this many
        seconds, every rank's stack and Flight Recorder entries are taken and every rank is killed.  The process
        group's own timeout is set longer (``max(3 * timeout, timeout + 30)``) so that the watchdog fires first.
    backend : {"gloo", "nccl"}
        Process-group backend; with ``nccl`` each rank calls ``torch.cuda.set_device(LOCAL_RANK)`` first.
    env : mapping, optional
        Extra environment variables for the ranks (``NCCL_DEBUG=INFO``, ...).  A ``MASTER_PORT`` here is tried
        first; when taken, a free port is used and the run's ``notes`` say so.
    use : iterable of str or str, optional
        Names from the notebook to ship: functions and classes by source, modules as imports, other values
        pickled.  Lambdas, closures, CUDA tensors, open files and other unpicklable values are refused with the
        reason.
    namespace : mapping, optional
        Where to look the ``use`` names up (default: the caller's globals).
    echo : bool or callable, optional
        True prints each rank's lines as they arrive; a callable ``(rank, stream, line)`` receives them; False
        keeps them quiet (still kept in the result).
    flight_recorder : bool
        Record collectives (``TORCH_FR_BUFFER_SIZE=200``) so that a hang report can show each rank's last ones.
    detail : bool
        Set ``TORCH_DISTRIBUTED_DEBUG=DETAIL``: collective mismatches (op, shape, dtype) raise at once with a
        message that the result explains; costs extra latency per collective.
    keep_files : bool
        Keep the run folder (torch error files, per-rank dumps); its path is ``DistRun.run_dir``.

    Returns
    -------
    DistRun
        ``ok``, ``ranks`` (exit code, output, traceback per rank), ``primary`` (the rank whose failure came first
        and caused the rest), ``hang`` (what the watchdog found) and a text/HTML summary.
    """
    from nbdebug.core.dist._ship import ship

    _check_source(source)
    _check_sizes(nprocs, timeout)
    be = Backend.parse(backend)
    if isinstance(use, str):
        use = [u for u in use.split(",") if u.strip()]
    notes: list[str] = []
    shipment = ship(use or (), namespace if namespace is not None else _caller_globals())
    notes += shipment.notes
    run_dir = tempfile.mkdtemp(prefix="nbdebug-dist-")
    try:
        source_path = os.path.join(run_dir, "cell.py")
        with open(source_path, "w", encoding="utf-8") as fh:
            fh.write(source)
    except BaseException:  # never leave a run folder behind
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    if shipment.preamble:
        with open(os.path.join(run_dir, "preamble.py"), "w", encoding="utf-8") as fh:
            fh.write(shipment.preamble)
    if shipment.values is not None:
        with open(os.path.join(run_dir, "values.pkl"), "wb") as fh:
            fh.write(shipment.values)
    if shipment.shipped:
        notes.append("shipped to the ranks: " + ", ".join(shipment.shipped))
    # like multiprocessing's spawn: the ranks see the modules the kernel sees (sys.path edits in the notebook too)
    spec = {"mode": "cell", "backend": be.value, "source_path": source_path, "cwd": os.getcwd(),
            "sys_path": [p for p in sys.path if isinstance(p, str)]}
    return _launch(spec, nprocs, timeout, env, default_echo if echo is True else (echo or None), flight_recorder,
                   detail, keep_files, run_dir, notes)


def run_script(path: str, nprocs: int, *, argv: Iterable[str] = (), timeout: float = 60.0,
               backend: str | Backend = "gloo", env: Mapping[str, str] | None = None, echo: Echo | None | bool = True,
               flight_recorder: bool = True, detail: bool = False, keep_files: bool = False) -> DistRun:
    """Run a script on ``nprocs`` local ranks, like ``torchrun --standalone --nproc-per-node N``.

    The script initialises the process group itself (``init_process_group`` gets the launcher's timeout when it
    does not pass one).  Everything else is as in ``run``.

    Parameters
    ----------
    path : str
        The script.
    nprocs : int
        Number of ranks.
    argv : iterable of str
        Arguments for the script (``sys.argv[1:]``).
    timeout, backend, env, echo, flight_recorder, detail, keep_files
        As in ``run``.

    Returns
    -------
    DistRun
        The outcome, as for ``run``.
    """
    if not os.path.isfile(path):
        raise DistUsageError(f"script {path!r} does not exist; expected a Python file to run on every rank")
    _check_sizes(nprocs, timeout)
    be = Backend.parse(backend)
    run_dir = tempfile.mkdtemp(prefix="nbdebug-dist-")
    spec = {"mode": "script", "backend": be.value, "source_path": os.path.abspath(path), "argv": list(argv),
            "cwd": os.getcwd()}
    return _launch(spec, nprocs, timeout, env, default_echo if echo is True else (echo or None), flight_recorder,
                   detail, keep_files, run_dir, [])


def _check_source(source: object) -> None:
    """The cell's code: a str that can be written as UTF-8 (checked before anything is created)."""
    if not isinstance(source, str):
        raise DistUsageError(f"source={type(source).__name__} {source!r:.60}: expected the code to run, as a str")
    try:
        source.encode("utf-8")
    except UnicodeEncodeError as e:
        raise DistUsageError(f"source has a character that cannot be written as UTF-8 at position {e.start} "
                             f"({source[e.start]!r}, a lone surrogate?): expected text Python can save") from e


def _check_sizes(nprocs: object, timeout: object) -> None:
    if isinstance(nprocs, bool) or not isinstance(nprocs, int) or nprocs < 1:
        raise DistUsageError(f"nprocs={nprocs!r}: expected a positive number of ranks, e.g. 2")
    if isinstance(timeout, bool) or not (isinstance(timeout, (int, float)) and timeout > 0):
        raise DistUsageError(f"timeout={timeout!r}: expected a positive number of seconds, e.g. 30")


def _caller_globals() -> Mapping[str, Any]:
    import inspect

    frame = inspect.currentframe()
    # run() <- nbdebug.dist.run facade? walk out of nbdebug's own frames
    while frame is not None and frame.f_globals.get("__name__", "").startswith("nbdebug"):
        frame = frame.f_back
    return frame.f_globals if frame is not None else {}
