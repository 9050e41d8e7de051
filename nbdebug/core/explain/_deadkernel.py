"""A dead kernel explained: the record a kernel keeps while it runs, and what it says once the kernel has died.

A kernel with nbdebug loaded keeps two small files of its own in a private folder of the user's (``state_dir``):

- ``kernel-<host>-<pid>-<start>.json``: the cell running now (its name as the user knows it, its code, when it started),
  the process's memory in use (sampled while a cell runs) and the limits that apply to it;
- ``kernel-<host>-<pid>-<start>.fault``: where ``faulthandler`` writes the Python stack of every thread when the process
  gets a fatal signal (segfault, abort, bus error, illegal instruction).

A kernel that exits normally removes both.  When nbdebug loads in a new kernel, records of this host whose
process is gone are read (``dead_kernels``), explained (``explain_dead``: cell and line, every thread's stack, memory against the
limit, the likely cause) and removed; records older than ``MAX_AGE_S`` or beyond ``MAX_RECORDS`` are removed
unread, so nothing piles up.  A record of another host (a state folder shared by containers or machines), or
one named before records carried the host, is never judged: whether its process lives cannot be seen from here,
so it is only removed once older than ``MAX_AGE_S``.  Every file goes through ``nbdebug._files``.
"""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from nbdebug._units import fmt_bytes
from nbdebug.core._cells import site_label
from nbdebug.core.explain._diagnosis import Diagnosis, Section

__all__ = ["STATE_ENV", "state_dir", "host_name", "record_paths", "process_start", "DeadKernel", "dead_kernels", "explain_dead",
           "MAX_AGE_S", "MAX_RECORDS"]

STATE_ENV = "NBDEBUG_STATE_DIR"
MAX_AGE_S = 7 * 24 * 3600
MAX_RECORDS = 20
# the host is optional: an older nbdebug named records by pid and start only (never judged, aged out)
_NAME = re.compile(r"^kernel-(?:(?P<host>[A-Za-z0-9_.-]{1,64})-)?(?P<pid>\d{1,10})-(?P<start>\d{1,20})\.(?P<ext>json|fault)$")
_FATAL = re.compile(r"^Fatal Python error: (?P<what>[^\n]{1,200})", re.M)
_FRAME = re.compile(r'^\s*File "(?P<file>[^"\n]{1,1000})", line (?P<line>\d{1,9}) in (?P<func>[^\n]{1,200})$', re.M)
_THREAD = re.compile(r"^(?P<head>(?:Current thread|Thread) 0x[0-9a-f]{1,20}[^\n]{0,100}):?$", re.M)


def state_dir(create: bool = True) -> str:
    """The private folder for kernel records: ``$NBDEBUG_STATE_DIR``, else ``<tmp>/nbdebug-<uid>``, mode 0700.

    A folder that is a symlink, or is owned by another user, is refused (``OSError``): records are never written
    where someone else could read them or plant a link.
    """
    uid = os.getuid() if hasattr(os, "getuid") else 0
    path = os.environ.get(STATE_ENV) or os.path.join(tempfile.gettempdir(), f"nbdebug-{uid}")
    if create:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise OSError(f"{path!r} is not a plain folder; nbdebug keeps no kernel record there")
    if hasattr(os, "getuid") and st.st_uid != uid:
        raise OSError(f"{path!r} belongs to another user; nbdebug keeps no kernel record there")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def process_start(pid: int) -> int:
    """When process ``pid`` started (clock ticks since boot, from /proc), or 0 where that cannot be read."""
    from nbdebug._files import read_text
    from nbdebug.errors import NbdebugError

    try:
        text = read_text(f"/proc/{pid}/stat", "a process status file", cap=4096)
    except (NbdebugError, OSError):
        return 0
    rest = text.rsplit(")", 1)[-1].split()
    return int(rest[19]) if len(rest) > 19 and rest[19].isdigit() else 0


def host_name() -> str:
    """This machine's name as a record's name carries it: characters other than letters, digits, ``._-`` are ``_``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname())[:64] or "unknown"


def record_paths(folder: str, pid: int | None = None) -> tuple[str, str]:
    """The record and fault-file paths of process ``pid`` (this process when None) on this host."""
    pid = os.getpid() if pid is None else pid
    base = os.path.join(folder, f"kernel-{host_name()}-{pid}-{process_start(pid)}")
    return base + ".json", base + ".fault"


def _alive(pid: int, start: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process is there that we may not signal (another user's, or /proc hides it):
        pass  # alive, unless its start time, where it can be read, says the pid was reused
    except OSError:
        return True
    current = process_start(pid)
    return not (start and current and current != start)  # a reused pid is another process


@dataclass(frozen=True)
class DeadKernel:
    """What a dead kernel left: its record (may be empty if it died while writing it) and its fault dump."""

    pid: int
    record: dict[str, Any] = field(default_factory=dict)
    fault: str = ""
    modified: float = 0.0


def dead_kernels(folder: str, *, now: float | None = None, remove: bool = True) -> list[DeadKernel]:
    """The records of kernels that are gone, newest first; those read (and stale ones) are removed."""
    from nbdebug._files import read_text
    from nbdebug.errors import NbdebugError

    now = time.time() if now is None else now
    here = host_name()
    groups: dict[tuple[str, int, int], dict[str, str]] = {}
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    for name in names:
        m = _NAME.match(name)
        if m:
            key = (m.group("host") or "", int(m.group("pid")), int(m.group("start")))
            groups.setdefault(key, {})[m.group("ext")] = os.path.join(folder, name)
    found: list[DeadKernel] = []
    for (host, pid, start), files in groups.items():
        mine = host == here
        if mine and (pid == os.getpid() or _alive(pid, start)):
            continue
        try:
            modified = max(os.lstat(p).st_mtime for p in files.values())
        except OSError:
            continue
        record: dict[str, Any] = {}
        fault = ""
        if now - modified <= MAX_AGE_S:
            if not mine:  # another host's pid says nothing here: left until it ages out
                continue
            try:
                if "json" in files:
                    loaded = json.loads(read_text(files["json"], "a kernel record", cap=1 << 20, follow=False))
                    record = loaded if isinstance(loaded, dict) else {}
                if "fault" in files:
                    fault = read_text(files["fault"], "a fault dump", cap=1 << 20, follow=False)
            except (NbdebugError, OSError, ValueError):
                pass
            # a kernel that died between cells with no fatal signal was shut down or restarted by its server:
            # nothing to explain (a crash happens while a cell runs, and a fatal signal leaves a dump)
            if fault.strip() or record.get("state") == "running":
                found.append(DeadKernel(pid, record, fault, modified))
        if remove:
            for path in files.values():
                try:
                    os.unlink(path)
                except OSError:
                    pass
    found.sort(key=lambda k: -k.modified)
    return found[:MAX_RECORDS]


def _threads(fault: str) -> list[tuple[str, list[tuple[str, int, str]]]]:
    """faulthandler's dump as (thread header, frames innermost first)."""
    out: list[tuple[str, list[tuple[str, int, str]]]] = []
    marks = list(_THREAD.finditer(fault))
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(fault)
        frames = [(f.group("file"), int(f.group("line")), f.group("func").strip())
                  for f in _FRAME.finditer(fault, m.end(), end)]
        out.append((m.group("head"), frames))
    return out


def _label(filename: str, line: int, record: dict[str, Any]) -> str:
    """A frame named as the user knows it, with the cells the dead kernel knew."""
    names = record.get("cells") if isinstance(record.get("cells"), dict) else {}
    running = record.get("cell_file")
    if filename == running and isinstance(record.get("code"), str):
        lines = record["code"].splitlines()
        text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
        where = f"{record.get('cell', 'the running cell')}, line {line}"
        return f"{where}: {text[:80]}" if text else where
    return site_label(filename, line, code=False, names=names)


def explain_dead(dead: DeadKernel) -> Diagnosis:
    """The panel for a dead kernel: what it was doing, every thread's stack, memory against the limit, the cause."""
    from nbdebug.core.knowledge import entry
    from nbdebug.core.knowledge.crash import DEAD_KERNEL_FIRST_STEP, SIGNALS

    rec = dead.record
    fatal = _FATAL.search(dead.fault)
    threads = _threads(dead.fault)
    current = next((frames for head, frames in threads if head.startswith("Current")), threads[0][1] if threads else [])
    # the innermost frame of the user's code in the thread that crashed (faulthandler lists innermost first)
    from nbdebug.core.explain._evidence import is_library_file

    user = next(((f, ln) for f, ln, _ in current if not is_library_file(f)), None)
    cell = str(rec.get("cell") or "")
    where = _label(user[0], user[1], rec) if user else (cell or "unknown")
    rss, peak = rec.get("rss"), rec.get("peak_rss")
    limits = {k: v for k, v in (rec.get("limits") or {}).items() if isinstance(v, int)} if isinstance(rec.get("limits"), dict) else {}
    limit = min(limits.values()) if limits else None
    used = max(v for v in (rss, peak) if isinstance(v, int)) if any(isinstance(v, int) for v in (rss, peak)) else None
    vm = rec.get("vm_size") if isinstance(rec.get("vm_size"), int) else None
    # each limit against what it counts: resident memory for a container or the machine, virtual for ulimit -v
    usage = {"cgroup_limit": used, "machine": used, "address_space_limit": vm}
    near = [(k, u, v) for k, v in limits.items() if isinstance(u := usage.get(k), int) and u >= 0.85 * v]
    near_limit = bool(near)
    if near:
        used, limit = near[0][1], near[0][2]
    if fatal:
        what = fatal.group("what").strip()
        signal_name = {"Segmentation fault": 11, "Aborted": 6, "Bus error": 7, "Illegal instruction": 4,
                       "Floating point exception": 8}.get(what)
        meaning = SIGNALS[signal_name][1] if signal_name in SIGNALS else "a fatal signal in native code"
        cause = f"The kernel died of a fatal signal ({what}): {meaning}."
        step = DEAD_KERNEL_FIRST_STEP["native"]
        kind = "native"
    elif near_limit:
        cause = (f"No fatal signal was recorded, and the kernel used {fmt_bytes(used)} of a {fmt_bytes(limit)} limit: "
                 f"it was most likely {SIGNALS[9][1]}.")
        step = DEAD_KERNEL_FIRST_STEP["memory"]
        kind = "memory"
    else:
        cause = ("No fatal signal was recorded: the kernel was killed from outside (SIGKILL: the out-of-memory killer "
                 "or a job limit) or ended itself without cleaning up (os._exit).")
        step = DEAD_KERNEL_FIRST_STEP["memory" if used else "unknown"]
        kind = "unknown"
    facts: list[tuple[str, Any]] = [("Process", str(dead.pid))]
    if cell:
        facts.append(("Running cell", cell))
    facts.append(("Line at the crash", where if user or fatal else "not recorded (no fatal signal: no stack)"))
    if isinstance(rec.get("started"), (int, float)):
        facts.append(("Cell started", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(rec["started"]))))
    if used is not None:
        facts.append(("Memory in use (last sample)", fmt_bytes(rss) if isinstance(rss, int) else "?"))
        if isinstance(peak, int):
            facts.append(("Peak memory", fmt_bytes(peak)))
    for key, label in (("cgroup_limit", "Container (cgroup) limit"), ("address_space_limit", "Address-space limit"),
                       ("machine", "Machine memory")):
        if key in limits:
            facts.append((label, fmt_bytes(limits[key])))
    if isinstance(rec.get("versions"), dict) and rec["versions"]:
        facts.append(("Installed", ", ".join(f"{k} {v}" for k, v in rec["versions"].items())))
    sections = [Section(title="The dead kernel", facts=tuple(facts), open=True)]
    if threads:
        text = []
        for head, frames in threads:
            text.append(head)
            text += [f"  {_label(f, ln, rec)}  (in {func})" for f, ln, func in frames[:40]]
        sections.append(Section(title="Python stack of every thread at the crash", preformatted="\n".join(text),
                                open=True))
    e = entry("kernel_died")
    summary = (f"The previous kernel (pid {dead.pid}) died while running {cell or 'a cell'}"
               + (f", at {where}" if user else "") + f". {cause}")
    words = {"native": "a native crash (a fatal signal was recorded)", "memory": "memory: near its limit, then killed",
             "unknown": "not recorded (no fatal signal, memory below its limits)"}
    causes = e.causes if kind != "native" else tuple(reversed(e.causes))  # the recorded signal's cause first
    return Diagnosis(kind="kernel_died", title=e.title, summary=summary, evidence={"likely_cause": words[kind]},
                     causes=causes, fixes=e.fixes, first_step=step, exception_type="", message=cause,
                     sections=tuple(sections), sources=e.sources)
