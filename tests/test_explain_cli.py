"""``python -m nbdebug explain`` in a subprocess: the JSON contract other tools rely on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "data" / "errors"


def _run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "nbdebug", "explain", *args], input=stdin, capture_output=True,
                          text=True, env=env, timeout=120, cwd=REPO)


@pytest.mark.parametrize("name", ["cuda_oom__v23_expandable_16417", "state_dict_keys__module_prefix",
                                  "unknown__json_rich_box_grafana"])
def test_json_contract_from_file(name):
    proc = _run(str(CORPUS / f"{name}.txt"), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["kind"] == name.split("__")[0]
    for key, kind in {"kind": str, "title": str, "summary": str, "evidence": dict, "fixes": list,
                      "first_step": str}.items():
        assert isinstance(data[key], kind), key
    assert all(isinstance(f["title"], str) and isinstance(f["code"], str) for f in data["fixes"])
    if data["kind"] != "unknown":
        assert data["fixes"] and data["first_step"]


def test_stdin_and_text_output():
    text = (CORPUS / "nccl_timeout__old_format_ofa.txt").read_text()
    proc = _run("-", stdin=text)
    assert proc.returncode == 0, proc.stderr
    assert "[nccl_timeout]" in proc.stdout and "First step:" in proc.stdout
    proc = _run("--json", stdin=text)
    assert json.loads(proc.stdout)["evidence"]["timeout_ms"] == 1800000


def test_missing_file_is_one_clear_error(tmp_path):
    missing = tmp_path / "nope.log"
    proc = _run(str(missing))
    assert proc.returncode == 1
    assert str(missing) in proc.stderr and "expected a text file" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_long_log_is_read_from_its_end(tmp_path):
    """A log far over explain()'s 1,000,000-character window: only its end is read, and its last error found."""
    log = tmp_path / "job.log"
    error = (CORPUS / "nccl_timeout__old_format_ofa.txt").read_text()
    with open(log, "w", encoding="utf-8") as fh:
        fh.write("RuntimeError: CUDA error: device-side assert triggered\n")  # far before the window
        fh.write("step 12 loss 0.123 é\r\n" * 250_000)
        fh.write(error)
    assert log.stat().st_size > 5_000_000
    proc = _run(str(log), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["kind"] == "nccl_timeout"
    proc = _run("--json", stdin=log.read_text(encoding="utf-8"))
    assert json.loads(proc.stdout)["kind"] == "nccl_timeout"


def test_read_text_keeps_the_tail_and_translates_newlines(tmp_path, monkeypatch):
    import io

    from nbdebug.cli._io import read_text

    path = tmp_path / "a.txt"
    path.write_bytes(b"first\r\nsecond\rthird\n")
    assert read_text(str(path), "a text") == "first\nsecond\nthird\n"
    assert read_text(str(path), "a text", tail_bytes=6) == "third\n"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"x" * 3_000_000 + b"END")))
    assert read_text("-", "a text", tail_bytes=10) == "xxxxxxxEND"
