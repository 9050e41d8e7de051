"""Render a ``Diagnosis`` as plain text (terminal IPython, CLI) and as a compact collapsible HTML panel."""

from __future__ import annotations

import re

from nbdebug.core.explain._diagnosis import Diagnosis, Section, user_sources
from nbdebug.render._html import code_block, esc, fmt_bytes, kv_table, panel, table
from nbdebug.render._registry import renders

# facts that hold a number of bytes (OOM figures): shown as "32.00 MiB (33554432)"
_BYTE_FACTS = frozenset({
    "tried_to_allocate", "total_capacity", "free", "process_memory", "allocated_by_pytorch",
    "reserved_by_pytorch", "reserved_but_unallocated", "non_pytorch_memory",
})


# facts whose name does not read well as words (the rest: "tried_to_allocate" -> "Tried to allocate")
_LABELS = {
    "module": "Module (its place in the model)", "module_type": "Module type",
    "module_input_shapes": "Shapes the module received", "module_weight_shape": "The module's weight shape",
    "left_shape": "Left operand shape", "right_shape": "Right operand shape", "num_classes": "Number of classes",
    "target_min": "Smallest label", "target_max": "Largest label", "index_min": "Smallest index",
    "index_max": "Largest index", "num_embeddings": "Embedding rows", "reported_through": "Reported through",
    "non_pytorch_memory": "Memory outside PyTorch's allocator", "other_processes": "Other processes on the GPU",
    "unused_names": "Parameters without a gradient", "exitcode": "Exit code", "signal_name": "Signal",
    "exc_type": "Exception", "where": "Raised at", "user_where": "Your call",
}
_MD_CODE = re.compile(r"`([^`\n]{1,300})`")


def fact_label(key: str) -> str:
    """A fact's name as a person reads it: ``module_input_shapes`` -> "Shapes the module received"."""
    if key in _LABELS:
        return _LABELS[key]
    words = key.replace("_", " ").strip()
    return words[:1].upper() + words[1:]


def _fact_value(value: object, key: str = "") -> str:
    if isinstance(value, int) and not isinstance(value, bool) and (key in _BYTE_FACTS or key.endswith("_bytes")):
        return f"{fmt_bytes(value)} ({value})"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_fact_value(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, dict) for v in value):
        return "; ".join(_fact_value(v) for v in value)
    return str(value)


def md(text: str) -> str:
    """Escaped HTML of a knowledge text, with its Markdown inline code (`x`) rendered as code."""
    return _MD_CODE.sub(lambda m: f"<code>{m.group(1)}</code>", esc(text))


def _plain(text: str) -> str:
    """A knowledge text for a terminal: inline-code backticks dropped."""
    return _MD_CODE.sub(lambda m: m.group(1), text)


def section_text(s: Section) -> str:
    """A section as plain text: paragraph, facts, table, fixes, notes (an HTML-only section: one line)."""
    if s.html_only:
        return "  %tb prints it (library frames were folded above)"
    out: list[str] = [s.text] if s.text else []
    out += [f"  {fact_label(k)}: {_fact_value(v, k)}" for k, v in s.facts]
    if s.header or s.rows:
        widths = [max([len(str(c)) for c in col] or [0]) for col in zip(s.header, *s.rows)] if s.header else []
        for row in ((s.header,) if s.header else ()) + s.rows:
            out.append("  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths or [0] * len(row))).rstrip())
    for i, fix in enumerate(s.fixes, 1):
        out.append(f"  fix {i}. {fix.title}")
        out += [f"       {line}" for line in fix.code.splitlines()]
    out += [f"  note: {_plain(n)}" for n in s.notes]
    if s.preformatted:
        out.append(s.preformatted)
    return "\n".join(out)


def section_html(s: Section) -> str:
    """A section as HTML: paragraph, facts table, table, fixes, notes."""
    parts = [f"<div>{md(s.text)}</div>"] if s.text else []
    if s.facts:
        parts.append(kv_table((fact_label(k), _fact_value(v, k)) for k, v in s.facts))
    if s.header or s.rows:
        parts.append(table(s.header, s.rows))
    if s.fixes:
        parts.append("<ol>" + "".join(
            f"<li>{esc(f.title)}{code_block(f.code) if f.code else ''}</li>" for f in s.fixes) + "</ol>")
    parts += [f'<div class="nbd-muted">{md(n)}</div>' for n in s.notes]
    if s.preformatted:
        parts.append(code_block(s.preformatted))
    return "".join(parts)


def _sections_text(d: Diagnosis) -> list[str]:
    out: list[str] = []
    for section in d.sections:
        out += ["", f"{section.title}:", section_text(section)]
    return out


@renders(Diagnosis, "text")
def diagnosis_text(d: Diagnosis) -> str:
    """The full plain-text report."""
    if not d.known:
        head = (f"nbdebug: no known diagnosis for {d.exception_type or 'this error'}"
                + (f": {d.message}" if d.message else ""))
        if d.live is None:
            return head + "\n(an honest 'unknown' rather than a wrong guess; the traceback above is the place to look)"
        first = ["", f"First step: {_plain(d.first_step)}"] if d.first_step else []  # a live check's, measured
        return "\n".join([head, "", d.summary, *first, *_sections_text(d)])
    kind = " warning" if d.severity == "warning" else ""
    out = [f"nbdebug{kind} [{d.kind}] {d.title}", "", _plain(d.summary)]
    if d.evidence:
        out += ["", "Facts:"] + [f"  {fact_label(k)}: {_fact_value(v, k)}" for k, v in d.evidence.items()]
    if d.notes:
        out += ["", "Here:"] + [f"  - {_plain(n)}" for n in d.notes]
    if d.causes:
        out += ["", "Likely causes (most likely first):"] + [f"  {i}. {_plain(c)}" for i, c in enumerate(d.causes, 1)]
    if d.fixes:
        out += ["", "Fixes:"]
        for i, fix in enumerate(d.fixes, 1):
            out.append(f"  {i}. {fix.title}")
            out += [f"       {line}" for line in fix.code.splitlines()]
    out += _sections_text(d)
    if d.first_step:
        out += ["", f"First step: {_plain(d.first_step)}"]
    sources = user_sources(d.sources)
    if sources:
        out += ["", "Sources: " + "; ".join(sources)]
    return "\n".join(out)


def _section_block(section: Section) -> str:
    attr = " open" if section.open else ""
    return f"<details{attr}><summary><b>{esc(section.title)}</b></summary>{section_html(section)}</details>"


@renders(Diagnosis, "html")
def diagnosis_html(d: Diagnosis) -> str:
    """A compact panel: summary, first step and facts open; causes and fixes one click away."""
    if not d.known:
        if d.live is None:
            body = '<div class="nbd-muted">No known diagnosis; the traceback above is the place to look.</div>'
            return panel(f"nbdebug: unrecognised {d.exception_type or 'error'}", body, kind="info", open_=False)
        first = f'<div class="nbd-first"><b>First step:</b> {md(d.first_step)}</div>' if d.first_step else ""
        body = f"<div>{md(d.summary)}</div>{first}" + "".join(_section_block(s) for s in d.sections)
        return panel(f"nbdebug · what we know about this {d.exception_type or 'error'}", body, kind="info",
                     css_class="nbd-diagnosis")
    if d.severity == "warning":
        return _warning_html(d)
    parts = [f"<div>{md(d.summary)}</div>"]
    if d.first_step:
        parts.append(f'<div class="nbd-first"><b>First step:</b> {md(d.first_step)}</div>')
    if d.notes:
        parts.append("<ul>" + "".join(f"<li>{md(n)}</li>" for n in d.notes) + "</ul>")
    if d.evidence:
        parts.append("<h4>Facts</h4>" + kv_table((fact_label(k), _fact_value(v, k)) for k, v in d.evidence.items()))
    if d.causes:
        items = "".join(f"<li>{md(c)}</li>" for c in d.causes)
        parts.append(f"<details open><summary><b>Likely causes</b></summary><ol>{items}</ol></details>")
    if d.fixes:
        fixes = "".join(
            f"<li>{esc(f.title)}{code_block(f.code) if f.code else ''}</li>" for f in d.fixes
        )
        parts.append(f"<details><summary><b>Fixes ({len(d.fixes)})</b></summary><ol>{fixes}</ol></details>")
    parts += [_section_block(section) for section in d.sections]
    sources = user_sources(d.sources)
    if sources:
        links = "; ".join(f'<a href="{esc(u)}" target="_blank" rel="noopener">{esc(u)}</a>' for u in sources)
        parts.append(f'<div class="nbd-muted">Sources: {links}</div>')
    return panel(f"nbdebug · {d.title}  [{d.kind}]", "".join(parts), kind="error", css_class="nbd-diagnosis")


def _warning_html(d: Diagnosis) -> str:
    """The compact panel of a warning that signals a bug: what it means and the first step; the rest folded."""
    parts = [f"<div>{md(d.summary)}</div>"]
    if d.first_step:
        parts.append(f'<div class="nbd-first"><b>First step:</b> {md(d.first_step)}</div>')
    if d.notes:
        parts.append("<ul>" + "".join(f"<li>{md(n)}</li>" for n in d.notes) + "</ul>")
    folded = []
    if d.causes:
        folded.append("<h4>Likely causes</h4><ol>" + "".join(f"<li>{md(c)}</li>" for c in d.causes) + "</ol>")
    if d.fixes:
        folded.append("<h4>Fixes</h4><ol>" + "".join(
            f"<li>{esc(f.title)}{code_block(f.code) if f.code else ''}</li>" for f in d.fixes) + "</ol>")
    if d.evidence:
        folded.append("<h4>Facts</h4>" + kv_table((fact_label(k), _fact_value(v, k)) for k, v in d.evidence.items()))
    sources = user_sources(d.sources)
    if sources:
        links = "; ".join(f'<a href="{esc(u)}" target="_blank" rel="noopener">{esc(u)}</a>' for u in sources)
        folded.append(f'<div class="nbd-muted">Sources: {links}</div>')
    if folded:
        parts.append(f"<details><summary><b>Causes and fixes</b></summary>{''.join(folded)}</details>")
    parts.append('<div class="nbd-muted">Shown once per warning site; <code>%nbdebug warnings off</code> stops '
                 "these panels.</div>")
    return panel(f"nbdebug · warning · {d.title}  [{d.kind}]", "".join(parts), kind="warning",
                 css_class="nbd-diagnosis nbd-warning-panel")
