"""Read a job's per-rank artifacts, whatever their names: each file is recognised by its content.

Kinds: torch Flight Recorder dumps (pickle, or the JSON of ``_dump_fr_trace_json``), torchelastic error files
(``@record``), ``faulthandler`` and ``py-spy dump`` stacks, ``NCCL_DEBUG`` logs, ``[rankN]:``-prefixed logs
(torchrun's console, ``instrument()``'s per-rank logs) and torchrun's failure summary.  Everything read is
attributed to a rank (from the content first: the dump's ``pg_config``/header lines, the line prefix; else the
file's name) and kept in a ``RankEvidence``.  Nothing from a file is ever executed: pickles are read with an
unpickler that refuses every global.  A file that cannot be read is skipped with a note, never fatal.
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from nbdebug._files import Skipped, decode, folder_files, read_bytes
from nbdebug.core.dist._hang import parse_faulthandler, parse_pyspy, parse_traceback
from nbdebug.errors import NbdebugError, SnapshotError

__all__ = ["RankEvidence", "Collected", "collect", "MAX_FILE_BYTES", "plausible_world", "absent_ranks"]

MAX_FILE_BYTES = 256 * 2**20  # larger files are skipped with a note
_MAX_LINE = 4000  # longer lines are cut before any pattern sees them (bounded regex work)
_MAX_ENTRIES = 100_000  # Flight Recorder entries kept per file
_MAX_RANK = 10_000_000


@dataclass
class RankEvidence:
    """What the artifacts say about one rank."""

    rank: int
    host: str = ""
    pid: int | None = None
    world_size: int | None = None
    errors: list[tuple[float | None, str, str, str]] = field(default_factory=list)  # (time, message, traceback, file)
    fr: list[dict[str, Any]] = field(default_factory=list)
    fr_file: str = ""
    stack: str = ""
    stack_frames: list[dict[str, Any]] = field(default_factory=list)
    stack_file: str = ""
    stack_reason: str = ""
    exitcode: int | None = None
    exit_time: str = ""
    nccl: list[str] = field(default_factory=list)
    nccl_timeout: tuple[int, str] | None = None  # (SeqNum, OpType) of NCCL's watchdog timeout
    log: list[str] = field(default_factory=list)
    kinds: set[str] = field(default_factory=set)


@dataclass
class Collected:
    ranks: dict[int, RankEvidence] = field(default_factory=dict)
    files: dict[str, int] = field(default_factory=dict)  # kind -> count
    notes: list[str] = field(default_factory=list)
    unattributed_nccl: list[str] = field(default_factory=list)
    root_cause_rank: int | None = None  # torchrun's "Root Cause (first observed failure)"
    world_size: int | None = None
    group_sizes: dict[str, int] = field(default_factory=dict)

    def rank(self, r: int) -> RankEvidence:
        ev = self.ranks.get(r)
        if ev is None:
            ev = self.ranks[r] = RankEvidence(rank=r)
        return ev

    def count(self, kind: str) -> None:
        self.files[kind] = self.files.get(kind, 0) + 1


# "rank3", "rank_3", "fr_rank_3", "default3", "_r3"; or fr_trace's "<prefix>_<rank>" without an extension ("trace_5")
_NAME_RANK = re.compile(r"(?:rank|_r|default)[_\-]?([0-9]{1,7})(?![0-9])|^[A-Za-z][A-Za-z_\-]{0,60}[_\-]([0-9]{1,7})$",
                        re.I)


def plausible_world(world: int, c: Collected) -> bool:
    """Whether a job size (from a file, or the highest rank seen) may size a loop: not when it is implausible next
    to the ranks seen (a hostile or mislabelled file: one ``[rank9999999]:`` line)."""
    return world <= max(100_000, 4 * len(c.ranks))


def absent_ranks(present: Iterable[int], world: int) -> str:
    """``rank_ranges`` of the ranks below ``world`` not in ``present``, built from the gaps between the ranks
    present (never a set of ``range(world)``: ``world`` may come from a file)."""
    out: list[str] = []
    prev = -1
    for r in [*sorted(set(present)), world]:
        if r > prev + 1:
            out.append(str(prev + 1) if r == prev + 2 else f"{prev + 1}-{r - 1}")
        prev = r
    return ", ".join(out)


def _rank_from_name(path: str) -> int | None:
    """``fr_rank_12``, ``stacks_rank3.txt``, ``rank7.log``, ``trace_5``, ``.../attempt_0/3/error.json``."""
    base = os.path.basename(path)
    m = _NAME_RANK.search(base)
    if m is None:
        parent = os.path.basename(os.path.dirname(path))
        m = re.fullmatch(r"(?:rank_?)?([0-9]{1,7})", parent)
        return int(m.group(1)) if m else None
    return int(m.group(1) or m.group(2))


def _iter_files(paths: Iterable[str], out: Collected) -> Iterator[str]:
    """The regular files under ``paths``: a folder's through ``folder_files`` (a symlink out of it, a loop, a FIFO
    or a device is not read, only noted); a file named by the user is read where it points (``read_bytes`` still
    refuses a FIFO or a device)."""
    for p in paths:
        if os.path.isdir(p):
            skipped: list[Skipped] = []
            yield from folder_files(p, skipped=skipped)
            out.notes.extend(f"{s.path}: skipped, {s.why}" for s in skipped)
        else:
            yield p


def collect(paths: Iterable[str]) -> Collected:
    """Read every file under ``paths`` (folders are walked) and attribute what they say to ranks."""
    out = Collected()
    for path in _iter_files(paths, out):
        try:
            size = os.stat(path).st_size
        except OSError as e:
            out.notes.append(f"{path}: cannot be read ({e.strerror or e})")
            continue
        if size > MAX_FILE_BYTES:
            out.notes.append(f"{path}: skipped, {size} bytes is over the {MAX_FILE_BYTES} byte limit")
            continue
        try:  # one byte over the cap tells a file that grew past it while it was read
            data = read_bytes(path, "a per-rank artifact (a regular file)", cap=MAX_FILE_BYTES + 1)
        except NbdebugError as e:
            out.notes.append(f"{path}: skipped, {str(e)[:300]}")
            continue
        if len(data) > MAX_FILE_BYTES:
            out.notes.append(f"{path}: skipped, it grew past the {MAX_FILE_BYTES} byte limit while it was read")
            continue
        try:
            _read_one(path, data, out)
        except RecursionError:
            out.notes.append(f"{path}: skipped, nested too deeply to be an artifact")
    return out


def _read_one(path: str, data: bytes, out: Collected) -> None:
    if data[:1] == b"\x80":
        _read_fr_pickle(path, data, out)
        return
    head = data[:4096].lstrip()
    if head[:1] == b"{":
        try:
            doc = json.loads(data.decode("utf-8", errors="replace"))
        except (ValueError, RecursionError):
            doc = None
        if isinstance(doc, dict):
            if isinstance(doc.get("entries"), list) and "pg_config" in doc:
                _read_fr_doc(path, doc, out, "JSON")
                return
            if "message" in doc:
                _read_error_file(path, doc, out)
                return
    if b"\x00" in data[:4096]:
        out.notes.append(f"{path}: skipped, a binary file of no known kind")
        return
    _read_text(path, decode(data), out)


# -- Flight Recorder ---------------------------------------------------------------------------------------------

def _read_fr_pickle(path: str, data: bytes, out: Collected) -> None:
    try:
        from nbdebug.core.memory._unpickle import SafeUnpickler, check_opcodes

        # Flight Recorder dumps hold only dicts, lists, tuples, strings and numbers: the snapshot reader's guards fit
        # (every global refused; memo indexes, lengths and frames beyond the file refused before unpickling)
        check_opcodes(data, "the file", kind="Flight Recorder dump", writer="torch.distributed's Flight Recorder")
        doc = SafeUnpickler(io.BytesIO(data)).load()
    except SnapshotError as e:  # refused by the opcode walk: its message says why
        out.notes.append(f"{path}: skipped, {str(e)[:300]}")
        return
    except Exception as e:  # a corrupted or hostile pickle: any failure is "not a dump"
        out.notes.append(f"{path}: not readable as a Flight Recorder dump ({type(e).__name__}: {str(e)[:120]})")
        return
    if not isinstance(doc, dict) or not isinstance(doc.get("entries"), list):
        out.notes.append(f"{path}: a pickle, but not a Flight Recorder dump (no 'entries' list)")
        return
    _read_fr_doc(path, doc, out, "pickle")


def _int(value: Any, default: int | None = None) -> int | None:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str) and 0 < len(value) <= 20 and value.strip().lstrip("-").isascii() \
            and value.strip().lstrip("-").isdigit():
        return int(value)
    return default


def _short(value: Any, limit: int = 200) -> str:
    text = value if isinstance(value, str) else repr(value) if isinstance(value, (int, float, bool)) else ""
    if not text and isinstance(value, (list, tuple)):
        text = json.dumps(_plain(value, 3))
    return text[:limit]


def _plain(value: Any, depth: int) -> Any:
    """A small JSON-able copy (sizes like ``[[3, 4]]``), bounded in depth and length."""
    if depth <= 0:
        return "..."
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth - 1) for v in value[:16]]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return value if abs(value) < 2**63 else str(value)[:30]
    return str(value)[:60] if isinstance(value, str) else type(value).__name__


def _fr_rank(doc: dict[str, Any], path: str) -> int | None:
    # the dump itself says which rank wrote it only through the file name torch gives it (<prefix><rank>);
    # an nbdebug dump also carries no rank field, so the name decides, as for fr_trace
    return _rank_from_name(path)


def _read_fr_doc(path: str, doc: dict[str, Any], out: Collected, form: str) -> None:
    rank = _fr_rank(doc, path)
    if rank is None or rank > _MAX_RANK:
        out.notes.append(f"{path}: a Flight Recorder dump ({form}) whose rank cannot be told from its name")
        return
    entries = []
    raw = doc.get("entries") or []
    if len(raw) > _MAX_ENTRIES:
        out.notes.append(f"{path}: {len(raw)} Flight Recorder entries, the last {_MAX_ENTRIES} read")
        raw = raw[-_MAX_ENTRIES:]
    for e in raw:
        if not isinstance(e, dict):
            continue
        pg = e.get("process_group")
        pg_name = _short(pg[0]) if isinstance(pg, (list, tuple)) and pg else _short(pg)
        pg_desc = _short(pg[1]) if isinstance(pg, (list, tuple)) and len(pg) > 1 else ""
        frames = []
        for f in (e.get("frames") or [])[:64] if isinstance(e.get("frames"), list) else ():
            if isinstance(f, dict):
                frames.append({"file": _short(f.get("filename"), 300), "line": _int(f.get("line"), 0),
                               "func": _short(f.get("name"), 120), "code": ""})
        entries.append({
            "seq": _int(e.get("collective_seq_id"), 0), "p2p_seq": _int(e.get("p2p_seq_id"), 0),
            "is_p2p": bool(e.get("is_p2p")), "op": _short(e.get("profiling_name"), 80),
            "pg": pg_name, "pg_desc": pg_desc,
            "sizes": json.dumps(_plain(e.get("input_sizes"), 4)), "dtypes": json.dumps(_plain(e.get("input_dtypes"), 3)),
            "out_sizes": json.dumps(_plain(e.get("output_sizes"), 4)),
            "state": _short(e.get("state"), 20), "t_ns": _int(e.get("time_created_ns")),
            "timeout_ms": _int(e.get("timeout_ms")), "frames": frames[::-1],  # outermost first, as elsewhere
        })
    ev = out.rank(rank)
    ev.kinds.add("flight_recorder")
    out.count("flight_recorder")
    if len(entries) >= len(ev.fr):  # the fullest dump of a rank wins (a later dump holds the earlier entries)
        ev.fr, ev.fr_file = entries, path
    cfg = doc.get("pg_config")
    if isinstance(cfg, dict):
        for c in cfg.values():
            if isinstance(c, dict) and isinstance(c.get("ranks"), str) and len(c["ranks"]) < 10_000_000:
                n = out.group_sizes.get(c["ranks"])  # every rank's dump repeats the same list: count it once
                if n is None:
                    n = out.group_sizes[c["ranks"]] = len(re.findall(r"[0-9]{1,8}", c["ranks"]))
                if n and (out.world_size is None or n > out.world_size):
                    out.world_size = n


# -- error files -------------------------------------------------------------------------------------------------

def _read_error_file(path: str, doc: dict[str, Any], out: Collected) -> None:
    msg = doc.get("message")
    extra = msg.get("extraInfo") if isinstance(msg, dict) else None
    message = _short(msg.get("message"), 20_000) if isinstance(msg, dict) else _short(msg, 20_000)
    tb = _short(extra.get("py_callstack"), 200_000) if isinstance(extra, dict) else ""
    when: float | None = None
    if isinstance(extra, dict):
        ts = _int(extra.get("timestamp"))
        when = float(ts) if ts is not None and 0 <= ts < 2**40 else None
    nb: dict[str, Any] = doc["nbdebug"] if isinstance(doc.get("nbdebug"), dict) else {}
    t = nb.get("time")
    if isinstance(t, (int, float)) and not isinstance(t, bool) and 0 <= t < 2**40:
        when = float(t)
    rank = _int(nb.get("rank"))
    if rank is None:
        rank = _rank_from_name(path)
    if rank is None or not 0 <= rank <= _MAX_RANK:
        out.notes.append(f"{path}: an error file whose rank cannot be told (name it error_rank<N>.json)")
        return
    if not message and not tb:
        out.notes.append(f"{path}: an error file without a message")
        return
    ev = out.rank(rank)
    ev.kinds.add("error_file")
    out.count("error_file")
    if isinstance(nb.get("host"), str):
        ev.host = ev.host or nb["host"][:200]
    ev.pid = ev.pid or _int(nb.get("pid"))
    ev.errors.append((when, message or _last_exception_line(tb), tb, path))


# -- text: stacks, NCCL logs, rank-prefixed logs, torchrun's summary -------------------------------------------

# "[rank3]:" (torchrun), "[default3]:" (torchrun --tee); after a short prefix of its own (a line number, a
# kubectl timestamp) too
_PREFIX = re.compile(r"^.{0,40}?\[(?:rank|default)([0-9]{1,7})\]:")
_WATCHDOG = re.compile(r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=([0-9]{1,18}), "
                       r"OpType=([A-Za-z_]{1,40})")
_HEADER = re.compile(r"# nbdebug: (?:rank ([0-9]{1,7}) of ([0-9]{1,7}) \(local rank [0-9]{1,7}\) host (\S{1,200}) "
                     r"pid ([0-9]{1,10})|(.{0,200}?); rank ([0-9]{1,7}) host (\S{1,200}) pid ([0-9]{1,10}))")
_NCCL_LINE = re.compile(r"^(?P<host>[A-Za-z0-9_.\-]{1,200}):(?P<pid>[0-9]{1,10}):[0-9]{1,10} \[[0-9]{1,5}\] NCCL "
                        r"(?:INFO|WARN|ERROR|TRACE)")
_NCCL_RANK = re.compile(r"\[Rank ([0-9]{1,7})\]|\brank ([0-9]{1,7}) nranks ([0-9]{1,7})")
_THREAD = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-f]{1,16}|^Thread [0-9]{1,10} \((?:active|idle)")
_EXC_LINE = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_.]{0,200})(?:Error|Exception|Interrupt|Exit|Warning)\b.{0,2000}$|"
                       r"^(?:[A-Za-z_][A-Za-z0-9_.]{0,200}Error|torch\.[A-Za-z0-9_.]{1,200}): .{0,2000}$")
_SUMMARY_RANK = re.compile(r"^\s+rank\s+: ([0-9]{1,7}) \(local_rank: [0-9]{1,7}\)")
_SUMMARY_HOST = re.compile(r"^\s+host\s+: (\S{1,200})")
_SUMMARY_EXIT = re.compile(r"^\s+exitcode\s+: (-?[0-9]{1,4}) \(pid: ([0-9]{1,10})\)")
_SUMMARY_TIME = re.compile(r"^\s+time\s+: (\S{1,40})")
# a superset of the lines _SUMMARY_RANK matches, searched in the whole text: starting at a literal and never across
# a newline, so a run of blank lines costs nothing (``^\s+`` over the whole text is quadratic in them)
_SUMMARY_ANY = re.compile(r"rank[^\S\n]+: [0-9]")


def _last_exception_line(tb: str) -> str:
    for line in reversed(tb.splitlines()):
        s = line.strip()
        if s and not s.startswith(("File ", "^", "~")) and _EXC_LINE.match(s):
            return s
    return next((ln.strip() for ln in reversed(tb.splitlines()) if ln.strip()), "")


def _read_text(path: str, text: str, out: Collected) -> None:
    # linear in the bytes, and fast on logs of short lines: a per-line scan runs only when the whole text holds
    # what it looks for (one C-speed substring search each), the rest is splitlines and joins
    lines = text.splitlines()
    cut = len(text) > _MAX_LINE and max(map(len, lines), default=0) > _MAX_LINE
    if cut:
        lines = [ln if len(ln) <= _MAX_LINE else ln[:_MAX_LINE] for ln in lines]
    by_rank: dict[int, list[str]] = {}
    plain: list[str] = []
    if "[rank" not in text and "[default" not in text:
        plain, lines = lines, []
    elif not cut and (one := _one_rank(text, lines)) is not None:
        by_rank, lines = one, []
    match, keep = _PREFIX.match, plain.append
    for ln in lines:
        m = match(ln)
        if m:
            rest = ln[m.end():]
            # "[rank0]:[rank0]: ..." (a prefixed line printed again by a prefixing launcher); a prefix needs a "["
            # within its first 41 characters, and a find is cheaper than a failing match
            while rest.find("[", 0, 41) >= 0:
                again = match(rest)
                if not again or again.group(1) != m.group(1):
                    break
                rest = rest[again.end():]
            by_rank.setdefault(int(m.group(1)), []).append(rest[1:] if rest.startswith(" ") else rest)
        else:
            keep(ln)
    kinds: set[str] = set()
    file_rank = _rank_from_name(path)
    for rank, rlines in by_rank.items():
        _read_rank_lines(path, rank, rlines, out, kinds, prefixed=True)
    if plain:
        header_rank: int | None = None
        for ln in plain[:50]:
            h = _HEADER.search(ln)
            if h:
                header_rank = int(h.group(1) or h.group(6))
                break
        if _SUMMARY_ANY.search(text) and _summary(path, plain, out):
            kinds.add("launcher_summary")
        nccl = [ln for ln in plain if _NCCL_LINE.match(ln)] if "NCCL" in text else []
        owner = header_rank if header_rank is not None else (file_rank if not by_rank and not nccl else None)
        if owner is not None and owner <= _MAX_RANK:
            _read_rank_lines(path, owner, plain, out, kinds, prefixed=False)
        elif nccl:  # NCCL_DEBUG_FILE output (host:pid:tid lines): the rank comes from NCCL's own init lines
            kinds.add("nccl_log")
            _attribute_nccl(nccl, out)
    if not kinds and not by_rank and not any(_HEADER.search(ln) for ln in plain[:5]):
        out.notes.append(f"{path}: no artifact recognised in it (not an error file, stack dump, Flight Recorder "
                         "dump, NCCL log or rank log)")
    for k in kinds:
        out.count(k)


def _one_rank(text: str, lines: list[str]) -> dict[int, list[str]] | None:
    """A log whose every line starts with the same ``[rankN]:`` (instrument()'s, torchrun's with one rank): its
    lines without the prefix, split at C speed; None when the per-line split is needed (mixed ranks, a prefix
    printed twice, another line separator than newline)."""
    m = _PREFIX.match(lines[0]) if lines else None
    if m is None or not m.group(0).startswith("["):
        return None
    prefix = m.group(0)
    if len(lines) != text.count("\n") + (not text.endswith("\n")) or \
            ("\n" + text).count("\n" + prefix) != len(lines):
        return None
    body = ("\n" + text).replace("\n" + prefix + " ", "\n").replace("\n" + prefix, "\n")[1:]
    if "[rank" in body or "[default" in body:  # maybe "[rank0]:[rank0]: ...": the per-line loop strips both
        return None
    return {int(m.group(1)): body.splitlines()}


def _attribute_nccl(nccl: list[str], out: Collected) -> None:
    """NCCL lines without a rank prefix: attribute them by ``host:pid`` once a line names the rank."""
    pid_rank: dict[tuple[str, str], int] = {}
    for ln in nccl:
        m = _NCCL_LINE.match(ln)
        r = _NCCL_RANK.search(ln)
        if m and r:
            pid_rank.setdefault((m["host"], m["pid"]), int(r.group(1) or r.group(2)))
    for ln in nccl:
        m = _NCCL_LINE.match(ln)
        assert m is not None
        rank = pid_rank.get((m["host"], m["pid"]))
        if rank is None:
            out.unattributed_nccl.append(ln)
            continue
        ev = out.rank(rank)
        ev.kinds.add("nccl_log")
        ev.host = ev.host or m["host"]
        ev.pid = ev.pid or int(m["pid"])
        ev.nccl.append(ln)


def _summary(path: str, lines: list[str], out: Collected) -> bool:
    """torchrun's failure summary: per failed rank its host, exit code (signal) and time; the "Root Cause"."""
    found = False
    root = False
    rank: int | None = None
    for ln in lines:
        if "Root Cause (first observed failure)" in ln:
            root = True
            continue
        m = _SUMMARY_RANK.match(ln)
        if m:
            rank = int(m.group(1))
            found = True
            if root and out.root_cause_rank is None:
                out.root_cause_rank = rank
            continue
        if rank is None:
            continue
        ev = out.rank(rank)
        h = _SUMMARY_HOST.match(ln)
        if h:
            ev.host = ev.host or h.group(1)
            continue
        e = _SUMMARY_EXIT.match(ln)
        if e:
            ev.exitcode = int(e.group(1))
            ev.pid = ev.pid or int(e.group(2))
            ev.kinds.add("launcher_summary")
            continue
        t = _SUMMARY_TIME.match(ln)
        if t:
            ev.exit_time = t.group(1)
    return found


def _read_rank_lines(path: str, rank: int, lines: list[str], out: Collected, kinds: set[str], *,
                     prefixed: bool) -> None:
    ev = out.rank(rank)
    text = "\n".join(lines)
    for ln in lines[:50]:
        h = _HEADER.search(ln)
        if h and h.group(1):
            ev.world_size = int(h.group(2))
            ev.host = ev.host or h.group(3)
            ev.pid = ev.pid or int(h.group(4))
            break
        if h and h.group(6):
            ev.host = ev.host or h.group(7)
            ev.pid = ev.pid or int(h.group(8))
            break
    # stacks: faulthandler (Thread 0x...) or py-spy (Thread N (active))
    if "hread " in text and any(_THREAD.match(ln) for ln in lines):
        kinds.add("stacks")
        ev.kinds.add("stacks")
        is_pyspy = any(re.match(r"^Thread [0-9]{1,10} \((?:active|idle)", ln) for ln in lines)
        stack_text, reason = _last_dump(lines)
        if is_pyspy:
            frames, block = parse_pyspy(stack_text), stack_text
        else:
            frames, block = _main_thread_frames(stack_text)
        if frames and (not ev.stack_frames or not prefixed):
            shown = (f"# {reason}\n{block.strip()}" if reason else block.strip())
            ev.stack, ev.stack_frames, ev.stack_file, ev.stack_reason = shown, frames, path, reason
    # a Python traceback printed by the rank (its last one)
    starts = [i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent call last):")] \
        if "Traceback (most recent call last):" in text else []
    if starts:
        tb_lines = lines[starts[-1]:]
        end = next((i + 1 for i, ln in enumerate(tb_lines) if i > 0 and ln and not ln.startswith(" ")
                    and not ln.startswith("Traceback")), len(tb_lines))
        tb = "\n".join(tb_lines[:end])
        message = _last_exception_line(tb)
        if message and parse_traceback(tb) is not None:
            kinds.add("rank_log" if prefixed else "log")
            ev.kinds.add("log")
            if not any(m == message for _, m, _, _ in ev.errors):
                ev.errors.append((None, message, tb, path))
    for ln in lines if "Watchdog caught collective operation timeout" in text else ():
        w = _WATCHDOG.search(ln)
        if w:  # NCCL's watchdog: the collective (by SeqNum) this rank was stuck in
            ev.nccl_timeout = (int(w.group(1)), w.group(2))
            message = ln[ln.find("[Rank "):].strip() if "[Rank " in ln else ln.strip()
            if not any(m == message for _, m, _, _ in ev.errors):
                ev.errors.append((None, message, "", path))
            kinds.add("nccl_log")
            ev.kinds.add("nccl_log")
            break
    fatal = next((ln.strip() for ln in lines if ln.startswith(("Fatal Python error:", "terminate called"))), "") \
        if "Fatal Python error:" in text or "terminate called" in text else ""
    if fatal and not ev.errors:
        what = next((ln.strip() for ln in lines if ln.strip().startswith("what():")), "")
        ev.errors.append((None, f"{fatal} {what}".strip(), text[-4000:] if "Thread 0x" in text else "", path))
    nccl = [ln for ln in lines if _NCCL_LINE.match(ln) or ("NCCL" in ln and ("WARN" in ln or "error" in ln))] \
        if "NCCL" in text else []
    if nccl:
        kinds.add("nccl_log")
        ev.kinds.add("nccl_log")
        ev.nccl.extend(nccl[:10_000])
        m = _NCCL_LINE.match(nccl[0])
        if m:
            ev.host = ev.host or m["host"]
    if prefixed:
        ev.kinds.add("log")
        ev.log.extend(lines[-50:])
        kinds.add("rank_log")


def _last_dump(lines: list[str]) -> tuple[str, str]:
    """The last stack dump in a file that holds several (``# nbdebug: ...`` headers, or one ``Thread`` run)."""
    starts = [i for i, ln in enumerate(lines) if ln.startswith("# nbdebug:") or ln.startswith("Fatal Python error")
              or ln.startswith("Process ") and "py-spy" not in ln]
    best = "", ""
    for n, i in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        chunk = lines[i:end]
        if any(_THREAD.match(ln) for ln in chunk):
            reason = lines[i].removeprefix("# nbdebug: ").split(";")[0].strip()
            best = "\n".join(chunk), reason
    if not best[0]:
        return "\n".join(lines), ""
    return best


def _main_thread_frames(text: str) -> tuple[list[dict[str, Any]], str]:
    """The main thread of a faulthandler dump (its frames and its block of text): not nbdebug's watcher, not a
    torch/threading worker."""
    blocks = re.split(r"^(?=(?:Current thread|Thread) 0x)", text, flags=re.M)
    candidates: list[tuple[list[dict[str, Any]], str]] = []
    for block in blocks:
        if not _THREAD.match(block):
            continue
        # nbdebug's own frames are plumbing: a dump taken by its SIGTERM handler runs on top of the user's code
        frames = [f for f in parse_faulthandler(block) if not str(f["file"]).endswith("nbdebug/core/dist/_instrument.py")]
        if frames:
            kept = [ln for ln in block.splitlines() if "nbdebug/core/dist/_instrument.py" not in ln
                    and not ln.startswith(("Extension modules:", "# nbdebug:"))]
            candidates.append((frames, "\n".join(kept)))
    # the main thread's outermost frame is the script (<module>), a worker's is threading's _bootstrap
    main = [c for c in candidates if not str(c[0][0]["file"]).endswith("threading.py")]
    return (main or candidates or [([], "")])[0]
