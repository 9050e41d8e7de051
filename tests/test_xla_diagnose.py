"""diagnose() against the real reports and debug logs of the torch_xla 2.9 scenarios (tests/xla/scenarios.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nbdebug.core import knowledge
from nbdebug.core._findings import Finding
from nbdebug.core.xla.diagnose import fallback_entry
from nbdebug.errors import ReportParseError
from nbdebug.xla import diagnose, parse_debug_log, parse_report

DATA = Path(__file__).parent / "data" / "xla"
REPO = Path(__file__).resolve().parents[1]

from tests.xla.scenarios import EXPECTED  # noqa: E402 - one table for unit and integration tests


def _fixes(f: Finding) -> str:
    """Every fix of a finding, titles and code, as one text."""
    return "\n".join(str(x) for x in f.fixes)

CASES = [(name, src) for name in EXPECTED for src in ("R", "RD", "D")]


def _diagnose(name: str, src: str):
    report = (DATA / f"xla29_{name}.txt").read_text()
    log = (DATA / f"xla29_{name}.debug.txt").read_text()
    if src == "R":
        return diagnose(report)
    if src == "RD":
        return diagnose(report, debug_log=log)
    return diagnose(None, debug_log=log)


@pytest.mark.parametrize("name,src", CASES, ids=[f"{n}-{s}" for n, s in CASES])
def test_real_scenarios(name, src):
    d = _diagnose(name, src)
    problems = {f.kind: f.severity for f in d.findings if f.severity != "info"}
    assert problems == EXPECTED[name][src], str(d)
    for f in d.findings:
        assert isinstance(f, Finding) and f.message and f.title and isinstance(f.evidence, dict)
        assert f.fixes or f.severity == "info"


@pytest.mark.parametrize("name,line_text", [
    ("item_and_print", "loss.item() > 100"),
    ("item_and_print", 'print(f"step {step} loss {loss}")'),
    ("missing_sync", "loss.item()"),
    ("variable_length", "txla.sync()"),
    ("short_last_batch", "txla.sync()"),
])
def test_debug_log_maps_findings_to_user_lines(name, line_text):
    d = _diagnose(name, "RD")
    source = (REPO / "tests" / "xla" / "scenarios.py").read_text().splitlines()
    lines = [loc for f in d.findings if f.severity != "info" for loc in f.where]
    assert lines, str(d)
    numbers = {int(loc.split(" in ")[0].rsplit(":", 1)[1]) for loc in lines}
    assert any(line_text in source[n - 1] for n in numbers), (lines, line_text)


def test_per_step_timeline_from_debug_log_shows_the_late_compile():
    d = _diagnose("short_last_batch", "RD")
    per = [s.compiles for s in d.per_step]
    assert per[-1] >= 1 and not any(per[2:-1])
    assert "drop_last=True" in _fixes(d.finding("recompilation"))


def test_steps_default_to_markstep_and_can_be_given():
    text = (DATA / "xla29_healthy.txt").read_text()
    assert diagnose(text).steps == parse_report(text).steps == 6
    assert diagnose(text, steps=3).steps == 3


def test_missing_sync_is_an_error_when_the_caller_says_it_looped():
    d = diagnose((DATA / "xla29_missing_sync.txt").read_text(), steps=6)
    assert d.finding("missing_sync").severity == "error"


def test_fallback_finding_names_ops_with_specific_fixes():
    d = _diagnose("boolean_mask", "R")
    f = d.finding("cpu_fallback")
    assert "aten::nonzero" in f.message and "torch.where" in _fixes(f)
    assert f.fixes[0].title.startswith("aten::nonzero: ")  # the op's own fixes come first
    assert f.evidence["fallback_ops"]["aten::nonzero"] == d.fallback_ops["aten::nonzero"] > 0
    assert "_local_scalar_dense" not in json.dumps(d.fallback_ops)


def test_old_report_diagnosis_uses_markstep_and_uncached_compile():
    # fairseq on 1.10 (pytorch/xla#3356): 5 compiles in 7 steps, no cache hits -> recompilation
    d = diagnose((DATA / "era2021_xrt_issue3356.txt").read_text())
    assert d.steps == 7 and d.compiles == 5
    assert d.finding("recompilation").severity in ("error", "warning")


def test_old_debug_log_wording_is_understood():
    log = parse_debug_log((DATA / "debug2024_issue6614.txt").read_text())
    (event,) = log.events
    assert event.kind == "compile" and event.is_host_read and event.n_inputs == 229
    assert event.user_frame.file.endswith("image_transformer_v2.py") and event.user_frame.line == 196


def test_neither_report_nor_log():
    with pytest.raises(ReportParseError, match="neither"):
        diagnose(None)


def test_json_and_pandas():
    d = _diagnose("item_and_print", "RD")
    data = json.loads(json.dumps(d.to_dict()))
    assert {"findings", "compiles", "cache_hits", "executions", "steps", "transfers_from_device", "fallback_ops"} <= set(data)
    assert data["findings"][0]["kind"] == "host_sync" and data["findings"][0]["severity"] == "warning"
    assert data["findings"][0]["fixes"][0]["code"] and isinstance(data["findings"][0]["where"], list)
    assert len(d.to_pandas()) == len(d.findings)


def test_render_text_and_html_escape():
    d = _diagnose("boolean_mask", "RD")
    text = str(d)
    assert "cpu_fallback" in text and "fix:" in text
    html = d._repr_mimebundle_()["text/html"]
    assert "aten::nonzero" in html and "<script" not in html
    assert "No problem found" in str(_diagnose("healthy", "RD"))
    assert "<MetricsReport:" in repr(parse_report((DATA / "xla29_healthy.txt").read_text()))
    assert "CompileTime" in parse_report((DATA / "xla29_healthy.txt").read_text())._repr_html_()


# --- knowledge tables: every entry is used and sourced ---------------------------------------------------


FALLBACK_ENTRIES = knowledge.entries("xla_fallback")


@pytest.mark.parametrize("entry", FALLBACK_ENTRIES, ids=[e.slug for e in FALLBACK_ENTRIES])
def test_fallback_table_entries(entry):
    assert entry.domain == "xla" and entry.fixes and entry.summary
    assert all(s.startswith("https://") for s in entry.sources)


@pytest.mark.parametrize("op,slug", [
    ("aten::nonzero", "xla_fallback_nonzero"),
    ("aten::masked_select", "xla_fallback_masked_select"),
    ("aten::_unique2", "xla_fallback_unique"),
    ("aten::unique_dim", "xla_fallback_unique"),
    ("aten::_fft_r2c", "xla_fallback_fft"),
    ("aten::median.dim_values", "xla_fallback_median"),
    ("aten::_local_scalar_dense", None),
    ("xla::nonzero", None),
])
def test_fallback_ops_find_their_entry(op, slug):
    e = fallback_entry(op)
    assert (e.slug if e else None) == slug


def test_fallback_table_covers_the_ops_seen_on_29():
    for name in ("boolean_mask", "fft_fallback"):
        for op in parse_report((DATA / f"xla29_{name}.txt").read_text()).fallback_ops:
            assert fallback_entry(op) is not None, op


@pytest.mark.parametrize("name", sorted(knowledge.thresholds("xla")))
def test_thresholds_have_reasons(name):
    t = knowledge.thresholds("xla")[name]
    assert t.value > 0 and t.why and t.source.startswith("https://")


@pytest.mark.parametrize("kind", ["recompilation", "host_sync", "cpu_fallback", "missing_sync"])
def test_every_kind_is_a_knowledge_entry_with_fixes(kind):
    e = knowledge.entry(kind)
    assert e.domain == "xla" and e.fixes and e.title and e.sources
    assert all(s.startswith("https://") for s in e.sources)


# --- CLI ----------------------------------------------------------------------------------------------------


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "nbdebug", "xla", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=60)


def test_cli_json():
    proc = _cli(str(DATA / "xla29_short_last_batch.txt"), "--debug-log", str(DATA / "xla29_short_last_batch.debug.txt"),
                "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["steps"] == 6 and data["compiles"] == 3
    assert [f["kind"] for f in data["findings"]] == ["recompilation"]
    assert set(data["findings"][0]) >= {"kind", "severity", "message", "evidence", "fixes", "where", "title"}


def test_cli_text_and_steps():
    proc = _cli(str(DATA / "xla29_missing_sync.txt"), "--steps", "6")
    assert proc.returncode == 0 and "ERROR   missing_sync" in proc.stdout


def test_cli_bad_input():
    proc = _cli(str(DATA / "nope.txt"))
    assert proc.returncode == 1 and "cannot read" in proc.stderr
    proc = _cli(str(REPO / "pyproject.toml"))
    assert proc.returncode == 1 and "not a torch_xla metrics report" in proc.stderr


@pytest.mark.parametrize("name", ["era2019_issue836.txt", "era2020_issue2247.txt"])
def test_excerpt_without_counters_is_not_called_a_missing_sync(name):
    d = diagnose((DATA / name).read_text())
    assert d.findings == () and any("no Counter blocks" in n for n in d.notes)
    # the caller can supply the step count: 4 compiles over 1121 executions then read as healthy
    assert diagnose((DATA / name).read_text(), steps=1000).ok


@pytest.mark.parametrize("cause,kind,versions", __import__("nbdebug.core.xla.debuglog", fromlist=["CAUSES"]).CAUSES)
def test_every_cause_line_is_classified(cause, kind, versions):
    from nbdebug.core.xla.debuglog import cause_kind

    assert cause_kind(cause) == kind
    block = ("Execution Analysis: " + "=" * 80 + "\nExecution Analysis: Execution Cause\n"
             f"Execution Analysis:   {cause}\nExecution Analysis: " + "-" * 80 + "\n")
    (event,) = parse_debug_log(block).events
    assert event.is_sync == (kind == "step") and event.is_host_read == (kind == "read")


def test_causes_seen_in_real_29_logs_are_in_the_table():
    from nbdebug.core.xla.debuglog import CAUSES

    known = {c for c, _, _ in CAUSES}
    seen = {e.cause for p in DATA.glob("xla29_*.debug.txt") for e in parse_debug_log(p.read_text()).events}
    assert seen and seen <= known


def test_xla_metrics_file_gives_a_timeline():
    # XLA_METRICS_FILE appends a report per sync: the differences show the compile at the last step
    text = (DATA / "xla29_short_last_batch.metricsfile.txt").read_text()
    report = parse_report(text)
    assert report.saved_step == 5 and len(report.history) == 5
    d = diagnose(text)
    assert [s.compiles for s in d.per_step] == [1, 1, 0, 0, 0, 1]
    assert d.finding("recompilation").severity == "warning" and "short last batch" in d.finding("recompilation").message


def test_debug_log_is_a_result_with_text_and_html():
    log = parse_debug_log((DATA / "xla29_short_last_batch.debug.txt").read_text())
    assert repr(log) == f"<DebugLog: 3 compiles, 6 executions, 6 steps, {len(log.profiler)} profiler lines>"
    text = str(log)
    assert text.startswith("torch_xla debug log: compiles=3, executions=6, steps=6")
    assert "scenarios.py:77 in short_last_batch" in text
    bundle = log._repr_mimebundle_()
    assert "Compilations and executions" in bundle["text/html"] and "your line" in bundle["text/html"]
    data = json.loads(json.dumps(log.to_dict()))
    assert len(data["events"]) == 9 and data["events"][0]["frames"]
    rows = log.to_pandas()
    assert len(rows) == 9 and list(rows["kind"][:2]) == ["compile", "execute"]


def test_a_folder_named_nbdebug_is_not_nbdebug():
    """The user's scripts in a clone of this repository (a folder named nbdebug) are the user's lines; nbdebug's
    own package files are library wherever it is installed (a CI clone lost the user's line to this)."""
    from nbdebug.core.xla.debuglog import is_library_file

    for user in ("/tmp/ci/nbdebug/tests/xla/scenarios.py", "/home/u/nbdebug/notebooks/train.py",
                 "/home/u/proj/train.py"):
        assert not is_library_file(user), user
    for own in ("/home/u/nbdebug/nbdebug/xla.py", "/home/u/nbdebug/nbdebug/core/xla/watch.py",
                "/v/lib/python3.11/site-packages/nbdebug/xla.py", "C:\\u\\nbdebug\\nbdebug\\core\\x.py",
                "/v/site-packages/torch_xla/core/xla_model.py"):
        assert is_library_file(own), own
