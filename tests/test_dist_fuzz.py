"""Fuzzing the distributed readers: torchelastic error files, NCCL logs, Flight Recorder dumps, stack dumps and
rank logs, mutated from real ones (nbdebug/examples/dist) and generated.  Each example must end, within a time
bound, in a result or a documented ``NbdebugError`` subclass; nothing else may escape, nothing may run.

Fixed example budget (``derandomize=True``): the whole module runs in well under 20 s of CI."""

from __future__ import annotations

import json
import pickle
import shutil
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbdebug import examples
from nbdebug.dist import parse_nccl_log, postmortem
from nbdebug.errors import DistUsageError, ReportParseError
from nbdebug.render import to_html, to_text

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
BOUND_S = 5.0  # per example, for inputs of at most a few hundred kB (real ones take milliseconds)
CRASH = examples.folder("dist/postmortem_crash")
HANG = examples.folder("dist/postmortem_hang")
NCCL_LOGS = [examples.path(n).read_text() for n in examples.names("dist")]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
TEMPLATES = (
    "[Rank {n}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={n}, OpType=ALLREDUCE, NumelIn={n}, "
    "NumelOut={n}, Timeout(ms)={n}) ran for {n} milliseconds before timing out.",
    "host:{n}:{n} [{n}] NCCL INFO comm 0x1 rank {n} nranks {n} cudaDev 0 busId 1000 - Init COMPLETE",
    "[rank{n}]: Traceback (most recent call last):\n[rank{n}]:   File \"t.py\", line {n}, in <module>",
    '  File "/x/train.py", line {n} in <module>',
    "  rank      : {n} (local_rank: {n})\n  exitcode  : -{n} (pid: {n})",
    "# nbdebug: rank {n} of {n} (local rank {n}) host h pid {n} time 1.0",
)
nasty_text = st.one_of(
    st.builds(lambda t, d, k: t.replace("{n}", d * k), st.sampled_from(TEMPLATES), st.sampled_from(["9", "0", "²"]),
              st.sampled_from([1, 3, 40, 4301, 6000])),
    st.text(max_size=200),
    st.builds(lambda d, n: d * n, st.sampled_from(["9", "0", "²", "[rank1]:", "Thread 0x", " ", "a" * 7, "\x00"]),
              st.integers(1, 20_000)),
)


def _postmortem_of(files: dict[str, bytes]) -> None:
    """Write ``files`` to a fresh folder and post-mortem it: a result (rendered) or DistUsageError, in time."""
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in files.items():
            (Path(tmp) / name).write_bytes(data)
        t0 = time.perf_counter()
        try:
            pm = postmortem(tmp)
            to_text(pm)
            to_html(pm)
            json.dumps(pm.to_dict())
        except DistUsageError:
            pass
        assert time.perf_counter() - t0 < BOUND_S


def _folder(src: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in src.iterdir()}


def _mutate(data: bytes, draw) -> bytes:
    blob = bytearray(data)
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "dup"]))
        pos = draw(st.integers(0, max(len(blob) - 1, 0)))
        if kind == "flip" and blob:
            blob[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "cut":
            del blob[pos:pos + draw(st.integers(1, 64))]
        elif kind == "insert":
            blob[pos:pos] = draw(st.binary(min_size=1, max_size=32))
        else:
            blob[pos:pos] = blob[pos:pos + draw(st.integers(1, 256))] * draw(st.integers(1, 200))
    return bytes(blob)


@SETTINGS
@given(data=st.data())
def test_error_files_mutated_from_real_ones(data):
    files = _folder(CRASH)
    name = data.draw(st.sampled_from(sorted(n for n in files if n.endswith(".json"))))
    files[name] = _mutate(files[name], data.draw)
    _postmortem_of(files)


@SETTINGS
@given(doc=st.dictionaries(st.sampled_from(["message", "nbdebug", "extraInfo", "x"]), json_values, max_size=3),
       inner=st.dictionaries(st.sampled_from(["message", "extraInfo", "py_callstack", "timestamp"]), json_values,
                             max_size=4),
       text=nasty_text)
def test_error_files_generated(doc, inner, text):
    inner = {**inner, "extraInfo": {"py_callstack": text, "timestamp": inner.get("timestamp")}}
    files = {"error_rank3.json": json.dumps({**doc, "message": inner}).encode(),
             "error_rank9.json": json.dumps(doc).encode()}
    _postmortem_of(files)


@SETTINGS
@given(data=st.data())
def test_nccl_logs_mutated_and_generated(data):
    base = data.draw(st.sampled_from(NCCL_LOGS))
    text = _mutate(base.encode(), data.draw).decode("utf-8", errors="replace")
    text += data.draw(nasty_text)
    t0 = time.perf_counter()
    try:
        log = parse_nccl_log(text)
        to_text(log)
    except ReportParseError:
        pass
    assert time.perf_counter() - t0 < BOUND_S
    _postmortem_of({"nccl_host_1.log": text.encode(), "rank0.log": ("[rank0]:" + text[:5000]).encode()})


@SETTINGS
@given(data=st.data())
def test_flight_recorder_dumps_mutated(data):
    files = _folder(HANG)
    name = data.draw(st.sampled_from(sorted(n for n in files if n.startswith("fr_rank_"))))
    files[name] = _mutate(files[name], data.draw)
    _postmortem_of(files)


@SETTINGS
@given(entries=st.lists(st.dictionaries(
           st.sampled_from(["collective_seq_id", "profiling_name", "input_sizes", "input_dtypes", "process_group",
                            "frames", "is_p2p", "time_created_ns", "state"]), json_values, max_size=9), max_size=6),
       cfg=json_values)
def test_flight_recorder_dumps_generated(entries, cfg):
    doc = {"version": "2.10", "pg_config": cfg, "entries": entries}
    _postmortem_of({"fr_rank_0": pickle.dumps(doc), "fr_rank_1": pickle.dumps({**doc, "entries": entries[:1]})})


@SETTINGS
@given(data=st.data())
def test_stack_dumps_and_rank_logs_mutated(data):
    files = _folder(HANG)
    name = data.draw(st.sampled_from(sorted(n for n in files if n.endswith((".txt", ".log")))))
    files[name] = _mutate(files[name], data.draw) + data.draw(nasty_text).encode("utf-8", errors="replace")
    _postmortem_of(files)


def test_the_real_folders_are_read_whole():
    # the fuzzed bases themselves: the mutations start from folders that give the right answer
    assert postmortem(HANG).divergence.missing == (1,)
    assert postmortem(CRASH).primary_rank == 1


def test_a_large_flight_recorder_list_is_not_turned_into_one_string(tmp_path):
    # a list shared many levels deep (x = [x, x]) would be 2**26 items if flattened: it must stay cheap
    x: list = [1]
    for _ in range(26):
        x = [x, x]
    doc = {"pg_config": {}, "entries": [{"collective_seq_id": 1, "profiling_name": "gloo:all_reduce", "input_sizes": x,
                                         "frames": [{"filename": x, "line": x, "name": x}]}]}
    (tmp_path / "fr_rank_0").write_bytes(pickle.dumps(doc))
    shutil.copy(CRASH / "error_rank1.json", tmp_path)
    t0 = time.perf_counter()
    pm = postmortem(tmp_path)
    assert time.perf_counter() - t0 < BOUND_S
    assert pm.primary_rank == 1
