"""The one findings renderer: a tuple of ``Finding`` (from any capability) as text and as an HTML table."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from nbdebug.core._findings import Finding, Severity, sort_findings, worst_severity
from nbdebug.render._html import code_block, esc
from nbdebug.render._registry import renders

__all__ = ["findings_text", "findings_html", "finding_text", "finding_html", "panel_kind"]


def panel_kind(findings: Iterable[Finding], *, empty: str = "ok") -> str:
    """The one severity-to-colour rule for a panel's border.

    ``"error"`` or ``"warning"`` from the worst finding; ``empty`` (``"ok"`` unless given) when there is none or
    only ``info`` remarks, which are no problem.
    """
    worst = worst_severity(f for f in findings if f.severity is not Severity.INFO)
    return worst.value if worst is not None else empty

_MAX_WHERE = 6


def _where(f: Finding) -> str:
    shown = ", ".join(f.where[:_MAX_WHERE])
    return shown + (f", ... ({len(f.where) - _MAX_WHERE} more)" if len(f.where) > _MAX_WHERE else "")


@renders(Finding, "text")
def finding_text(f: Finding) -> str:
    """One finding: severity, kind, where, message, then its fixes and evidence indented."""
    where = f" [{_where(f)}]" if f.where else ""
    out = [f"{f.severity.value.upper():<7} {f.kind}{where}: {f.message}"]
    for fix in f.fixes:
        out.append(f"    fix: {fix.title}")
        out += [f"         {line}" for line in fix.code.splitlines()]
    if f.evidence:
        out.append("    evidence: " + ", ".join(f"{k}={v}" for k, v in f.evidence.items()))
    return "\n".join(out)


def findings_text(findings: Sequence[Finding], *, empty: str = "no findings") -> str:
    """Findings, worst first, one block each."""
    if not findings:
        return empty
    return "\n".join(finding_text(f) for f in sort_findings(findings))


def _row(f: Finding) -> str:
    where = _where(f)
    fixes = "".join(
        f"<li>{esc(x.title)}{code_block(x.code) if x.code else ''}</li>" for x in f.fixes
    )
    evidence = ", ".join(f"{esc(k)}={esc(v)}" for k, v in f.evidence.items())
    return (
        f'<tr class="nbd-finding" data-kind="{esc(f.kind)}" data-severity="{esc(f.severity.value)}">'
        f'<td class="sev-{esc(f.severity.value)}">{esc(f.severity.value)}</td>'
        f"<td><code>{esc(f.kind)}</code></td><td>{esc(f.message)}"
        + (f'<div class="nbd-muted">in: <code>{esc(where)}</code></div>' if where else "")
        + (f'<div class="nbd-muted">{evidence}</div>' if evidence else "")
        + f'</td><td><ul class="nbd-fixes">{fixes}</ul></td></tr>'
    )


def findings_html(findings: Sequence[Finding], *, empty: str = "no findings") -> str:
    """A findings table, worst first: severity, kind, what (with where and evidence), fixes."""
    if not findings:
        return f'<div class="nbd-muted">{esc(empty)}</div>'
    rows = "".join(_row(f) for f in sort_findings(findings))
    head = "<tr><th>severity</th><th>kind</th><th>what</th><th>fixes</th></tr>"
    return f'<table class="nbd-findings"><thead>{head}</thead><tbody>{rows}</tbody></table>'


@renders(Finding, "html")
def finding_html(f: Finding) -> str:
    """One finding as a one-row findings table inside a panel."""
    from nbdebug.render._html import panel

    return panel(f"nbdebug · {f.title or f.kind}", findings_html([f]), kind=f.severity.value)
