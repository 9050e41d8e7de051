"""Text and HTML for ``CompileReport`` (torch.compile graph breaks, recompilations, recompile limit)."""

from __future__ import annotations

from typing import Any

from nbdebug.core.compile import CompileReport
from nbdebug.render._html import esc, kv_table, panel
from nbdebug.render._registry import renders

__all__ = ["compile_text", "compile_html"]


def _head(r: Any) -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    if r.graph_count is not None:
        rows.append(("graphs", r.graph_count))
    rows += [("graph breaks", len(r.breaks)), ("recompilations", len(r.recompiles)),
             (f"{r.limit_name} hits", len(r.limit_hits)), (f"torch._dynamo.config.{r.limit_name}", r.limit)]
    return rows


@renders(CompileReport, "text")
def compile_text(r: Any) -> str:
    """Plain-text report."""
    lines = ["torch.compile check: " + ", ".join(f"{k}={v}" for k, v in _head(r))]
    if r.ok:
        lines.append("No graph break, recompilation or recompile-limit hit.")
    for f in r.findings:
        lines.append(f"[{f.severity}] {f.kind}: {f.message}")
        if f.where:
            lines.append(f"    at {f.where}")
        lines.append(f"    fix: {f.fix}")
    return "\n".join(lines)


@renders(CompileReport, "html")
def compile_html(r: Any) -> str:
    """HTML panel."""
    parts = []
    if r.ok:
        parts.append('<div class="nbd-first">No graph break, recompilation or recompile-limit hit.</div>')
    for f in r.findings:
        where = f"<div><code>{esc(f.where)}</code></div>" if f.where else ""
        parts.append(f'<div><span class="sev-{esc(f.severity)}">{esc(f.severity)}</span> <b>{esc(f.kind)}</b>: '
                     f"{esc(f.message)}{where}<div><b>Fix:</b> {esc(f.fix)}</div></div>")
    kind = "error" if any(f.severity == "error" for f in r.findings) else "warning" if r.findings else "ok"
    return panel("torch.compile check", "".join(parts) + kv_table(_head(r)), kind=kind)
