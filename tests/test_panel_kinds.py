"""A panel's border says its worst finding: error red, warning amber, info blue (or ok), nothing green."""

from __future__ import annotations

import re

import pytest

from nbdebug.core import knowledge
from nbdebug.core.xla.diagnose import XlaDiagnosis
from nbdebug.render import to_html


def _kind(html: str) -> str:
    m = re.search(r'<details class="nbdebug ([a-z]+)', html)
    assert m, html[:300]
    return m.group(1)


@pytest.mark.parametrize(("severities", "expected"), [
    ((), {"ok"}), (("info",), {"ok", "info"}), (("info", "warning"), {"warning"}), (("warning", "error"), {"error"}),
])
def test_xla_panel_border_follows_the_worst_finding(severities, expected):
    findings = tuple(knowledge.finding("recompilation", f"{s} finding", severity=s) for s in severities)
    d = XlaDiagnosis(findings=findings, compiles=3, cache_hits=10, executions=13, steps=10, transfers_from_device=0)
    assert _kind(to_html(d)) in expected


def test_a_single_info_finding_is_never_drawn_as_a_warning():
    f = knowledge.finding("recompilation", "bounded: 3 graphs for 3 bucket sizes", severity="info")
    assert _kind(to_html(f)) == "info"
