"""Checks a family of errors can make in the live session, beyond the message: the installed versions and the
pairs that do not fit, the checkpoint file itself, a ``load_state_dict`` mismatch diffed against the live model,
the signature a call missed, the keys a dict holds, the fields an object has, the process's memory and its limits.

Each check returns ``Checked``: facts (label -> value, shown as they are), notes, and optionally a first step
and fixes that replace the entry's generic ones.  A check that cannot look (no torch, no frame, a file it may
not read) returns nothing: it never guesses.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nbdebug._units import fmt_bytes
from nbdebug.core._findings import Fix
from nbdebug.core.explain._evidence import LiveEvidence, frames_of
from nbdebug.core.knowledge.env import FRAME_CONFLICT_SLUGS, FRAME_CONFLICT_STEP

__all__ = ["Checked", "live_checks", "installed_versions", "version_conflicts", "host_memory", "check_checkpoint_file",
           "state_dict_diff"]

ENV_SLUGS = frozenset({"numpy_abi", "native_library_missing", "undefined_symbol", "api_missing", "version_mismatch",
                       "native_crash", "cuda_unavailable", "package_missing", "extension_build_failed",
                       "version_required", "libraries_disagree", "torch_too_old", "checkpoint_other_release"})
MEMORY_SLUGS = frozenset({"host_oom", "dataloader_worker"})
CHECKPOINT_SLUGS = frozenset({"checkpoint_corrupt", "checkpoint_load_failed", "checkpoint_module_missing",
                              "weights_only_unpickling", "deserialize_cuda", "state_dict_keys",
                              "size_mismatch_state_dict"})


@dataclass
class Checked:
    """What the live checks found: rows a person reads, notes, and a better first step / fixes when they know one."""

    rows: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    first_step: str = ""
    fixes: list[Fix] = field(default_factory=list)
    fixes_only: bool = False  # the check's fixes replace the entry's (which would contradict what it found)
    causes: tuple[str, ...] | None = None  # the causes that still apply, where the check ruled the entry's out


def installed_versions() -> dict[str, str]:
    """The installed versions of torch and its companions (from the packages' metadata: nothing is imported)."""
    from importlib import metadata

    from nbdebug.core.knowledge.env import COMPANIONS

    found = {}
    for name in COMPANIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        except Exception:  # noqa: BLE001 - a broken dist-info: skip it
            continue
    return found


def _release(version: str) -> tuple[int, ...]:
    parts = []
    for piece in re.split(r"[.+]", version)[:3]:
        m = re.match(r"\d+", piece)
        if not m:
            break
        parts.append(int(m.group(0)))
    return tuple(parts)


def version_conflicts(versions: Mapping[str, str]) -> list[str]:
    """Pairs of installed packages that do not fit: a package's declared requirement on another installed one
    that the installed version does not satisfy, and NumPy 2 under a torch built for NumPy 1."""
    from nbdebug.core.explain._installed import requirement_conflicts
    from nbdebug.core.knowledge.env import NUMPY_2_FROM

    problems = requirement_conflicts(versions, versions.get)  # the given versions, torch's companions only
    torch_v, numpy_v = versions.get("torch"), versions.get("numpy")
    if torch_v and numpy_v and _release(numpy_v)[:1] >= (2,) and _release(torch_v) < _release(NUMPY_2_FROM):
        problems.append(f"torch {torch_v} was built for NumPy 1.x; NumPy {numpy_v} is installed (NumPy 2 needs torch >= "
                        f"{NUMPY_2_FROM}): install numpy<2 or upgrade torch")
    return problems


def _read_small(path: str) -> str:
    from nbdebug._files import read_text
    from nbdebug.errors import NbdebugError

    try:
        return read_text(path, "a small system file", cap=1 << 16)
    except (NbdebugError, OSError):
        return ""


def host_memory() -> dict[str, int]:
    """This process's resident memory and the limits that apply to it, in bytes (those that could be read)."""
    out: dict[str, int] = {}
    status = _read_small("/proc/self/status")
    m = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
    if m:
        out["rss"] = int(m.group(1)) * 1024
    m = re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)
    if m:
        out["peak_rss"] = int(m.group(1)) * 1024
    m = re.search(r"^VmSize:\s+(\d+) kB", status, re.M)
    if m:  # what an address-space limit (ulimit -v) counts
        out["vm_size"] = int(m.group(1)) * 1024
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        text = _read_small(path).strip()
        if text.isdigit() and int(text) < (1 << 60):
            out["cgroup_limit"] = int(text)
            break
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            out["address_space_limit"] = int(soft)
    except (ImportError, ValueError, OSError):
        pass
    try:
        out["machine"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        out["machine_available"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        pass
    return out


def children_memory() -> tuple[int, int]:
    """How many child processes this process has (DataLoader workers, spawned ranks) and their resident memory."""
    pids: list[int] = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 0, 0
    for task in tasks[:10_000]:
        pids += [int(p) for p in _read_small(f"/proc/self/task/{task}/children").split() if p.isdigit()]
    total = 0
    for pid in pids[:1_000]:
        m = re.search(r"^VmRSS:\s+(\d+) kB", _read_small(f"/proc/{pid}/status"), re.M)
        total += int(m.group(1)) * 1024 if m else 0
    return len(pids), total


def _loader_workers(exc: BaseException) -> int | None:
    """The number of workers of the DataLoader whose iterator the traceback went through, if any."""
    for frame, _ in reversed(frames_of(exc.__traceback__)):
        owner = frame.f_locals.get("self")
        workers = getattr(owner, "_num_workers", None) if type(owner).__name__.endswith("DataLoaderIter") else None
        if isinstance(workers, int):
            return workers
    return None


def memory_rows(mem: Mapping[str, int]) -> list[tuple[str, str]]:
    """Host memory as rows a person reads."""
    labels = (("rss", "Memory in use (this process)"), ("peak_rss", "Peak memory (this process)"),
              ("cgroup_limit", "Container (cgroup) limit"), ("address_space_limit", "Address-space limit (ulimit -v)"),
              ("machine", "Machine memory"), ("machine_available", "Machine memory free"))
    return [(label, fmt_bytes(mem[key])) for key, label in labels if key in mem]


_ZIP = b"PK\x03\x04"
_EOCD = b"PK\x05\x06"


def check_checkpoint_file(path: str) -> list[tuple[str, str]]:
    """What the file at ``path`` is: size, format by its first bytes, whether a zip checkpoint is complete."""
    from nbdebug._files import read_bytes
    from nbdebug.errors import NbdebugError

    rows = [("Checkpoint file", path)]
    try:
        size = os.stat(path).st_size
        head = read_bytes(path, "a checkpoint file", cap=64)
        tail = read_bytes(path, "a checkpoint file", cap=1 << 16, tail=True) if size > 64 else head
    except (NbdebugError, OSError) as e:
        return rows + [("File check", str(e))]
    rows.append(("File size", f"{fmt_bytes(size)} ({size} bytes)"))
    if size == 0:
        kind = "empty (0 bytes): the save or download never wrote anything"
    elif head.startswith(_ZIP):
        kind = ("a zip checkpoint (torch.save's format), complete" if _EOCD in tail else
                "a zip checkpoint whose end is missing: the file is truncated (an interrupted save or download)")
    elif head[:1] == b"\x80":
        kind = f"a legacy pickle (protocol {head[1] if len(head) > 1 else '?'}) written by torch.save(..., _use_new_zipfile_serialization=False) or pickle"
    elif head.startswith(b"version https://git-lfs"):
        kind = "a Git LFS pointer, not the weights: run git lfs pull (or download the file itself)"
    elif head.lstrip().startswith((b"<!DOCTYPE", b"<html", b"<HTML")):
        kind = "an HTML page (a failed download saved under the checkpoint's name)"
    elif len(head) >= 8 and int.from_bytes(head[:8], "little") < size and head[8:9] == b"{":
        kind = "a safetensors file: load it with safetensors.torch.load_file"
    else:
        kind = f"not a checkpoint format nbdebug knows (first bytes {head[:8]!r})"
    rows.append(("File format", kind))
    return rows


def _serialization_path(exc: BaseException) -> str:
    for frame, _ in reversed(frames_of(exc.__traceback__)):
        if frame.f_code.co_filename.replace("\\", "/").endswith("torch/serialization.py"):
            f = frame.f_locals.get("f")
            if isinstance(f, (str, os.PathLike)):
                return os.fspath(f)
    return ""


def state_dict_diff(exc: BaseException) -> Checked:
    """For a failed ``load_state_dict``: missing, unexpected and shape-mismatched keys against the live model."""
    torch = sys.modules.get("torch")
    out = Checked()
    if torch is None:
        return out
    for frame, _ in reversed(frames_of(exc.__traceback__)):
        if frame.f_code.co_name != "load_state_dict":
            continue
        model, sd = frame.f_locals.get("self"), frame.f_locals.get("state_dict")
        if not isinstance(model, torch.nn.Module) or not isinstance(sd, Mapping):
            continue
        try:
            own = {k: tuple(v.shape) for k, v in model.state_dict().items()}
            given = {k: tuple(v.shape) for k, v in sd.items() if hasattr(v, "shape")}
        except Exception:  # noqa: BLE001
            return out
        missing = [k for k in own if k not in given]
        unexpected = [k for k in given if k not in own]
        shapes = [f"{k}: checkpoint {list(given[k])}, model {list(own[k])}" for k in own if k in given and given[k] != own[k]]
        out.rows += [("Keys in the model / the checkpoint", f"{len(own)} / {len(given)}"),
                     ("Missing from the checkpoint", _first(missing)), ("Not in the model", _first(unexpected))]
        if shapes:
            out.rows.append(("Shapes that differ", _first(shapes, 5)))
        prefix = _common_prefix(unexpected, own) or ""
        if prefix:
            out.first_step = (f"Every checkpoint key carries a '{prefix}' prefix the model's keys do not: strip it "
                              "(one line, below).")
            out.fixes.append(Fix(f"Strip the '{prefix}' prefix (one line)",
                                 f"model.load_state_dict({{k.removeprefix('{prefix}'): v for k, v in sd.items()}})"))
        else:
            inner = _common_prefix(missing, given)
            if inner:
                out.first_step = (f"The model's keys carry a '{inner}' prefix the checkpoint's do not (a wrapped "
                                  "model): load into the inner module, or add the prefix.")
                out.fixes.append(Fix(f"Add the '{inner}' prefix (one line)",
                                     f"model.load_state_dict({{'{inner}' + k: v for k, v in sd.items()}})"))
            elif shapes and not missing and not unexpected:
                out.first_step = ("Only shapes differ: the model was built with another configuration than the "
                                  "checkpoint (the shapes above say which dimension).")
        return out
    return out


def _first(items: list[str], n: int = 8) -> str:
    if not items:
        return "none"
    return ", ".join(items[:n]) + (f" and {len(items) - n} more" if len(items) > n else "") + f" ({len(items)})"


def _common_prefix(keys: list[str], other: Mapping[str, Any]) -> str:
    """A prefix ('module.', 'model.', '_orig_mod.', ...) that, removed from every key, gives the other side's keys."""
    if not keys:
        return ""
    first = keys[0]
    for cut in [i + 1 for i, ch in enumerate(first) if ch == "."][:3]:
        prefix = first[:cut]
        if all(k.startswith(prefix) for k in keys) and all(k[cut:] in other for k in keys[:50]):
            return prefix
    return ""


def _call_signature(exc: BaseException) -> Checked:
    torch = sys.modules.get("torch")
    out = Checked()
    if torch is None:
        return out
    for frame, _ in reversed(frames_of(exc.__traceback__)):
        owner = frame.f_locals.get("self")
        if isinstance(owner, torch.nn.Module) and frame.f_code.co_name in ("_call_impl", "_wrapped_call_impl", "__call__"):
            try:
                sig = str(inspect.signature(owner.forward))
            except (TypeError, ValueError):
                return out
            out.rows.append((f"{type(owner).__name__}.forward takes", sig[:300]))
            out.first_step = (f"{type(owner).__name__}.forward{sig[:200]} is what the model takes: pass only those "
                              "arguments (or change forward to take the one the caller passes).")
            return out
    return out


def _linear_names(exc: BaseException) -> Checked:
    """The names a LoRA target_modules can use: the last name part of the model's linear layers."""
    torch = sys.modules.get("torch")
    out = Checked()
    if torch is None:
        return out
    for frame, _ in frames_of(exc.__traceback__):
        model = frame.f_locals.get("model")
        if isinstance(model, torch.nn.Module):
            try:
                names = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules()
                                if isinstance(m, torch.nn.Linear) or type(m).__name__ in ("Conv1D", "Linear8bitLt",
                                                                                           "Linear4bit")})
            except Exception:  # noqa: BLE001
                return out
            if names:
                shown = ", ".join(names[:30]) + (" ..." if len(names) > 30 else "")
                out.rows.append(("Linear layers of the model", shown))
                out.first_step = f"Set target_modules to names the model has: {shown}."
            return out
    return out


def _missing_key(exc: BaseException, evidence: LiveEvidence) -> Checked:
    out = Checked()
    if not exc.args:
        return out
    key = exc.args[0]
    frames = frames_of(exc.__traceback__)
    if not frames:
        return out
    frame, line = frames[-1]
    import linecache

    text = linecache.getline(frame.f_code.co_filename, line)
    try:
        local = dict(frame.f_locals)
    except Exception:  # noqa: BLE001
        return out
    candidates = [(name, v) for name, v in local.items() if isinstance(v, Mapping) and not isinstance(v, type)]
    candidates.sort(key=lambda nv: nv[0] not in text)
    for name, mapping in candidates:
        try:
            if len(mapping) > 100_000 or key in mapping:
                continue
            keys = [k for k in list(mapping.keys())[:200] if isinstance(k, (str, int))]
        except Exception:  # noqa: BLE001
            continue
        if not keys:
            continue
        shown = ", ".join(repr(k) for k in keys[:20]) + (f" and {len(keys) - 20} more" if len(keys) > 20 else "")
        out.rows.append((f"Keys of {name}", shown))
        import difflib

        close = difflib.get_close_matches(key, [k for k in keys if isinstance(k, str)], n=1, cutoff=0.75) \
            if isinstance(key, str) else []
        out.first_step = (f"{name} has no key {key!r}; it holds {shown}." +
                          (f" Did you mean {close[0]!r}?" if close else " Use one of those, or make the producer emit "
                                                                       f"{key!r}."))
        return out
    return out


def _wrong_attribute(exc: BaseException) -> Checked:
    out = Checked()
    obj = getattr(exc, "obj", None)
    name = getattr(exc, "name", None)
    if name is None or (obj is None and "NoneType" not in str(exc.args[:1])):
        return out
    kind = type(obj).__name__
    if obj is None:
        fields = "it is None"
    elif isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        fields = f"a tuple of {len(obj)}: " + ", ".join(type(v).__name__ for v in obj[:8])
    elif isinstance(obj, Mapping):
        fields = "keys " + ", ".join(repr(k) for k in list(obj.keys())[:20] if isinstance(k, (str, int)))
    else:
        try:
            names = [n for n in dir(type(obj)) if not n.startswith("_")]
        except Exception:  # noqa: BLE001
            names = []
        fields = "attributes " + ", ".join(names[:20]) + (" ..." if len(names) > 20 else "")
    out.rows.append((f"The {kind} has", fields))
    hint = " Index it (out[0]) or ask the model for named outputs (return_dict=True)." if isinstance(obj, tuple) else ""
    if isinstance(obj, Mapping) and name in obj:
        hint = f" It holds the key {name!r}: use out[{name!r}]."
    out.first_step = f"The object is a {kind} ({fields[:160]}), not what has .{name}.{hint}"
    return out


def _api_missing(facts: Mapping[str, Any], versions: Mapping[str, str]) -> Checked:
    from nbdebug.core.knowledge.env import ADDED_IN

    out = Checked()
    owner, attr = str(facts.get("owner", "")), str(facts.get("attr", ""))
    wanted = f"{owner}.{attr}"
    package = owner.split(".")[0]
    installed = versions.get(package, "")
    for name, added, removed in ADDED_IN:
        if name != wanted:
            continue
        if added:
            out.rows.append((f"{name} added in", f"{package} {added}"))
        if removed:
            out.rows.append((f"{name} removed in", f"{package} {removed}"))
        if installed:
            if added and _release(installed) < _release(added):
                out.first_step = (f"{name} was added in {package} {added}; {package} {installed} is installed: upgrade "
                                  f"{package} (with its matching companions), or use code written for {installed}.")
            elif removed and _release(installed) >= _release(removed):
                out.first_step = (f"{name} was removed in {package} {removed}; {package} {installed} is installed: use "
                                  f"the code's newer version, or install {package} older than {removed}.")
        break
    return out


def _cpu_only(versions: Mapping[str, str]) -> Checked:
    from nbdebug.core.knowledge.env import CUDA_INDEXES

    out = Checked()
    torch = sys.modules.get("torch")
    if torch is None or getattr(torch.version, "cuda", None) or getattr(torch.version, "hip", None):
        return out
    version = versions.get("torch", getattr(torch, "__version__", ""))
    base = version.split("+", 1)[0]
    minor = ".".join(base.split(".")[:2])
    indexes = CUDA_INDEXES.get(minor)
    if sys.platform.startswith("linux"):
        command = f"pip install --force-reinstall 'torch=={base}'  # PyPI's Linux wheels are CUDA builds"
    elif indexes:
        command = f"pip install --force-reinstall torch=={base} --index-url https://download.pytorch.org/whl/{indexes[-1]}"
    else:
        command = (f"pip install --force-reinstall torch=={base} --index-url https://download.pytorch.org/whl/cuXYZ  "
                   "# cuXYZ from pytorch.org's selector")
    out.rows.append(("Installed torch", f"{version}: a CPU-only build (torch.version.cuda is None)"))
    out.first_step = (f"This torch ({version}) is a CPU-only build, so .cuda() cannot work: install a CUDA build of "
                      f"the same release ({command.split('  #')[0]}), or run on the CPU.")
    out.fixes.append(Fix(f"Install a CUDA build of torch {base}", command))
    return out


def _frame_conflicts(exc: BaseException) -> Checked:
    from nbdebug.core.explain._installed import install_command, traceback_conflicts

    out = Checked()
    conflicts = traceback_conflicts(exc)
    out.rows += [("Does not fit", c) for c in conflicts]
    if conflicts:
        out.first_step = FRAME_CONFLICT_STEP.format(conflict=conflicts[0], command=install_command(conflicts[0]))
    return out


def live_checks(exc: BaseException, slug: str, facts: Mapping[str, Any], evidence: LiveEvidence) -> Checked:
    """The checks that fit ``slug`` (and the exception's type), run in the live session."""
    out = Checked()
    try:
        if slug in ENV_SLUGS:
            versions = installed_versions()
            out.rows.append(("Installed", ", ".join(f"{k} {v}" for k, v in versions.items()) or "none of torch's family"))
            conflicts = version_conflicts(versions)
            out.rows += [("Does not fit", c) for c in conflicts]
            if conflicts and not out.first_step:
                out.first_step = f"Installed versions do not fit: {conflicts[0]}. Install versions that fit, then retry."
            more = (_api_missing(facts, versions) if slug == "api_missing" else
                    _cpu_only(versions) if slug == "cuda_unavailable" and "not compiled" in str(facts.get("reason", ""))
                    else _requirement(facts) if slug == "version_required" else Checked())
            _merge(out, more)
        elif slug in FRAME_CONFLICT_SLUGS:
            _merge(out, _frame_conflicts(exc))
        if slug in MEMORY_SLUGS or isinstance(exc, MemoryError):
            out.rows += memory_rows(host_memory())
            count, held = children_memory()
            workers = _loader_workers(exc)
            if workers is not None:
                out.rows.append(("DataLoader workers", str(workers)))
            if count:  # each worker holds its own copy of what the dataset's Python objects touched
                out.rows.append(("Child processes (workers) now", f"{count}, {fmt_bytes(held)} resident in all"))
        if slug in CHECKPOINT_SLUGS:
            path = _serialization_path(exc)
            if path:
                out.rows += check_checkpoint_file(path)
            if slug in ("state_dict_keys", "size_mismatch_state_dict"):
                _merge(out, state_dict_diff(exc))
        if slug == "call_signature":
            _merge(out, _call_signature(exc))
        if slug == "peft_target_modules":
            _merge(out, _linear_names(exc))
        if isinstance(exc, KeyError) and slug in ("missing_key", "unknown"):
            _merge(out, _missing_key(exc, evidence))
        if isinstance(exc, AttributeError) and slug in ("wrong_object_attribute", "unknown"):
            _merge(out, _wrong_attribute(exc))
    except Exception as e:  # noqa: BLE001 - a check that fails adds one line; the diagnosis stays
        out.notes.append(f"A live check could not run ({type(e).__name__}).")
    return out


def _requirement(facts: Mapping[str, Any]) -> Checked:
    from nbdebug.core.explain._requirement import requirement_check

    found = requirement_check(facts)
    if found is None:
        return Checked()
    return Checked(rows=[found.row], first_step=found.first_step, fixes=found.fixes, fixes_only=True,
                   causes=found.causes)


def _merge(into: Checked, more: Checked) -> None:
    into.rows += more.rows
    into.notes += more.notes
    into.fixes += more.fixes
    into.fixes_only = into.fixes_only or more.fixes_only
    into.causes = more.causes if more.causes is not None else into.causes
    if more.first_step:
        into.first_step = more.first_step


_BAD_FILE = ("truncated", "empty", "HTML page", "Git LFS pointer", "not a checkpoint format")


def _from_the_file(diagnosis: Any, exc: BaseException) -> Any:
    """An error no text matched, raised while torch.load read a file that the file check finds damaged (a truncated
    zip gives only ``OSError: [Errno 22] Invalid argument``): the file is the diagnosis."""
    import dataclasses

    from nbdebug.core.knowledge import entry

    path = _serialization_path(exc)
    if not path:
        return diagnosis
    kind = dict(check_checkpoint_file(path)).get("File format", "")
    if not any(word in kind for word in _BAD_FILE):
        return diagnosis
    e = entry("checkpoint_corrupt")
    return dataclasses.replace(
        diagnosis, kind=e.slug, title=e.title, causes=e.causes, fixes=e.fixes, first_step=e.first_step,
        sources=e.sources, summary=f"The file could not be read as a checkpoint: it is {kind}.")


def attach(diagnosis: Any, exc: BaseException, roots: Mapping[str, Any] | None) -> Any:
    """``diagnosis`` with the live evidence and the family's checks added (a section, open in the panel).

    A known category keeps its cause and takes a better first step when a check knows one; an unknown error gets
    "what we know" and no guessed cause.
    """
    import dataclasses

    from nbdebug.core.explain._diagnosis import LIVE_TITLE, Section
    from nbdebug.core.explain._evidence import live_evidence

    evidence = live_evidence(exc, roots)
    if not diagnosis.known or diagnosis.kind == "checkpoint_load_failed":  # the file check says more, when it can
        diagnosis = _from_the_file(diagnosis, exc)
    checked = live_checks(exc, diagnosis.kind, diagnosis.evidence, evidence)
    rows = tuple(evidence.rows()) + tuple(checked.rows)
    if not rows and not checked.notes:
        return diagnosis
    section = Section(title=LIVE_TITLE, facts=rows, notes=tuple(checked.notes), open=True,
                      telling=evidence.names_torch or bool(checked.rows))
    changes: dict[str, Any] = {"sections": (section, *diagnosis.sections)}
    if checked.first_step:
        changes["first_step"] = checked.first_step
    if checked.causes is not None:
        changes["causes"] = checked.causes
    if checked.fixes_only:
        changes["fixes"] = tuple(checked.fixes)
    elif checked.fixes:
        titles = {f.title for f in checked.fixes}
        changes["fixes"] = tuple(checked.fixes) + tuple(f for f in diagnosis.fixes if f.title not in titles)
    if not diagnosis.known and checked.first_step:  # the message is not known, but a check found a fact
        changes["summary"] = ("nbdebug does not recognise this error's message, but a check of the live session "
                              "found what to check first.")
    elif not diagnosis.known:
        changes["summary"] = ("nbdebug does not recognise this error, so it names no cause; below is what the live "
                              "session shows at the error: your line, its tensors, the module and the operation.")
        if evidence.site:
            changes["summary"] = (f"nbdebug does not recognise this error, so it names no cause. It was raised at "
                                  f"{evidence.site}" + (f", inside {evidence.op}" if evidence.op else "") +
                                  "; below is what the live session shows there.")
    return dataclasses.replace(diagnosis, **changes)
