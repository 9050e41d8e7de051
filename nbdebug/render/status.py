"""Render ``Status``."""

from __future__ import annotations

from nbdebug.core._status import Status
from nbdebug.render._html import kv_table, panel, table
from nbdebug.render._registry import renders


def _rows(s: Status) -> list[tuple[str, str]]:
    cuda = "not checked" if s.cuda_available is None else ("yes: " + ", ".join(s.cuda_devices) if s.cuda_available else "no")
    return [
        ("nbdebug", s.version),
        ("python", s.python),
        ("torch", s.torch or "not installed"),
        ("CUDA", cuda),
        ("torch_xla", s.torch_xla or "not installed (pip install 'nbdebug[xla]')"),
    ]


@renders(Status, "text")
def status_text(s: Status) -> str:
    """Plain-text status."""
    lines = [f"{k:<10} {v}" for k, v in _rows(s)]
    lines.append("features:")
    lines += [f"  {name:<10} {s.state(name):<3}  {desc}" for name, _, desc in s.features]
    lines.append("switch with: %nbdebug FEATURE on|off  (%nbdebug explain all: also unrecognised errors)")
    return "\n".join(lines)


@renders(Status, "html")
def status_html(s: Status) -> str:
    """HTML status panel."""
    body = kv_table(_rows(s)) + table(
        ("feature", "state", "what it does"), [(n, s.state(n), d) for n, _, d in s.features]
    )
    body += ('<div class="nbd-muted">switch with <code>%nbdebug FEATURE on|off</code> '
             '(<code>%nbdebug explain all</code>: also unrecognised errors)</div>')
    return panel(f"nbdebug {s.version}", body, kind="ok")
