"""The one findings renderer: a tuple of ``Finding`` (from any capability) as text and as an HTML table."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nbdebug._units import fmt_bytes
from nbdebug.core._findings import Finding, Severity, sort_findings, worst_severity
from nbdebug.render._html import code_block, esc, severity_badge
from nbdebug.render._registry import renders

__all__ = ["findings_text", "findings_html", "finding_text", "finding_html", "panel_kind", "evidence_words"]


def panel_kind(findings: Iterable[Finding], *, empty: str = "ok") -> str:
    """The one severity-to-colour rule for a panel's border.

    ``"error"`` or ``"warning"`` from the worst finding; ``empty`` (``"ok"`` unless given) when there is none or
    only ``info`` remarks, which are no problem.
    """
    worst = worst_severity(f for f in findings if f.severity is not Severity.INFO)
    return worst.value if worst is not None else empty

_MAX_WHERE = 6


def _where(f: Finding) -> str:
    # a site's line is shown as one run of words: its code's alignment spaces ("x = f(y)        # note") say nothing
    shown = ", ".join(" ".join(w.split()) for w in f.where[:_MAX_WHERE])
    return shown + (f", ... ({len(f.where) - _MAX_WHERE} more)" if len(f.where) > _MAX_WHERE else "")


def _value_words(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) and (key.endswith("bytes") or key in ("bytes", "size")):
        return fmt_bytes(value)
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, (list, tuple)):
        return " x ".join(str(v) for v in value) if key.endswith("shape") else ", ".join(str(v) for v in value)
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    return str(value)


def evidence_words(evidence: Mapping[str, Any], *, said: str = "") -> str:
    """A finding's evidence as words a person reads: ``retained bytes: 3.07 MiB; compiles: 6``.

    Never the ``key=value`` dump of its dictionary (which ``to_dict()`` keeps for programs); a text value the
    finding's message (``said``) already quotes is not repeated.
    """
    parts = []
    for key, value in evidence.items():
        if value is None or value == "" or value == () or value == []:
            continue
        if isinstance(value, str) and len(value) > 3 and value in said:
            continue
        words = key.replace("_", " ").strip()
        parts.append(f"{words}: {_value_words(key, value)}")
    return "; ".join(parts)


@renders(Finding, "text")
def finding_text(f: Finding) -> str:
    """One finding: severity, kind, where, message, then its fixes and evidence indented."""
    where = f" [{_where(f)}]" if f.where else ""
    out = [f"{f.severity.value.upper():<7} {f.kind}{where}: {f.message}"]
    for fix in f.fixes:
        out.append(f"    fix: {fix.title}")
        out += [f"         {line}" for line in fix.code.splitlines()]
    evidence = evidence_words(f.evidence, said=f.message)
    if evidence:
        out.append("    evidence: " + evidence)
    return "\n".join(out)


def findings_text(findings: Sequence[Finding], *, empty: str = "no findings") -> str:
    """Findings, worst first, one block each."""
    if not findings:
        return empty
    return "\n".join(finding_text(f) for f in sort_findings(findings))


def _row(f: Finding) -> str:
    # The fixes get a row of their own, across the table, so that their code is never squeezed into a narrow
    # column (and broken mid-identifier); alignment and the severity's colour are inline too, as an untrusted
    # notebook or GitHub keeps inline styles but drops the panel's stylesheet.
    where = _where(f)
    fixes = "".join(f"<li>{esc(x.title)}{code_block(x.code) if x.code else ''}</li>" for x in f.fixes)
    evidence = evidence_words(f.evidence, said=f.message)
    left = ' style="text-align:left;vertical-align:top"'
    row = (
        f'<tr class="nbd-finding" data-kind="{esc(f.kind)}" data-severity="{esc(f.severity.value)}">'
        f"<td{left}>{severity_badge(f.severity.value)}</td>"
        f"<td{left}><code>{esc(f.kind)}</code></td><td{left}>{esc(f.message)}"
        + (f'<div class="nbd-muted">in: <code>{esc(where)}</code></div>' if where else "")
        + (f'<div class="nbd-muted">{esc(evidence)}</div>' if evidence else "")
        + "</td></tr>"
    )
    if fixes:
        row += (f'<tr class="nbd-fixrow" data-kind="{esc(f.kind)}"><td{left}></td>'
                f'<td colspan="2"{left}><ul class="nbd-fixes">{fixes}</ul></td></tr>')
    return row


def findings_html(findings: Sequence[Finding], *, empty: str = "no findings") -> str:
    """A findings table, worst first: severity, kind, what (with where and evidence); the fixes below each."""
    if not findings:
        return f'<div class="nbd-muted">{esc(empty)}</div>'
    rows = "".join(_row(f) for f in sort_findings(findings))
    left = ' style="text-align:left"'
    head = f"<tr><th{left}>severity</th><th{left}>kind</th><th{left}>what, and how to fix it</th></tr>"
    return f'<table class="nbd-findings"><thead>{head}</thead><tbody>{rows}</tbody></table>'


@renders(Finding, "html")
def finding_html(f: Finding) -> str:
    """One finding as a one-row findings table inside a panel."""
    from nbdebug.render._html import panel

    return panel(f"nbdebug · {f.title or f.kind}", findings_html([f]), kind=f.severity.value)
