"""Fuzzing the torch_xla readers with mutated real reports and debug logs (issue 15).

Every mutation of a real metrics report or ``PT_XLA_DEBUG`` log gives a result (parsed, diagnosed and rendered)
or a ``ReportParseError``; nothing else escapes, and no input takes long.  The mutations are the ones that broke
the readers before: numbers made huge or written in non-ASCII digits, lines cut, repeated, shuffled or spliced
from another report, bytes flipped, headers duplicated.  The example budget is fixed and derandomised, so CI
runs the same examples each time.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbdebug.errors import NbdebugError, ReportParseError
from nbdebug.render import to_html, to_text
from nbdebug.xla import diagnose, parse_debug_log, parse_report

DATA = Path(__file__).parent / "data" / "xla"
REPORTS = sorted(p for p in DATA.glob("*.txt") if not p.name.endswith(".debug.txt"))
LOGS = sorted(DATA.glob("*.debug.txt"))
TEXTS = {p.name: p.read_text() for p in REPORTS + LOGS}
SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# A generous bound: a mutated input of a few KB is read in milliseconds; seconds means a pathological path.
TIME_BOUND_S = 3.0

NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")
WEIRD_NUMBERS = [
    "9" * 400, "1" + "0" * 5000, "\u00b2", "\u0664\u0660", "\uff11\uff12", "-0", "1e309", "inf", "nan", "-1",
    "0" * 50, "4294967296", "18446744073709551616", "3.", ".5", "1_000",
]
JUNK = ["", " ", "\t", "\x00", "\ufffd", "\u202e", "Metric: ", "Counter: ", "  Value: ", "[MetricsData; step=",
        "Compilation Analysis: ", "Number of Graph Inputs: ", "  TotalSamples: ", "Percentiles: 1%=",
        "Accumulator: ", "Rate: ", "us", "ms", "GB", "%=", "=" * 200, "x" * 10_000]


def _mutate(text: str, data: st.DataObject, other: str) -> str:
    lines = text.splitlines(keepends=True)
    for _ in range(data.draw(st.integers(1, 5), label="mutations")):
        kind = data.draw(st.sampled_from(["number", "drop", "repeat", "swap", "splice", "flip", "junk", "cut"]),
                         label="kind")
        if not lines:
            lines = [data.draw(st.sampled_from(JUNK), label="junk") + "\n"]
            continue
        i = data.draw(st.integers(0, len(lines) - 1), label="line")
        if kind == "number":
            numbers = list(NUMBER.finditer(lines[i]))
            if numbers:
                m = numbers[data.draw(st.integers(0, len(numbers) - 1), label="which")]
                new = data.draw(st.sampled_from(WEIRD_NUMBERS), label="number")
                lines[i] = lines[i][:m.start()] + new + lines[i][m.end():]
        elif kind == "drop":
            del lines[i]
        elif kind == "repeat":
            lines[i:i] = [lines[i]] * data.draw(st.integers(1, 50), label="times")
        elif kind == "swap":
            j = data.draw(st.integers(0, len(lines) - 1), label="other line")
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "splice":
            others = other.splitlines(keepends=True)
            if others:
                j = data.draw(st.integers(0, len(others) - 1), label="spliced")
                lines[i:i] = others[j:j + data.draw(st.integers(1, 20), label="span")]
        elif kind == "flip":
            line = lines[i]
            if line:
                k = data.draw(st.integers(0, len(line) - 1), label="char")
                char = data.draw(st.characters(codec="utf-8"), label="new char")
                lines[i] = line[:k] + char + line[k + 1:]
        elif kind == "junk":
            pos = data.draw(st.integers(0, len(lines[i])), label="pos")
            junk = data.draw(st.sampled_from(JUNK), label="junk")
            lines[i] = lines[i][:pos] + junk + lines[i][pos:]
        else:
            cut = data.draw(st.integers(0, len(text)), label="cut at")
            return "".join(lines)[:cut]
    return "".join(lines)


def _timed(fn, *args, **kwargs):
    start = time.perf_counter()
    try:
        return fn(*args, **kwargs)
    finally:
        elapsed = time.perf_counter() - start
        assert elapsed < TIME_BOUND_S, f"{fn.__name__} took {elapsed:.1f} s"


@SETTINGS
@given(name=st.sampled_from([p.name for p in REPORTS]), other=st.sampled_from(sorted(TEXTS)), data=st.data())
def test_a_mutated_report_is_diagnosed_or_refused(name, other, data):
    text = _mutate(TEXTS[name], data, TEXTS[other])
    try:
        result = _timed(diagnose, text)
    except ReportParseError as exc:
        assert str(exc)  # one clear message
        return
    _timed(to_text, result)
    _timed(to_html, result)
    result.to_dict()


@SETTINGS
@given(name=st.sampled_from([p.name for p in LOGS]), other=st.sampled_from(sorted(TEXTS)), data=st.data())
def test_a_mutated_debug_log_is_read_or_refused(name, other, data):
    text = _mutate(TEXTS[name], data, TEXTS[other])
    try:
        log = _timed(parse_debug_log, text)
    except NbdebugError as exc:
        assert str(exc)
        return
    for event in log.events:
        assert event.n_inputs is None or 0 <= event.n_inputs < 10**12
        assert all(0 <= f.line < 10**9 for f in event.frames)
    report = TEXTS[name.replace(".debug.txt", ".txt")] if name.replace(".debug.txt", ".txt") in TEXTS else None
    if report is not None:
        result = _timed(diagnose, report, debug_log=log)
        _timed(to_html, result)


@SETTINGS
@given(data=st.binary(max_size=4096))
def test_arbitrary_bytes_decoded_any_way(data):
    text = data.decode("utf-8", errors="replace")
    for reader in (parse_report, diagnose):
        try:
            _timed(reader, text)
        except ReportParseError:
            pass
    _timed(parse_debug_log, text)


def test_the_mutator_really_breaks_reports():
    """The suite is only worth something if mutations reach the error paths: some must be refused."""
    refused = []

    @settings(max_examples=60, deadline=None, derandomize=True, database=None)
    @given(data=st.data())
    def probe(data):
        text = _mutate(TEXTS["xla29_healthy.txt"], data, TEXTS["xla29_healthy.txt"])
        try:
            parse_report(text)
        except ReportParseError:
            refused.append(text)

    probe()
    assert refused
