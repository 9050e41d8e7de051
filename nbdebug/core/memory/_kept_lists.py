"""The lists a traced block filled: which lines of the block append tensors to a list (or store them in a dict),
what that list was seen to hold after the block, and the finding for the classic leak in the user's own names.

Only plain names are looked up where the block ran: nothing of the user's code runs (no attribute, no property).
"""

from __future__ import annotations

import linecache
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from nbdebug._units import fmt_bytes
from nbdebug.core._findings import Finding
from nbdebug.core.memory._results import SiteBytes
from nbdebug.core.memory._sites import short_path

__all__ = ["KEEPS_TENSORS", "KeptList", "source_line", "look_at_lists", "list_leak"]

# a line that appends to a list without turning the tensor into a number or detaching it
KEEPS_TENSORS = re.compile(r"\.append\((?![^)]*\.(?:item|detach|tolist|cpu\(\)\.numpy)\(|[^)]*\bfloat\()")
# the list of such a line; its value runs to the matching parenthesis (see _appended)
_APPEND = re.compile(r"(?<![\w.])([A-Za-z_][\w.]*)\.append\(")


def _appended(line: str) -> tuple[str, str] | None:
    """``(list, value)`` of the first ``name.append(value)`` in a line of code, the value up to its matching
    parenthesis (a comment after it, or calls inside it, are not part of it); None when there is none."""
    found = _append_call(line)
    return found[:2] if found is not None else None


def _append_call(line: str) -> tuple[str, str, int] | None:
    """``(list, value, end)`` of the first ``name.append(value)`` in a line; ``end`` is just past the call."""
    m = _APPEND.search(line)
    if m is None:
        return None
    depth, quote, i = 1, "", m.end()
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                value = line[m.end():i].strip()
                return (m.group(1), value, i + 1) if value else None
        i += 1
    return None


# a line that stores a value under a key (``cache[k] = out``) without turning it into a number or detaching it
_STORE = re.compile(r"^\s*([A-Za-z_]\w*)\[(.+?)\]\s*=(?!=)\s*(.+?)\s*(?:#.*)?$")
_KEPT_AS_IS = re.compile(r"\.(?:item|detach|tolist|numpy)\(\)\s*$|^float\(|^int\(")


# a list made by a comprehension (``preds = [model(xb) for xb, _ in batches]``): its name, element and loop
_COMPREHENSION = re.compile(r"^\s*([A-Za-z_]\w*)\s*=\s*\[\s*(.+?)\s+(for\s+.+\bin\b.+?)\s*\]\s*(?:#.*)?$")


def _comprehended(line: str) -> tuple[str, str, str] | None:
    """``(list, element, loop)`` of a line ``name = [element for ... in ...]``; None otherwise."""
    m = _COMPREHENSION.match(line)
    if m is None or _KEPT_AS_IS.search(m.group(2)):
        return None
    return m.group(1), m.group(2), m.group(3)


def _stored(line: str) -> tuple[str, str, str] | None:
    """``(dict, key, value)`` of a line ``name[key] = value`` whose value is kept as a tensor; None otherwise."""
    m = _STORE.match(line)
    if m is None or _KEPT_AS_IS.search(m.group(3)):
        return None
    return m.group(1), m.group(2).strip(), m.group(3)


@dataclass(frozen=True)
class KeptList:
    """A list that a line of the block appends tensors to, as seen after the block: whether they keep autograd
    graphs, whether they are single numbers, whether some were made in the block (None: not seen, e.g. an
    attribute or a list of dicts)."""

    label: str  # the line, named as the sites are
    name: str
    value: str
    graphs: bool | None = None
    scalars: bool | None = None
    made_here: bool | None = None
    key: str = ""  # filled by ``name[key] = value`` (a dict), not by ``name.append(value)``
    loop: str = ""  # made by ``name = [value for ...]``: the comprehension's ``for ... in ...``
    addresses: tuple[int, ...] = ()  # where the storage of its tensors made in the block starts

    @property
    def made_as(self) -> str:
        """The statement that fills it, with ``VALUE`` where the value kept goes."""
        if self.loop:
            return f"{self.name} = [VALUE {self.loop}]"
        if self.key:
            return f"{self.name}[{self.key}] = VALUE"
        return f"{self.name}.append(VALUE)"


def source_line(site: SiteBytes) -> str:
    """The source line of a site (a notebook cell's too: IPython keeps them in linecache), else its label."""
    if site.filename and site.line > 0:
        text = linecache.getline(site.filename, site.line).strip()
        if text:
            return text
    return site.site


def look_at_lists(sites: tuple[SiteBytes, ...], namespace: Mapping[str, Any], cells: Mapping[str, str],
                   kept_addresses: np.ndarray, block: tuple[str, int] | None = None) -> dict[tuple[str, int], KeptList]:
    """The lines of the block's code that append a tensor to a list (the cells of the retained sites, or the
    lines around them in a file), nearest the sites first, with that list looked up by name where the block
    ran: do its (last 256) tensors keep graphs, are they numbers, were some made in the block (their storage
    is memory the block kept).  Only plain names are looked up: nothing of the user's runs (no attribute, no
    property)."""
    torch = sys.modules.get("torch")
    found: list[tuple[int, tuple[str, int], KeptList]] = []
    near: dict[str, list[int]] = {}  # file -> the lines of its retained sites (and of the block)
    if block is not None and block[0]:  # the block's own code first: its sites may all lie in a library
        near[block[0]] = [block[1]] if block[1] > 0 else []
    for site in sites:
        if site.filename and site.line > 0:
            near.setdefault(site.filename, []).append(site.line)
    kept: set[int] | None = None
    for filename, at in list(near.items())[:8]:
        lines = linecache.getlines(filename)
        # a cell whole; in a file, the lines around the sites and after the with-statement (the loop that filled
        # the list is there, and elsewhere in the file the same names may mean other things)
        if filename in cells or not at:
            lo, hi = 1, len(lines)
        elif block is not None and filename == block[0]:
            lo, hi = min(at) - 30, max(max(at) + 30, block[1] + 80)
        else:
            lo, hi = min(at) - 30, max(at) + 30
        if not at:
            at = [1]
        for number in range(max(lo, 1), min(hi, len(lines)) + 1):
            line = lines[number - 1]
            if ".append(" not in line and ("]" not in line or "=" not in line):  # most lines: neither
                continue
            if line.lstrip().startswith("#"):
                continue
            key = loop = ""
            call = _append_call(line) if ".append(" in line and KEEPS_TENSORS.search(line) else None
            if call is not None:
                name, value, end = call
            elif "]" in line and "=" in line and (made := _comprehended(line)) is not None:
                name, value, loop = made
                end = len(line.split("#", 1)[0].rstrip())
            elif "]" in line and "=" in line and (stored := _stored(line)) is not None:
                name, key, value = stored
                end = len(line.split("#", 1)[0].rstrip())
            else:
                continue
            graphs = scalars = made_here = None
            addresses: tuple[int, ...] = ()
            held = namespace.get(name) if "." not in name else None
            if isinstance(held, dict) and type(held) is dict and key:
                held = list(held.values())
            elif type(held) not in (list, tuple):
                held = None
            if torch is not None and held is not None:
                tensors = [t for t in held[-256:] if isinstance(t, torch.Tensor)]
                if kept is None:
                    kept = set(kept_addresses.tolist())
                try:  # a tensor subclass answers through its own code: what it raises leaves the list unseen
                    if tensors:
                        graphs = any(t.grad_fn is not None for t in tensors)
                        scalars = all(t.numel() == 1 for t in tensors)
                        addresses = tuple(a for a in map(_storage_address, tensors) if a in kept)
                        made_here = bool(addresses)
                except Exception:
                    graphs = scalars = made_here = None
                    addresses = ()
            code = line[:end].strip()[:80]  # the statement, without a comment after it
            label = (f"{cells[filename]}, line {number}: {code}" if filename in cells
                     else f"{short_path(filename)}:{number}: {code}")
            distance = min(abs(number - site_line) for site_line in at)
            found.append((distance, (filename, number),
                          KeptList(label, name, value, graphs, scalars, made_here, key, loop, addresses)))
    found.sort(key=lambda f: f[0])  # the nearest the sites first
    return {key: kept_list for _, key, kept_list in found}


def _storage_address(t: Any) -> int:
    """Where a tensor's memory starts (its allocation); -1 for a tensor with no storage (sparse, nested)."""
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return -1


def list_leak(retained: int, besides: str, label: str, source: str, seen: KeptList | None,
               where: tuple[str, ...], evidence: dict[str, Any]) -> Finding:
    """The classic leak: a list that keeps tensors with their graphs; the fix in the user's own names."""
    from nbdebug.core._findings import Fix
    from nbdebug.core.knowledge import finding

    if seen is None:
        appended = _appended(source)
        seen = KeptList(label, *appended) if appended else KeptList(label, "", "")
    if not seen.name:  # a line that could not be read: say what to do, in no names the cell does not have
        return finding(
            "memory_retained",
            f"{fmt_bytes(retained)} allocated in the block is still alive after it{besides}: the line {label} keeps "
            "tensors with their autograd graphs (the activations of each step) alive; keep a number (.item()) "
            "or a detached tensor (.detach()) instead.", where, fixes=[], evidence=evidence)
    name, value = seen.name, seen.value
    number = seen.scalars if seen.scalars is not None else "loss" in value.lower()
    what = "dict" if seen.key else "list"
    verb = "keep" if seen.loop else "store" if seen.key else "append"

    def keep(v: str) -> str:
        return seen.made_as.replace("VALUE", v, 1)

    if number:  # a loss or a metric: keep the number
        advice = f"{verb} a number ({value}.item()) instead, or a detached tensor ({value}.detach())"
        fixes = [Fix("Keep numbers, not graphs", keep(f"{value}.item()")),
                 Fix("Or keep the tensor without its graph", keep(f"{value}.detach()"))]
    else:  # predictions, activations: no graph is needed to keep them
        loop = "the comprehension" if seen.loop else "the loop"
        advice = (f"run {loop} under torch.no_grad() when no backward follows, or {verb} {value}.detach() "
                  "instead")
        body = keep(value) if seen.loop else f"...\n    {keep(value)}"
        fixes = [Fix("Run inference without building a graph", f"with torch.no_grad():\n    {body}"),
                 Fix("Or keep the tensor without its graph", keep(f"{value}.detach()"))]
    graphs = "with their autograd graphs" if seen.graphs else "and each keeps its autograd graph"
    return finding(
        "memory_retained",
        f"{fmt_bytes(retained)} allocated in the block is still alive after it{besides}: the {what} {name}, filled at "
        f"{label}, keeps tensors {graphs} (the activations of each step) alive; {advice}.",
        where, fixes=fixes, evidence=evidence)
