"""The metrics-report parser against real reports from five torch_xla eras (tests/data/xla, each with its source)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbdebug.core.xla._units import format_bytes, format_time_ns, parse_bytes, parse_time_ns
from nbdebug.errors import ReportParseError
from nbdebug.xla import parse_report

DATA = Path(__file__).parent / "data" / "xla"
REPORTS = sorted(p for p in DATA.glob("*.txt") if "debug" not in p.name)
TIME_TOKEN = re.compile(r"(?<![\w.])(?:\d+d)?(?:\d+h)?(?:\d+m(?!s))?(?:\d+s)?(?:\d+ms)?\d+\.\d{3}us")


def test_every_saved_report_names_its_source():
    assert len(REPORTS) >= 8
    for path in REPORTS:
        first = path.read_text().splitlines()[0]
        assert first.startswith(("# source: https://", "# source: real run of tests/xla/scenarios.py")), path.name
    eras = {p.name.split("_")[0] for p in REPORTS if p.name.startswith("era")}
    assert len(eras) >= 4


# (file, layout, {metric: (total_samples, accumulator)}, {counter: value}); accumulators decoded by hand:
# e.g. 07s501ms263.438us -> 263 us < 0.5 ms keeps 501 ms; 0.501 s >= 0.5 s means 07 was rounded up from 6 -> 6.501263438
EXPECTED = [
    ("era2019_issue836.txt", "2019", {"CompileTime": (24, 6.501263438), "ExecuteTime": (1752, 424.112694219),
                                      "InboundData": (880, 3.44 * 1024)}, {}),
    ("era2020_issue2247.txt", "1.x", {"CompileTime": (4, 3.588590974), "ExecuteTime": (1121, 184.241643649)}, {}),
    ("era2020_xrt_issue2019.txt", "1.x-xrt", {"XrtCompile": (64, 590.948416998 - 61)}, {"xla::view": 22658}),
    ("era2021_xrt_issue3356.txt", "1.x", {}, {"MarkStep": 7, "UncachedCompile": 5, "XrtSessionCount": 9}),
    ("era2022_issue3339.txt", "1.x", {"TransferFromDeviceTime": (1, 0.016637749), "TensorsGraphSize": (1, 14.0)}, {}),
    ("era2023_issue5310.txt", "1.x", {"TensorsGraphSize": (74, 36299.0), "InputOutputAliasCount": (1, 214.0)}, {}),
    ("era2024_issue8059.txt", "1.x", {"LazyTracing": (3525066, 46.351512571)}, {}),
    ("xla29_healthy.txt", "2.x", {}, {"MarkStep": 6}),
]


@pytest.mark.parametrize("name,layout,metrics,counters", EXPECTED, ids=[e[0] for e in EXPECTED])
def test_real_reports(name, layout, metrics, counters):
    report = parse_report((DATA / name).read_text())
    assert report.layout == layout
    for metric, (samples, acc) in metrics.items():
        m = report.metric(metric)
        assert m is not None, metric
        assert m.total_samples == samples
        assert m.accumulator == pytest.approx(acc, rel=1e-9)
    for counter, value in counters.items():
        assert report.counter(counter) == value


def test_xrt_server_block_mean_stddev_and_25_percentile():
    report = parse_report((DATA / "era2020_xrt_issue2019.txt").read_text())
    m = report.metric("XrtCompile")
    assert m.section == "server"
    # 08s280ms444.016us: 280.444 ms < 0.5 s so the seconds are not rounded up
    assert m.mean == pytest.approx(8.280444016)
    # 16s800ms825.434us: 825 us >= 0.5 ms so 800 ms was 799; 0.799 s >= 0.5 s so 16 s was 15
    assert m.stddev == pytest.approx(15.799825434)
    assert [p for p, _ in m.percentiles] == [25, 50, 80, 90, 95, 99]


@pytest.mark.parametrize("path", REPORTS, ids=[p.name for p in REPORTS])
def test_decoded_percentiles_are_monotonic(path):
    # percentiles are sorted samples; the printed (rounded) strings are not always, the decoded values must be
    for m in parse_report(path.read_text()).metrics:
        values = [v for _, v in m.percentiles if not math.isnan(v)]
        assert values == sorted(values), (path.name, m.name, values)


@pytest.mark.parametrize("path", REPORTS, ids=[p.name for p in REPORTS])
def test_time_strings_reencode_byte_for_byte(path):
    text = path.read_text()
    checked = 0
    for token in TIME_TOKEN.findall(text):
        if re.search(r"ms\d{1,2}\.\d{3}us$", token):  # 2019 unpadded microseconds: not torch_xla's current width
            continue
        assert format_time_ns(parse_time_ns(token)) == token
        checked += 1
    assert checked or not TIME_TOKEN.findall(text)


@pytest.mark.parametrize(
    "text,seconds",
    [
        ("02s504ms627.218us", 1.503627218),  # the example: 503.6 ms rounds the seconds up
        ("07m60s991ms747.685us", 419.990747685),  # pytorch/xla#2655: a 60 s field (6 min 59.99 s)
        ("01m18s777ms389.875us", 77.777389875),
        ("805ms572.619us", 0.804572619),  # 2.9 CompileTime whose metric_data() value is 804572619 ns
        ("000.089us", 89e-9),
        ("191ms81.607us", 0.191081607),  # 2019 width
        ("02h42m54s489ms109.977us", 3600 + 41 * 60 + 54.489109977),  # 54 s >= 30 s: 42 m and 02 h rounded up
    ],
)
def test_time_decoding(text, seconds):
    assert parse_time_ns(text) / 1e9 == pytest.approx(seconds, abs=1e-12)


@given(st.integers(min_value=0, max_value=3 * 86400 * 10**9))
def test_time_roundtrip(ns):
    assert parse_time_ns(format_time_ns(float(ns))) == pytest.approx(ns, abs=1.0)


@pytest.mark.parametrize("text,value", [("4.00B", 4), ("1.50KB", 1536), ("468.00MB", 468 * 2**20), ("3.80GB", 3.8 * 2**30)])
def test_bytes_are_1024_based(text, value):
    assert parse_bytes(text) == pytest.approx(value)
    assert format_bytes(value) == text


def test_nan_bytes_in_empty_xrt_metric():
    text = "Metric: XrtExecutorEvict\n  TotalSamples: 0\n  Accumulator: nanB\n  Mean: nanB\n  StdDev: nanB\n  Percentiles: \n"
    m = parse_report(text).metric("XrtExecutorEvict")
    assert m.total_samples == 0 and math.isnan(m.accumulator) and m.percentiles == ()


def test_renamed_metrics_are_read_under_their_current_name():
    report = parse_report((DATA / "era2022_issue3339.txt").read_text())
    assert report.metric("TransferFromServerTime") is report.metric("TransferFromDeviceTime")
    assert report.metric("TransferFromDeviceTime").raw_name == "TransferFromServerTime"
    assert report.transfers_from_device == 1


def test_two_sections_of_a_29_report():
    report = parse_report((DATA / "xla29_healthy.txt").read_text())
    sections = {m.name: m.section for m in report.metrics}
    assert sections["TensorsGraphSize"] == "lazy" and sections["CompileTime"] == "runtime"
    assert {c.name: c.section for c in report.counters}["MarkStep"] == "runtime"


def test_short_report():
    report = parse_report((DATA / "xla29_short.txt").read_text())
    assert report.layout == "short"
    assert report.compiles >= 1 and report.steps >= 1


def test_metrics_file_with_several_reports():
    one = (DATA / "xla29_healthy.txt").read_text()
    two = (DATA / "xla29_variable_length.txt").read_text()
    report = parse_report(f"[MetricsData; step=1]\n{one}\n[MetricsData; step=2]\n{two}\n")
    assert report.saved_step == 2 and len(report.history) == 1
    assert report.compiles == parse_report(two).compiles


def test_to_pandas_one_row_per_entry():
    report = parse_report((DATA / "xla29_healthy.txt").read_text())
    df = report.to_pandas()
    assert len(df) == len(report.metrics) + len(report.counters)
    row = df[df.name == "CompileTime"].iloc[0]
    assert row.total_samples == report.metric("CompileTime").total_samples and row.unit == "s"
    assert "p50" in df.columns


@pytest.mark.parametrize("text", ["", "hello\nworld", "Traceback (most recent call last):\n  boom", "Counter: X\n  Value: abc\n"])
def test_non_reports_raise(text):
    with pytest.raises(ReportParseError, match="metrics report"):
        parse_report(text)


def test_non_string_raises():
    with pytest.raises(ReportParseError, match="expects the report text"):
        parse_report(b"Metric: x")  # type: ignore[arg-type]
