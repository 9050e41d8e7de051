"""Which knowledge entries recognise a text: keyword gates, compiled patterns, the structure's vetoes, the choice.

Patterns are compiled once, on first use (most entries never pass their keyword test).  ``choose`` takes the root cause
among the matches: non-wrappers before wrappers, then the highest ``priority``.  ``_plausible`` drops matches whose
required context is missing or that the traceback's structure contradicts (``_guards.contradicted``).  Once an entry is
chosen, ``parse_facts`` reads its facts from the text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from nbdebug._units import parse_bytes
from nbdebug.core.explain._guards import contradicted
from nbdebug.core.explain._normalize import last_exception_line, parse_shape
from nbdebug.core.knowledge import Entry, entries
from nbdebug.core.knowledge import entry as knowledge_entry

__all__ = ["match_all", "match_frames", "choose", "plausible", "parse_facts", "by_slug", "line_at"]

# Case-sensitive on purpose: PyTorch's wording is stable in case, and IGNORECASE disables the regex engine's
# literal-prefix search (a 15 kB log took 50 ms instead of 2 ms).  Patterns that need it use (?i:...).
_FLAGS = re.MULTILINE

_CONVERTERS: dict[str, Callable[[str], Any]] = {
    "str": lambda v: v.strip(),
    "int": int,
    "bytes": parse_bytes,
    "shape": parse_shape,
    "basename": lambda v: v.rsplit("/", 1)[-1],
    "tensor_device": lambda v: "cuda" if ".cuda." in v else "cpu",
    "cuda_index": lambda v: f"cuda:{int(v)}",
}


def _line_wrap_tolerant(pattern: str) -> str:
    """Let every literal space of ``pattern`` (outside ``[...]``) also match a line break, for wrapped logs."""
    out, in_class, escaped = [], False, False
    for ch in pattern:
        if escaped:
            out.append(ch)
            escaped = False
        elif ch == "\\":
            out.append(ch)
            escaped = True
        elif ch == "[":
            in_class = True
            out.append(ch)
        elif ch == "]":
            in_class = False
            out.append(ch)
        elif ch == " " and not in_class:
            out.append(r"\s+")
        else:
            out.append(ch)
    return "".join(out)


class _Compiled:
    """An entry whose regular expressions are compiled on first use (most entries never pass the keyword test)."""

    __slots__ = ("entry", "_patterns", "_folded", "_facts", "_repeated", "_frames", "_requires")

    def __init__(self, entry: Entry) -> None:
        self.entry = entry
        self._requires: re.Pattern[str] | None = None
        self._patterns: list[re.Pattern[str]] | None = None
        self._folded: list[re.Pattern[str]] | None = None
        self._facts: list[tuple[re.Pattern[str], dict[str, str]]] | None = None
        self._repeated: list[tuple[re.Pattern[str], str, str]] | None = None
        self._frames: list[re.Pattern[str]] | None = None

    @property
    def patterns(self) -> list[re.Pattern[str]]:
        if self._patterns is None:
            self._patterns = [re.compile(p, _FLAGS) for p in self.entry.patterns]
        return self._patterns

    def allowed(self, raw: str) -> bool:
        """Whether the context this entry needs (``extra["requires"]``, a regex over the raw text) is there."""
        need = self.entry.extra.get("requires")
        if not need:
            return True
        if self._requires is None:
            self._requires = re.compile(need, _FLAGS)
        return self._requires.search(raw) is not None

    @property
    def is_warning(self) -> bool:
        """A warning that signals a bug (``extra["warning"]``): the diagnosis only when no error follows it."""
        return self.entry.extra.get("warning") == "yes"

    @property
    def frames(self) -> list[re.Pattern[str]]:
        if self._frames is None:
            self._frames = [re.compile(p, _FLAGS) for p in self.entry.frames]
        return self._frames

    @property
    def folded(self) -> list[re.Pattern[str]]:
        """The patterns ignoring case: for messages a user retyped (``cuda runtime error: out of memory``)."""
        if self._folded is None:
            self._folded = [re.compile(p, _FLAGS | re.IGNORECASE) for p in self.entry.patterns]
        return self._folded

    @property
    def facts(self) -> list[tuple[re.Pattern[str], dict[str, str]]]:
        if self._facts is None:
            tolerant = self.entry.extra.get("wrapped_lines") == "yes"
            self._facts = [(re.compile(_line_wrap_tolerant(p) if tolerant else p, _FLAGS), conv)
                           for p, conv in self.entry.facts]
        return self._facts

    @property
    def repeated(self) -> list[tuple[re.Pattern[str], str, str]]:
        if self._repeated is None:
            self._repeated = [(re.compile(p, _FLAGS), name, kind) for p, name, kind in self.entry.repeated_facts]
        return self._repeated


_COMPILED: list[_Compiled] | None = None


def _compiled() -> list[_Compiled]:
    global _COMPILED
    if _COMPILED is None:
        _COMPILED = [_Compiled(e) for e in entries("explain")]
    return _COMPILED


_BY_SLUG: dict[str, _Compiled] = {}


def by_slug(slug: str) -> _Compiled:
    """An entry by its slug: also the family-level ones that no message names (they have no patterns)."""
    if slug not in _BY_SLUG:
        _BY_SLUG[slug] = next((c for c in _compiled() if c.entry.slug == slug), None) or _Compiled(knowledge_entry(slug))
    return _BY_SLUG[slug]


def match_all(text: str, type_names: frozenset[str] = frozenset(), *, ignore_case: bool = False,
              keyword_cache: dict[str, bool] | None = None) -> list[tuple[_Compiled, re.Match[str] | None]]:
    """Every entry that recognises the (normalised) text, with its first match (None: matched by exception type).

    ``ignore_case`` matches the patterns regardless of case (slower; used only when nothing matched as written).
    ``keyword_cache`` remembers which keywords the text holds, across the passes over one text: on a 1 MB log
    each keyword costs a scan of the searched end, so it is looked for once.  Keywords and patterns are searched
    in the text's last 256,000 characters (16,000 when ignoring case): a long log's error is at its end.
    """
    start = _window_start(text, _IGNORE_CASE_WINDOW if ignore_case else _PATTERN_WINDOW)
    low = text[start:].lower()  # (a keyword seen in a wider window of an earlier pass only costs a search)
    cache = {} if keyword_cache is None else keyword_cache

    def has(keyword: str) -> bool:
        hit = cache.get(keyword)
        if hit is None:
            hit = cache[keyword] = keyword in low
        return hit

    found = []
    for c in _compiled():
        patterns = c.folded if ignore_case else c.patterns
        if type_names & set(c.entry.exception_types):
            first = next((m for p in patterns if (m := p.search(text, start))), None)
            found.append((c, first))
            continue
        if not any(has(k) for k in c.entry.keywords):
            continue
        for pattern in patterns:
            m = pattern.search(text, start)
            if m is not None:
                found.append((c, m))
                break
    return found


# the end of a text the patterns search: each pattern costs a scan of it (a leading \b defeats re's literal prefix
# search), and a 1 MB log's error is at its end (tests/test_explain_cli: a long log is read from its end); the pass
# that ignores case is for messages a person retyped, short texts
_PATTERN_WINDOW = 256_000
_IGNORE_CASE_WINDOW = 16_000


def _window_start(text: str, size: int) -> int:
    """Where the searched end of ``text`` starts: at a line's start within the last ``size`` characters (so that
    ``^`` still matches its first line), or ``size`` characters from the end when that is inside one long line."""
    if len(text) <= size:
        return 0
    cut = len(text) - size
    line = text.find("\n", cut)
    return line + 1 if 0 <= line < len(text) - 1 else cut


def match_frames(raw: str) -> tuple[list[tuple[_Compiled, re.Match[str] | None]], str]:
    """Entries whose ``frames`` regexes match the raw (unnormalised) text, and the first frame line matched."""
    if 'File "' not in raw and "compiler_fn" not in raw:
        return [], ""
    found: list[tuple[_Compiled, re.Match[str] | None]] = []
    line = ""
    for c in _compiled():
        m = next((m for p in c.frames if (m := p.search(raw))), None)
        if m is not None:
            found.append((c, None))
            line = line or line_at(raw, m.start()).strip()
    return found, line


def choose(found: list[tuple[_Compiled, re.Match[str] | None]]) -> tuple[_Compiled, re.Match[str] | None] | None:
    """The root cause among the matches: specific errors before wrappers (launchers, loaders), then priority."""
    if not found:
        return None
    return max(found, key=lambda cm: (not cm[0].entry.wrapper, cm[0].entry.priority))


def plausible(found: list[tuple[_Compiled, re.Match[str] | None]], raw: str, text: str,
              live: BaseException | None = None) -> list[tuple[_Compiled, re.Match[str] | None]]:
    """Drop matches whose required context is missing, and warnings that an error follows.

    A warning that signals a bug (``loss_broadcast``, ...) is the diagnosis of a text only when no exception
    follows it: in a traceback whose last line is an error it did not explain, the warning is background, and
    ``unknown`` is better than blaming it.
    """
    kept = [(c, m) for c, m in found if c.allowed(raw) and (c.is_warning or not contradicted(
        c.entry.slug, line_at(text, m.start()) if m is not None else "", c.patterns, raw, text, live))]
    if any(c.is_warning for c, _ in kept):
        exc_type, exc_message = last_exception_line(text)
        if exc_type and not exc_type.endswith("Warning"):
            explained = any(m is not None and exc_message and exc_message[:80] in line_at(text, m.start())
                            for c, m in kept if c.is_warning)
            if not explained:
                kept = [(c, m) for c, m in kept if not c.is_warning]
    return kept


def parse_facts(c: _Compiled, text: str) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    for pattern, converters in c.facts:
        m = pattern.search(text)
        if m is None:
            continue
        for name, raw in m.groupdict().items():
            if raw is None or name in facts:
                continue
            try:
                facts[name] = _CONVERTERS[converters.get(name, "str")](raw)
            except (ValueError, KeyError):
                continue
    for pattern, name, kind in c.repeated:
        values = pattern.findall(text)
        if not values:
            continue
        if kind == "pid_bytes":
            seen: dict[int, int] = {}
            for pid, size in values:
                try:
                    seen[int(pid)] = parse_bytes(size)
                except ValueError:  # "1.2.3 MiB", or a number too long to convert: not a fact
                    continue
            if seen:
                facts[name] = [{"pid": pid, "bytes": size} for pid, size in seen.items()]
        elif kind == "int_set":
            numbers = {int(v) for v in values if len(v) <= 18}
            if numbers:
                facts[name] = sorted(numbers)
        else:  # str_list
            facts[name] = list(dict.fromkeys(values))
    return facts


def line_at(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return text[start:end if end != -1 else len(text)].strip()[:500]
