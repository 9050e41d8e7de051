"""Text and HTML for ``CompileReport`` (torch.compile graph breaks, recompilations, recompile limit)."""

from __future__ import annotations

from nbdebug.core.compile import CompileReport
from nbdebug.render._html import esc, kv_table, panel
from nbdebug.render._registry import renders
from nbdebug.render.findings import findings_html, findings_text, panel_kind

__all__ = ["compile_text", "compile_html"]

_CLEAN = "No graph break, recompilation or recompile-limit hit."


def _head(r: CompileReport) -> list[tuple[str, object]]:
    rows: list[tuple[str, object]] = []
    if r.graph_count is not None:
        rows.append(("graphs", r.graph_count))
    rows += [("graph breaks", len(r.breaks)), ("recompilations", len(r.recompiles)),
             (f"{r.limit_name} hits", len(r.limit_hits)), (f"torch._dynamo.config.{r.limit_name}", r.limit)]
    return rows


@renders(CompileReport, "text")
def compile_text(r: CompileReport) -> str:
    """Plain-text report."""
    head = "torch.compile check: " + "; ".join(f"{k}: {v}" for k, v in _head(r))
    return head + "\n" + findings_text(r.findings, empty=_CLEAN)


@renders(CompileReport, "html")
def compile_html(r: CompileReport) -> str:
    """HTML panel."""
    # an info finding (one bounded recompilation) is no problem, but it is shown: the panel is clean only when empty
    body = (f'<div class="nbd-first">{esc(_CLEAN)}</div>' if not r.findings else findings_html(r.findings))
    return panel("torch.compile check", body + kv_table(_head(r)), kind=panel_kind(r.findings))
