"""``explain(error)``: recognise an exception or a pasted log and build its ``Diagnosis``.

Steps: normalise the text (``_normalize``), find every knowledge entry searched by the explainer (``contexts``
holds ``"explain"``) whose keywords appear and whose pattern matches, choose one (``_match``: non-wrappers
before wrappers, then the highest ``priority``), parse its facts, let its analyser derive numbers and notes,
add what the exception object knows (the module whose forward raised), and fill the entry's templates.

Priorities encode "root cause before consequence": a CUDA device-side assert or OOM explains the NCCL errors
and the torchrun ``ChildFailedError`` that follow it, so those wrappers have the lowest priorities.  Summary
templates use ``{fact}`` placeholders (``{fact:bytes}`` formats a byte count); a ``[[...]]`` segment is dropped
when a fact it names is missing, so one template serves every wording era.

Every pattern must run in linear time on any line (``tests/test_patterns_redos.py``): no unbounded repeat next
to another that accepts the same characters, and a repeat that starts a pattern either follows a literal or
is anchored by a lookbehind, so that a long run of matching characters is scanned once, not once per start.
"""

from __future__ import annotations

import linecache
import re
import string
import warnings
from collections import deque
from collections.abc import Mapping
from typing import Any

from nbdebug._units import fmt_bytes
from nbdebug.core._findings import Severity
from nbdebug.core.explain import _family
from nbdebug.core.explain._analyze import ANALYSERS, relative_import_runner
from nbdebug.core.explain._build_log import claim as build_claim
from nbdebug.core.explain._build_log import detail as build_detail
from nbdebug.core.explain._build_log import setup_raised
from nbdebug.core.explain._context import (
    ddp_unused_context,
    exception_text,
    exception_type_name,
    index_context,
    module_context,
    module_layout,
)
from nbdebug.core.explain._diagnosis import Diagnosis, Fix, user_sources
from nbdebug.core.explain._family import fallback, final_class, signal_kind
from nbdebug.core.explain._live import attach
from nbdebug.core.explain._match import (  # noqa: F401 - _compiled, _line_wrap_tolerant: the tests' way in
    _compiled,
    _line_wrap_tolerant,
    by_slug,
    choose,
    line_at,
    match_all,
    match_frames,
    parse_facts,
    plausible,
)
from nbdebug.core.explain._normalize import last_exception_line, normalize, unwrap
from nbdebug.core.explain._raised_in import live_cwd_missing
from nbdebug.core.explain._sequence import child_error
from nbdebug.core.explain._structure import from_exception, read
from nbdebug.errors import InvalidArgumentError

__all__ = ["explain", "match_all", "choose", "warning_text"]

# Very long logs: the tail holds the final error and usually the root cause; keep it bounded for speed.
_MAX_CHARS = 1_000_000
# Categories where the module that raised (from the traceback) is worth naming.
# wrappers that report a child's failure after the child printed its own traceback
_LAUNCHERS = frozenset({"child_failed", "kernel_died"})
_MODULE_SLUGS = frozenset({"shape_mismatch", "shape_reported", "dtype_mismatch", "device_mismatch", "view_non_contiguous",
                           "target_out_of_bounds", "index_out_of_range", "inplace_autograd"})

# Facts that analysers write as sentences for the summary template; they are not reported as facts.
_PROSE = ("shape_detail", "prefix_explanation", "signal_meaning", "setup_detail", "broadcast_note",
          "hardware_detail", "first_step_detail", "matmul_kind", "runner", "broadcast_detail", "collate_problem")

def warning_text(message: warnings.WarningMessage) -> str:
    """A captured warning as Python prints it: ``file:line: Category: message``."""
    category = getattr(message.category, "__name__", "UserWarning")
    return f"{message.filename}:{message.lineno}: {category}: {message.message}"


class _Formatter(string.Formatter):
    def format_field(self, value: Any, format_spec: str) -> str:
        if format_spec == "bytes":
            return fmt_bytes(value)
        if isinstance(value, tuple):
            return str(list(value))
        return super().format_field(value, format_spec)


_FORMATTER = _Formatter()
# an optional segment never holds another "[[" (so a run of brackets is scanned once); a format spec no brace
_OPTIONAL = re.compile(r"\[\[((?:(?!\[\[|\]\]).)*)\]\]", re.DOTALL)
_FIELD = re.compile(r"\{(\w+)(?::[^{}]*)?\}")
_DOUBLE_STOP = re.compile(r"(?<=[^.\s])\.\.(?=\s|$)")


def _fill(template: str, values: Mapping[str, Any]) -> str:
    """Format ``template``; a ``[[...]]`` segment is dropped unless every field it names has a value."""

    def segment(m: re.Match[str]) -> str:
        body = m.group(1)
        if all(values.get(name) not in (None, "", []) for name in _FIELD.findall(body)):
            # escaped, because the whole text is formatted once more below
            return _FORMATTER.vformat(body, (), values).replace("{", "{{").replace("}", "}}")
        return ""

    text = _OPTIONAL.sub(segment, template)
    missing = [n for n in _FIELD.findall(text) if n not in values]
    if missing:  # a required field that the message did not give: keep the sentence readable
        text = _FIELD.sub(lambda m: "?" if m.group(1) in missing else m.group(0), text)
    # an optional segment that ends a sentence before the template's own full stop ("... 2.00 GiB free.]].")
    return _DOUBLE_STOP.sub(".", _FORMATTER.vformat(text, (), values).strip())


# the source line of a traceback frame: Python's ("  File "x.py", line 3, in f" then the line) or IPython's ("----> 3 ...")
_FRAME_SOURCE = re.compile(r'^[ \t]*File "[^"\n]{0,500}", line \d+, in [^\n]{0,200}\n(?P<src>[^\n]{0,1000})'
                           r"|^-{2,}> ?\d+ (?P<arrow>[^\n]{0,1000})", re.M)
_PLAIN_MATMUL = re.compile(r"@|\b(?:mm|matmul|bmm)\(")


def _matmul_kind(raw: str) -> str:
    """Where a "mat1 and mat2" error came from, by the traceback's last source line.

    ``"linear"`` (F.linear / an nn.Linear: mat2 is the layer's weight.T), ``"matmul"`` (a plain x @ w, torch.mm,
    torch.matmul), or ``""`` when the text does not show it (a message without frames, any other call).
    """
    last = next(iter(deque(_FRAME_SOURCE.finditer(raw[-_MAX_CHARS:]), maxlen=1)), None)
    if last is None:
        return ""
    src = (last.group("src") or last.group("arrow") or "").strip()
    if "linear(" in src.lower():
        return "linear"
    return "matmul" if _PLAIN_MATMUL.search(src) else ""


def _last_frame_text(exc: BaseException) -> str:
    """The innermost frame of an exception's traceback, as Python prints it (file line, then its source)."""
    tb = exc.__traceback__
    for _ in range(10_000):
        if tb is None or tb.tb_next is None:
            break
        tb = tb.tb_next
    if tb is None:
        return ""
    try:
        code = tb.tb_frame.f_code
        src = linecache.getline(code.co_filename, tb.tb_lineno).strip()
        return f'  File "{code.co_filename}", line {tb.tb_lineno}, in {code.co_name}\n    {src}\n'
    except Exception:  # a frame without a readable source
        return ""


_TYPE_PREFIX = re.compile(r"^(?:[\w.]+\.)?([A-Z]\w*(?:Error|Exception|Failed|Exceeded|Hit|Unsupported|Warning))\b")


# Where a traceback cut off before its final line still names the exception: the last ``raise X(`` source line,
# or the header IPython / Jupyter print first (``Unsupported      Traceback (most recent call last)``).
_RAISED = re.compile(
    r"^[ \t]*(?:raise (?:[A-Za-z_]\w*\.)*(?P<raised>[A-Z]\w*)\("
    r"|(?:[A-Za-z_]\w*\.)*(?P<header>[A-Z]\w*)[ \t]{3,}Traceback \(most recent call last\))",
    re.MULTILINE,
)
# Generic class names that say something only together with the module that defines them.
_QUALIFYING_MODULES = (("torch/_dynamo", "torch._dynamo.exc"), ("torch._dynamo", "torch._dynamo.exc"))


def _raised_type(raw: str) -> tuple[frozenset[str], str]:
    """The class named by the last ``raise X(`` line or traceback header of a text, and that line."""
    if "raise " not in raw and "Traceback (most" not in raw:
        return frozenset(), ""
    matches = list(_RAISED.finditer(raw))
    if not matches:
        return frozenset(), ""
    last = matches[-1]
    name = last.group("raised") or last.group("header")
    names = {name}
    for marker, module in _QUALIFYING_MODULES:
        if marker in raw:
            names.add(f"{module}.{name}")
    return frozenset(names), last.group(0).strip()


def _type_names(exc: BaseException) -> frozenset[str]:
    names: set[str] = set()
    current: BaseException | None = exc
    for _ in range(8):
        if current is None:
            break
        names.update(k.__name__ for k in type(current).__mro__)
        names.update(f"{k.__module__}.{k.__qualname__}" for k in type(current).__mro__)
        current = current.__cause__ or current.__context__
    return frozenset(names)


def explain(error: BaseException | str | warnings.WarningMessage, *, roots: Mapping[str, Any] | None = None,
            ) -> Diagnosis:
    """Explain an exception or an error text: kind, plain summary, parsed evidence, causes, fixes, first step.

    Parameters
    ----------
    error : BaseException, warnings.WarningMessage or str
        The exception object (best: its type, chain and traceback are used), a warning captured with
        ``warnings.catch_warnings(record=True)``, or text pasted from a log.
    roots : Mapping[str, nn.Module], optional
        Models by the names the user knows them (e.g. the notebook namespace), to name the module that raised
        as ``model.encoder.2`` rather than by class only.

    Returns
    -------
    Diagnosis
        ``kind`` is a stable slug (``cuda_oom``, ``shape_mismatch``, ...) or ``"unknown"``.

    Examples
    --------
    >>> explain("RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x10 and 20x5)").kind
    'shape_mismatch'
    """
    if isinstance(error, BaseException):
        raw = exception_text(error)
        type_names = _type_names(error)
        exc_type = exception_type_name(error)
    elif isinstance(error, str):
        raw, type_names, exc_type = error, frozenset(), ""
    elif isinstance(error, warnings.WarningMessage):
        raw = warning_text(error)
        category = error.category if isinstance(error.category, type) else UserWarning
        type_names, exc_type = frozenset({category.__name__}), category.__name__
    else:
        raise InvalidArgumentError(
            f"explain() takes an exception, a warnings.WarningMessage or a str, got {type(error).__name__}")
    text = normalize(raw[-_MAX_CHARS:])
    keywords: dict[str, bool] = {}
    found = match_all(text, type_names, keyword_cache=keywords)
    raise_line = ""
    if not found and not type_names:
        # A pasted traceback cut off before its final line still names the exception in the last
        # ``raise SomeError(`` source line (which normalising drops with the frame): use that class.
        raised, raise_line = _raised_type(raw[-_MAX_CHARS:])
        raised = raised or final_class(text)  # or the final line's class, when the class alone names a category
        if raised:
            found = match_all(text, raised, keyword_cache=keywords)
    if not found:
        # users retype messages in issue titles and chats: "Cuda runtime error: out of memory"
        found = match_all(text, type_names, ignore_case=True, keyword_cache=keywords)
    if not found and (unwrapped := unwrap(text)) != text:
        # a message wrapped at a terminal's or an editor's width ("compiled with different\nCUDA versions"): read as
        # one line (a fresh keyword cache: a keyword of two words may now be found)
        found = match_all(unwrapped, type_names)
        text = unwrapped if found else text
    live = error if isinstance(error, BaseException) else None
    found = plausible(found, raw[-_MAX_CHARS:], text, live)
    if isinstance(error, BaseException):  # the frames a live exception's text lacks
        found = [(c, m) for c, m in found if not _family.frames_deny(c.entry.slug, error)]
    if not found:
        # no message (or only ones the structure contradicts): a paste cut off before its error line, log lines that
        # are only frames, or a frame that says more than the message (a KeyError inside transformers' Auto mapping)
        found, frame_line = match_frames(raw[-_MAX_CHARS:])
        raise_line = frame_line or raise_line
        found = plausible(found, raw[-_MAX_CHARS:], text, live)
    chosen = choose(found)
    placed: dict[str, Any] = {}
    if chosen is None and isinstance(error, str) and (cause := build_claim(raw[-_MAX_CHARS:])) is not None:
        chosen, placed = (by_slug(cause[0]), None), cause[1]  # a build's or installer's own cause line in a pasted log
    if isinstance(error, str) and (chosen is None or chosen[0].entry.domain == "usercode") and (
            built := setup_raised(raw[-_MAX_CHARS:])) is not None:
        # a Python error raised inside pip's own build of a package: its setup.py failed, not the user's code
        chosen, placed = (by_slug("extension_build_failed"), None), built
    if (chosen is None or chosen[0].entry.wrapper) and not isinstance(error, warnings.WarningMessage):
        # no message matched (or only a wrapper's, whose text may carry the inner traceback): the traceback's
        # structure may still place the error's family
        structure = from_exception(error) if isinstance(error, BaseException) else read(raw[-_MAX_CHARS:], text)
        family = fallback(structure, raw[-_MAX_CHARS:], live=isinstance(error, BaseException))
        if family is not None and family[0] == "program_missing" and isinstance(error, BaseException) and \
                live_cwd_missing(error):
            family = None  # subprocess names the missing working directory it was given, not a program
        # an error in the user's own code behind a wrapper: the wrapper's first step leads there (num_workers=0)
        if family is not None and (chosen is None or family[0] != "user_code_error"):
            chosen, placed = (by_slug(family[0]), None), family[1]
    if chosen is not None and chosen[0].entry.slug in _LAUNCHERS and not placed and (
            child := child_error(raw[-_MAX_CHARS:])) is not None:
        # the worker's own traceback printed before the launcher's report: its error, placed or unknown, not the report
        family = fallback(child, raw[-_MAX_CHARS:], live=isinstance(error, BaseException))
        chosen, placed = ((by_slug(family[0]), None), family[1]) if family is not None else (None, {})
    if chosen is None:
        unknown = _unknown(text, exc_type)
        return attach(unknown, error, roots) if isinstance(error, BaseException) else unknown
    compiled, match = chosen
    if compiled.entry.wrapper and (died := signal_kind(parse_facts(compiled, text))) is not None:
        compiled, placed = by_slug(died[0]), died[1]  # a launcher's worker that died of a signal: its family
    entry = compiled.entry
    facts = parse_facts(compiled, text) | placed
    notes: list[str] = []
    first_fixes: list[Fix] = []
    if entry.slug == "shape_mismatch":
        facts["matmul_kind"] = _matmul_kind(_last_frame_text(error) if isinstance(error, BaseException) else raw)
    if entry.slug == "device_mismatch" and _exporter_pass(error, raw, text):
        from nbdebug.core.knowledge.cuda import EXPORT_DEVICE_STEP

        facts["first_step_detail"] = EXPORT_DEVICE_STEP  # the exporter's constant folding, not the model's forward
    if entry.slug == "relative_import_script":  # what ran it (a cell, a script): the frames, live or pasted
        frames = from_exception(error) if isinstance(error, BaseException) else read(raw[-_MAX_CHARS:], text)
        facts |= relative_import_runner(frames)
    analyse = ANALYSERS.get(entry.slug)
    if analyse is not None:
        more_notes, more_fixes = analyse(facts, text)
        notes += more_notes
        first_fixes += more_fixes
    if not facts.get("first_step_detail") and not isinstance(error, warnings.WarningMessage):
        # an install, build or load category: the log's own cause line (the compiler's first error, the header, the
        # library, the Python version) makes the first step exact; the line is kept as evidence
        facts |= {k: v for k, v in build_detail(raw[-_MAX_CHARS:], entry.slug).items() if k not in facts}
    for other, _ in found:
        if other.entry.wrapper and other is not compiled:
            facts.setdefault("reported_through", other.entry.slug)
            notes.append(f"Also in the text: {other.entry.title.lower()} — that is how the failure was reported; "
                         f"the cause diagnosed here came first.")
    # an analyser that knows better than the entry's generic first step (``first_step_detail``) replaces it
    first_step = str(facts.get("first_step_detail") or entry.first_step)
    if isinstance(error, BaseException) and entry.slug in _MODULE_SLUGS:
        module_facts, module_notes = module_context(error, roots)
        facts.update(module_facts)
        if any(n.startswith("Only if the input") for n in module_notes):  # the layer's input says it better
            notes = [n for n in notes if not n.startswith("mat1 is")]
        notes = module_notes + notes
        if "module" in module_facts and entry.slug in ("shape_mismatch", "dtype_mismatch", "device_mismatch"):
            first_step = (f"Look at {module_facts['module']} = {module_facts['module_type']}: compare what it is "
                          f"configured for with the {entry.slug.split('_')[0]} of the input it received (in the notes), "
                          "then fix that layer or the one that feeds it.")
        layout = module_layout(error) if entry.slug == "shape_mismatch" else None
        if layout is not None:
            note, fix = layout
            # the text-only guess (from "mat1 and mat2 ...") gives way to what the module's real input shows
            first_fixes = [fix] + [f for f in first_fixes if f.title != fix.title and "Transpose" not in f.title
                                   and "Flatten" not in f.title]
            notes = [n for n in notes if not n.startswith(("mat1 is", "If the batch size"))
                     and "probably not flattened" not in n]
            where = module_facts.get("module", "the layer that raised")
            first_step = f"At {where} = {module_facts.get('module_type', '?')}: {note[0].lower()}{note[1:]}"
        if entry.slug in ("target_out_of_bounds", "index_out_of_range"):
            index_facts = index_context(error)
            facts.update(index_facts)
            if "num_classes" in index_facts and "target_max" in index_facts:
                notes.insert(0, f"Labels range from {index_facts['target_min']} to {index_facts['target_max']}, but "
                                f"the output has {index_facts['num_classes']} classes: valid labels are 0.."
                                f"{index_facts['num_classes'] - 1}.")
            if "num_embeddings" in index_facts and "index_max" in index_facts:
                notes.insert(0, f"Indices go up to {index_facts['index_max']}, but the embedding has "
                                f"{index_facts['num_embeddings']} rows: valid indices are 0.."
                                f"{index_facts['num_embeddings'] - 1}.")
    if isinstance(error, BaseException) and entry.slug == "ddp_unused_parameters" and "unused_names" not in facts:
        ddp_facts, ddp_notes = ddp_unused_context(error, facts, roots)
        facts.update(ddp_facts)
        notes = ddp_notes + notes
        if ddp_facts:
            first_step = (f"Look at {ddp_facts['unused_names'].split(', ')[0]} (named in the notes): remove the layer, "
                          "freeze it before wrapping in DDP, or make its output part of the loss.")
    notes = list(dict.fromkeys(notes))  # the module's input and the message may tell the same thing
    message = line_at(text, match.start()) if match is not None else last_exception_line(text)[1] or raise_line
    if not exc_type:
        m = _TYPE_PREFIX.match(message)
        exc_type = m.group(0) if m else last_exception_line(text)[0]
    values = {k: v for k, v in facts.items() if not isinstance(v, (dict, list)) or k == "ranks"}
    for key, default in entry.extra.items():
        if key.endswith("_default"):
            values.setdefault(key.removesuffix("_default"), default)
    # fixes chosen from the numbers come first and replace the table's fix of the same title
    first_titles = {f.title for f in first_fixes}
    fixes = tuple(first_fixes + [f for f in entry.fixes if f.title not in first_titles])
    summary = _fill(entry.summary, values)
    for key in _PROSE:  # sentences built for the summary, not facts
        facts.pop(key, None)
    diagnosis = Diagnosis(
        kind=entry.slug,
        title=entry.title,
        summary=summary,
        evidence={k: (list(v) if isinstance(v, tuple) else v) for k, v in facts.items()},
        causes=entry.causes,
        fixes=fixes,
        first_step=first_step,
        exception_type=exc_type,
        message=message,
        notes=tuple(notes),
        sources=user_sources(entry.sources),
        severity=Severity.WARNING if compiled.is_warning else Severity.ERROR,
    )
    return attach(diagnosis, error, roots) if isinstance(error, BaseException) else diagnosis


def _unknown(text: str, exc_type: str) -> Diagnosis:
    found_type, found_message = last_exception_line(text)
    message = found_message or next((ln for ln in reversed(text.split("\n")) if ln.strip()), "")[:500]
    return Diagnosis(
        kind="unknown",
        title="Unrecognised error",
        summary="nbdebug has no diagnosis for this error; read the traceback from its last line upwards.",
        exception_type=exc_type or found_type,
        message=message,
    )


def _exporter_pass(error: object, raw: str, text: str) -> bool:
    """Whether the error was raised in one of torch's ONNX exporter's graph passes (live frames, or a pasted text's)."""
    from nbdebug.core.explain._machinery import in_exporter_pass

    if "_jit_pass_onnx" not in raw[-_MAX_CHARS:] and not isinstance(error, BaseException):
        return False
    return in_exporter_pass(from_exception(error) if isinstance(error, BaseException) else read(raw[-_MAX_CHARS:], text))
