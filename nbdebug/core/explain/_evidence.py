"""Live evidence for an exception raised in this process: what no log reader can see.

From the exception's traceback (never from its text): the innermost frame of the user's own code, named as the
user knows it (``In [12], line 3: loss = model(x)``); the tensors on that line and in that frame (shape, dtype,
device, requires_grad and a short value summary: min / max / mean, NaN and Inf counts); the ``nn.Module`` that
raised, named by its place in the user's model, with its parameters' devices and dtypes; and the operation that
raised (the innermost frame, usually a library function).

Bounded on purpose: at most ``MAX_TENSORS`` tensors, value summaries only for tensors up to ``MAX_SUMMARY_NUMEL``
elements and only while the time budget lasts; a summary is computed where the tensor lives and only its few
numbers come to the host.  Nothing here calls a user object's ``__repr__``/``__str__`` (objects other than tensors
are named by their type), and no value summary is taken on a GPU once the error says its context is poisoned.
torch is never imported: if it is not in ``sys.modules`` there are no tensors to describe.
"""

from __future__ import annotations

import linecache
import os
import re
import sys
import sysconfig
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any

from nbdebug.core._cells import is_cell_file, site_label

__all__ = ["TensorFacts", "LiveEvidence", "live_evidence", "is_library_file", "frames_of", "user_frame",
           "MAX_TENSORS", "MAX_SUMMARY_NUMEL"]

MAX_TENSORS = 12
# past 32k elements a summary reads three slices of that many in all: below ATen's parallel grain (32768), so
# it runs on the calling thread and never waits for a busy thread pool
MAX_SUMMARY_NUMEL = 1 << 15
_BUDGET_S = 0.030  # value summaries stop after this long (the rest keep shape, dtype and device)
_MAX_FRAMES = 2_000
_IDENT = re.compile(r"[A-Za-z_]\w*")
_CALL = re.compile(r"(?<![\w.])([A-Za-z_][\w.]{0,80})\(")
# after these the CUDA context cannot run another kernel: a value summary on the GPU would raise again
_POISONED = ("device-side assert", "illegal memory access", "CUDA error", "unspecified launch failure",
             "misaligned address", "an illegal instruction")


def _roots() -> tuple[str, ...]:
    paths = {sysconfig.get_paths().get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the nbdebug package
    paths.add(here)
    return tuple(sorted(os.path.normpath(p) + os.sep for p in paths if p))


_ROOTS: tuple[str, ...] | None = None


def is_library_file(path: str) -> bool:
    """True for a file of the standard library, an installed package or nbdebug; False for the user's code
    (notebook cells, ``<...>`` sources such as ``<string>``, the user's own files)."""
    global _ROOTS
    if not path or path.startswith("<"):
        return path.startswith("<frozen")
    if is_cell_file(path):
        return False
    if _ROOTS is None:
        _ROOTS = _roots()
    norm = os.path.normpath(path)
    parts = norm.split(os.sep)
    return any(norm.startswith(r) for r in _ROOTS) or "site-packages" in parts or "dist-packages" in parts


def frames_of(tb: TracebackType | None) -> list[tuple[FrameType, int]]:
    """The frames of a traceback, outermost first, with the line each was at."""
    out: list[tuple[FrameType, int]] = []
    while tb is not None and len(out) < _MAX_FRAMES:
        out.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return out


def user_frame(frames: list[tuple[FrameType, int]]) -> tuple[FrameType, int] | None:
    """The innermost frame of the user's own code (a cell, or a file outside the installed packages)."""
    for frame, line in reversed(frames):
        if not is_library_file(frame.f_code.co_filename):
            return frame, line
    return None


@dataclass(frozen=True)
class TensorFacts:
    """One tensor as the evidence shows it; value fields are None when no summary was taken."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    device: str
    requires_grad: bool
    on_line: bool
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    nan: int | None = None
    inf: int | None = None
    note: str = ""

    def describe(self) -> str:
        """``x: [4, 64] float32 cpu, grad, min -1.2 max 3.4 mean 0.01, 2 NaN`` (one line a person reads)."""
        text = f"{self.name}: {list(self.shape)} {self.dtype} {self.device}" + (", requires grad" if self.requires_grad else "")
        if self.min is not None and self.max is not None:  # + 0.0: a minimum of -0.0 reads 0
            text += f", min {self.min + 0.0:.4g} max {self.max + 0.0:.4g}" + (
                f" mean {self.mean + 0.0:.4g}" if self.mean is not None else "")
        bad = [f"{n} {what}" for n, what in ((self.nan, "NaN"), (self.inf, "Inf")) if n]
        if bad:
            text += ", " + " and ".join(bad)
        if self.note:
            text += f" ({self.note})"
        return text


@dataclass(frozen=True)
class LiveEvidence:
    """What the live session shows about one exception (all fields may be empty)."""

    site: str = ""  # In [12], line 3: loss = model(x)
    function: str = ""  # the user's function at that site (<module> for a cell's top level)
    tensors: tuple[TensorFacts, ...] = ()
    module: str = ""  # model.encoder.2
    module_type: str = ""  # Linear(in_features=64, out_features=10, bias=True)
    parameters: str = ""  # "float32 on cuda:0" / "float32 on cpu and cuda:0"
    op: str = ""  # torch.nn.functional.linear
    more_tensors: int = 0  # tensors seen beyond MAX_TENSORS

    @property
    def names_torch(self) -> bool:
        """Whether the evidence shows tensors or a module (a panel is worth showing for an unknown error)."""
        return bool(self.tensors or self.module or self.module_type)

    @property
    def empty(self) -> bool:
        return not (self.site or self.tensors or self.module or self.op)

    def rows(self) -> tuple[tuple[str, str], ...]:
        """The evidence as (label, value) rows, labels a person reads."""
        rows = []
        if self.site:
            rows.append(("Your code", self.site + (f" (in {self.function})" if self.function not in ("", "<module>") else "")))
        if self.op:
            rows.append(("Raised by", self.op))
        if self.module:
            label = self.module_type
            shown = f"{self.module} ({label[:-2]})" if label.endswith("()") else f"{self.module} = {label}"
            rows.append(("Module", shown if label else self.module))
        elif self.module_type:
            rows.append(("Module", self.module_type))
        if self.parameters:
            rows.append(("Its parameters", self.parameters))
        for t in self.tensors:
            rows.append(("Tensor on the line" if t.on_line else "Tensor in the frame", t.describe()))
        if self.more_tensors:
            rows.append(("More tensors", f"{self.more_tensors} not shown"))
        return tuple(rows)


def _tensor_facts(torch: Any, name: str, t: Any, on_line: bool, summarise: bool) -> TensorFacts:
    shape = tuple(int(d) for d in t.shape)
    dtype = str(t.dtype).removeprefix("torch.")
    facts = TensorFacts(name=name, shape=shape, dtype=dtype, device=str(t.device),
                        requires_grad=bool(t.requires_grad), on_line=on_line)
    if not summarise:
        return facts
    numel = t.numel()
    if numel == 0 or t.device.type == "meta" or t.is_sparse or t.is_quantized or t.dtype == torch.bool:
        return facts
    note = ""
    with torch.no_grad():
        x = t.detach()
        if numel > MAX_SUMMARY_NUMEL:  # a view, never a copy: every step-th element of the flat storage
            if not x.is_contiguous():
                return _replace(facts, note=f"{numel:,} elements, not contiguous: values not summarised")
            # three contiguous slices (start, middle, end): cheap to read, unlike a stride over the whole storage
            flat, part = x.view(-1), MAX_SUMMARY_NUMEL // 3
            mid = (numel - part) // 2
            x = torch.cat((flat[:part], flat[mid:mid + part], flat[numel - part:]))
            note = f"values from 3 slices, {3 * part:,} of {numel:,} elements"
        if x.is_complex():
            x = x.abs()
        floating = x.is_floating_point()
        nan = inf = 0
        finite = x
        if floating:  # one pass in the common case (all finite); NaN and Inf counted apart only when some are there
            ok = torch.isfinite(x)
            bad = x.numel() - int(ok.sum())
            if bad:
                nan = int(torch.isnan(x).sum())
                inf = bad - nan
                finite = x[ok]
        if finite.numel() == 0:
            return _replace(facts, nan=nan, inf=inf, note=note)
        lo_t, hi_t = torch.aminmax(finite)
        lo, hi = float(lo_t), float(hi_t)
        mean = float(finite.float().mean()) if floating or x.dtype in (torch.int32, torch.int64, torch.int16, torch.int8,
                                                                        torch.uint8) else None
    return _replace(facts, min=lo, max=hi, mean=mean, nan=nan, inf=inf, note=note)


def _replace(facts: TensorFacts, **changes: Any) -> TensorFacts:
    import dataclasses

    return dataclasses.replace(facts, **changes)


def _module_label(module: Any) -> str:
    try:
        extra = module.extra_repr()  # torch's own layers; a user's module returns "" unless it defines one
    except Exception:  # noqa: BLE001 - a user's extra_repr may raise anything
        extra = ""
    return f"{type(module).__name__}({extra if isinstance(extra, str) else ''})"[:200]


def qualified_name(target: Any, roots: Mapping[str, Any], fallback: Any = None) -> str:
    """``model.encoder.2`` for a module found in one of the user's models; ``""`` when it is in none."""
    for root_name, root in list(roots.items()):
        try:
            if root is target:
                return root_name
            for name, sub in root.named_modules():
                if sub is target:
                    return _joined(root_name, name)
        except Exception:  # noqa: BLE001 - a model whose modules cannot be listed names nothing
            continue
    if fallback is not None and fallback is not target:
        try:
            for name, sub in fallback.named_modules():
                if sub is target:
                    return _joined(f"<{type(fallback).__name__}>", name)
        except Exception:  # noqa: BLE001
            return ""
    return ""


def _joined(root_name: str, name: str) -> str:
    # a compiled model (torch.compile's OptimizedModule) holds the user's model as `_orig_mod` and passes attribute
    # reads through to it, so `model.fc` names what `named_modules()` calls `model._orig_mod.fc`
    parts = [part for part in name.split(".") if part and part != "_orig_mod"]
    return ".".join([root_name, *parts])


def _parameters(module: Any) -> str:
    seen: dict[tuple[str, str], int] = {}
    try:
        for i, p in enumerate(module.parameters()):
            if i >= 10_000:
                break
            key = (str(p.dtype).removeprefix("torch."), str(p.device))
            seen[key] = seen.get(key, 0) + 1
    except Exception:  # noqa: BLE001
        return ""
    if not seen:
        return "none"
    return "; ".join(f"{n} {dtype} on {device}" for (dtype, device), n in seen.items())


def _op_name(frame: FrameType) -> str:
    code = frame.f_code
    module = frame.f_globals.get("__name__", "") if isinstance(frame.f_globals, dict) else ""
    qual = getattr(code, "co_qualname", code.co_name)
    return f"{module}.{qual}" if isinstance(module, str) and module and module != "__main__" else qual


def _candidates(frame: FrameType, line_names: set[str]) -> list[tuple[str, Any, bool]]:
    """(name, value, on the line) for the frame's tensors and those one level inside its containers."""
    torch = sys.modules["torch"]
    tensor = torch.Tensor
    found: list[tuple[str, Any, bool]] = []
    try:
        local = dict(frame.f_locals)
    except Exception:  # noqa: BLE001
        return found
    top_level = frame.f_code.co_name == "<module>"  # a cell's or script's globals: only what its line names
    for name, value in local.items():
        on_line = name in line_names
        if top_level and not on_line:
            continue
        if isinstance(value, tensor):
            found.append((name, value, on_line))
        elif type(value) in (list, tuple) and len(value) <= 64:
            found += [(f"{name}[{i}]", v, on_line) for i, v in enumerate(value) if isinstance(v, tensor)]
        elif type(value) is dict and len(value) <= 64:
            found += [(f"{name}[{k!r}]", v, on_line) for k, v in value.items()
                      if isinstance(k, (str, int)) and isinstance(v, tensor)]
    owner = local.get("self")
    if owner is not None and "self" in line_names:  # self.x on the line
        attrs = {m.group(0)[5:] for m in re.finditer(r"self\.\w+", _line(frame))}
        for attr in sorted(attrs):
            try:
                value = getattr(owner, attr, None) if not isinstance(getattr(type(owner), attr, None), property) else None
            except Exception:  # noqa: BLE001
                continue
            if isinstance(value, tensor):
                found.append((f"self.{attr}", value, True))
    found.sort(key=lambda item: not item[2])  # the line's tensors first
    return found


def _line(frame: FrameType, lineno: int | None = None) -> str:
    return linecache.getline(frame.f_code.co_filename, lineno or frame.f_lineno)


def live_evidence(exc: BaseException, roots: Mapping[str, Any] | None = None) -> LiveEvidence:
    """The evidence the live session holds about ``exc`` (empty when it has no traceback)."""
    frames = frames_of(exc.__traceback__)
    if not frames:
        return LiveEvidence()
    inner_frame, inner_line = frames[-1]
    op = _op_name(inner_frame) if is_library_file(inner_frame.f_code.co_filename) else ""
    found = user_frame(frames)
    unpacking = isinstance(exc, ValueError) and "values to unpack" in str(exc.args[0] if exc.args else "")
    if not op and found is not None and found[0] is inner_frame and not unpacking:  # a call on the user's line raised
        calls = list(dict.fromkeys(_CALL.findall(_line(inner_frame, inner_line))))
        op = ("a call on that line: " + ", ".join(f"{c}(...)" for c in calls[:4])) if calls else ""
    site = function = ""
    if found is not None:
        frame, lineno = found
        site = site_label(frame.f_code.co_filename, lineno)
        function = frame.f_code.co_name
    torch = sys.modules.get("torch")
    if torch is None:
        return LiveEvidence(site=site, function=function, op=op)
    module_type = torch.nn.Module
    innermost = outermost = None
    for frame, _ in frames:
        owner = frame.f_locals.get("self") if frame.f_code.co_varnames[:1] == ("self",) else None
        if isinstance(owner, module_type):
            if outermost is None:  # not `or`: a module's truth is its len() (an empty Sequential, a compiled model)
                outermost = getattr(owner, "_orig_mod", owner)  # torch.compile's wrapper: the model it wraps
            innermost = owner
    module = module_label = params = ""
    if innermost is not None:
        module = qualified_name(innermost, roots or {}, outermost)
        module_label = _module_label(innermost)
        params = _parameters(innermost)
    tensors: list[TensorFacts] = []
    more = 0
    text = _exception_words(exc)
    poisoned = any(p in text for p in _POISONED)
    deadline = time.perf_counter() + _BUDGET_S
    seen: set[int] = set()
    # the user's frame first (its line's tensors), then the frame where the module raised
    ordered = [found] if found is not None else []
    ordered += [(f, ln) for f, ln in reversed(frames) if f.f_locals.get("self") is innermost and innermost is not None][:1]
    for frame, lineno in ordered:
        names = set(_IDENT.findall(_line(frame, lineno)))
        for name, value, on_line in _candidates(frame, names):
            if id(value) in seen:
                continue
            seen.add(id(value))
            if len(tensors) >= MAX_TENSORS:
                more += 1
                continue
            summarise = time.perf_counter() < deadline and not (poisoned and value.device.type != "cpu")
            try:
                tensors.append(_tensor_facts(torch, name, value, on_line and frame is ordered[0][0], summarise))
            except Exception:  # noqa: BLE001 - a tensor subclass or a freed storage: describe the rest
                continue
    return LiveEvidence(site=site, function=function, tensors=tuple(tensors), module=module,
                        module_type=module_label if innermost is not None else "", parameters=params, op=op,
                        more_tensors=more)


def _exception_words(exc: BaseException) -> str:
    try:
        return " ".join(str(a) for a in exc.args if isinstance(a, str))[:2000]
    except Exception:  # noqa: BLE001
        return ""
