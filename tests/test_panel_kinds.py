"""One meaning of ``ok`` and one border colour for every result that holds findings.

A panel's border says its worst finding: error red, warning amber; a remark (info) or nothing is ``ok``.  ``ok``
is True exactly when no finding is an error or a warning.  Checked on every result type that can be built from
given findings, so a renderer that picks its own colour (or a result with its own ``ok``) fails here.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from nbdebug.core import knowledge
from nbdebug.core._findings import HasFindings, Severity
from nbdebug.core.compile import CompileReport
from nbdebug.core.dist._nccl import NcclLog
from nbdebug.core.dist._types import DistRun
from nbdebug.core.doctor import DoctorReport
from nbdebug.core.training._gradhistory import GradHistory
from nbdebug.core.xla.diagnose import XlaDiagnosis
from nbdebug.render import to_html


def _xla(findings):
    return XlaDiagnosis(findings=findings, compiles=3, cache_hits=10, executions=13, steps=10, transfers_from_device=0)


def _compile(findings):
    return CompileReport(graph_count=1, graph_break_count=0, breaks=(), recompiles=(), limit_hits=(), findings=findings)


def _doctor(findings):
    return DoctorReport(findings=findings, task="classification", num_classes=3, steps=5, losses=(1.0, 0.5),
                        baseline_losses=(), initial_loss=1.1, chance_loss=1.0986, grad_flow=(("fc", 0.1),), checks=())


def _grads(findings):
    return GradHistory(steps=(1, 2), names=("w",), norms=np.ones((2, 1)), global_norms=np.ones(2), modules=("fc",),
                       module_norms=np.ones((2, 1)), findings=findings)


def _dist_run(findings):
    return DistRun(succeeded=True, nprocs=2, backend="gloo", ranks=(), findings=findings)


def _nccl(findings):
    return NcclLog(version="2.21.5", cuda_driver="", hosts=(), ranks=(), nranks=None, interfaces=(), ib_devices=(),
                   transports=(), network="", env={}, timeouts=(), findings=findings)


BUILDERS = {"xla": _xla, "compile": _compile, "doctor": _doctor, "grads": _grads, "dist run": _dist_run,
            "nccl log": _nccl}
CASES = [((), "ok"), (("info",), "ok"), (("info", "warning"), "warning"), (("warning", "error"), "error"),
         (("error", "info"), "error")]


def _border(html: str) -> str:
    m = re.search(r'<details class="nbdebug ([a-z]+)', html)
    assert m, html[:300]
    return m.group(1)


def _findings(severities):
    return tuple(knowledge.finding("recompilation", f"a {s} finding", severity=s) for s in severities)


@pytest.mark.parametrize("result", sorted(BUILDERS))
@pytest.mark.parametrize(("severities", "expected"), CASES)
def test_border_and_ok_follow_the_worst_finding(result, severities, expected):
    r = BUILDERS[result](_findings(severities))
    assert isinstance(r, HasFindings)
    assert _border(to_html(r)) == expected
    assert r.ok is (expected == "ok")
    assert r.worst == (min((Severity(s) for s in severities), key=lambda s: s.rank) if severities else None)


def test_kinds_and_finding_are_the_same_everywhere():
    info = knowledge.finding("graph_break", "a remark", severity="info")
    err = knowledge.finding("recompilation", "a problem", severity="error")
    for build in BUILDERS.values():
        r = build((err, info, err))
        assert r.kinds == ("recompilation", "graph_break")  # every kind, worst first, each once
        assert r.finding("graph_break") is info and r.finding("cannot_overfit") is None
        assert r.errors() == [err, err]


def test_a_single_info_finding_is_never_drawn_as_a_warning():
    f = knowledge.finding("recompilation", "bounded: 3 graphs for 3 bucket sizes", severity="info")
    assert _border(to_html(f)) == "info"


def test_a_remark_alone_is_shown_not_hidden_behind_a_clean_headline():
    # one bounded recompilation is an info finding: the panel is ok-coloured but lists it, and never says "clean"
    from nbdebug.render import to_text

    info = knowledge.finding("recompilation", "1 recompilation of f (bounded)", severity="info")
    r = _compile((info,))
    assert r.ok and _border(to_html(r)) == "ok"
    assert 'data-kind="recompilation"' in to_html(r) and "No graph break" not in to_html(r)
    assert "1 recompilation of f" in to_text(r)

