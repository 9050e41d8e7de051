"""The post-mortem at the file boundary (issue 25): what a file is, where it points, how big it is, and numbers
read from files that must not size a loop or a container.

Each case runs in a child process with a wall-clock timeout and, where memory could run away, an address-space
limit set in that child only; nothing a test starts outlives it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LIMIT_AS = 1536 << 20  # 1.5 GiB: far above what any of these folders needs, far below what the old code took

CHILD = """
import json, resource, sys
limit = int(sys.argv[2])
if limit:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from nbdebug.dist import postmortem
pm = postmortem(sys.argv[1])
print(json.dumps({"world": pm.world_size, "seq": pm.divergence.seq if pm.divergence else None,
                  "missing": list(pm.divergence.missing) if pm.divergence else None,
                  "mismatches": [m.seq for m in pm.mismatches], "notes": list(pm.notes), "ranks": len(pm.ranks),
                  "gaps": list(pm.missing), "primary": pm.primary_rank,
                  "text": str(pm), "html": pm._repr_html_(), "json": json.dumps(pm.to_dict())}))
"""


def _postmortem(folder: Path, *, timeout: float = 30, limit: int = LIMIT_AS) -> dict:
    """``postmortem(folder)`` in a child process: its result as a dict, or a test failure on a hang or a crash."""
    try:
        out = subprocess.run([sys.executable, "-c", CHILD, str(folder), str(limit)], capture_output=True, text=True,
                             timeout=timeout, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    except subprocess.TimeoutExpired:  # run() kills the child before raising
        pytest.fail(f"postmortem({folder}) did not finish within {timeout} s")
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _dump(seqs: list[int], ops: list[str] | None = None) -> str:
    """A Flight Recorder dump as ``_dump_fr_trace_json`` writes it, one all_reduce per sequence id."""
    ops = ops or ["gloo:all_reduce"] * len(seqs)
    return json.dumps({"pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}, "entries": [
        {"collective_seq_id": s, "p2p_seq_id": 0, "is_p2p": False, "profiling_name": op,
         "process_group": ["0", "default_pg"], "input_sizes": [[4]], "input_dtypes": ["Float"],
         "output_sizes": [[4]], "state": "completed", "time_created_ns": 1, "frames": []}
        for s, op in zip(seqs, ops)]})


def _error_log(rank: int) -> str:
    return (f"[rank{rank}]: Traceback (most recent call last):\n"
            f"[rank{rank}]:   File \"train.py\", line 3, in <module>\n[rank{rank}]: ValueError: boom\n")


# -- numbers from files ------------------------------------------------------------------------------------------

@pytest.mark.timeout(90)
def test_sequence_ids_spanning_10_18_are_not_looped_over(tmp_path: Path) -> None:
    (tmp_path / "fr_rank_0").write_text(_dump([1]))
    (tmp_path / "fr_rank_1").write_text(_dump([1, 10**18]))
    res = _postmortem(tmp_path)
    assert res["seq"] == 2 and res["missing"] == [0]


@pytest.mark.timeout(90)
def test_mismatches_are_found_among_the_ids_that_exist(tmp_path: Path) -> None:
    # both ranks hold 5 and 10**18, with another op at 10**18: found without walking the span between them
    (tmp_path / "fr_rank_0").write_text(_dump([5, 10**18], ["gloo:all_reduce", "gloo:broadcast"]))
    (tmp_path / "fr_rank_1").write_text(_dump([5, 10**18]))
    res = _postmortem(tmp_path)
    assert res["mismatches"] == [10**18]


@pytest.mark.timeout(90)
def test_a_huge_rank_number_in_a_log_sizes_nothing(tmp_path: Path) -> None:
    (tmp_path / "fr_rank_0").write_text(_dump([1]))
    (tmp_path / "rank_1.log").write_text("[rank9999999]: hello\n")
    # the old code built a set of range(10**7): over a gigabyte; the post-mortem itself needs a few dozen MiB
    res = _postmortem(tmp_path, timeout=20, limit=512 << 20)
    assert res["world"] == 10_000_000
    assert res["ranks"] == 2  # one row per rank seen, not ten million
    assert any("1-9999999" in g for g in res["gaps"])


# -- what a file is and where it points --------------------------------------------------------------------------

@pytest.mark.timeout(90)
def test_a_symlink_out_of_the_folder_is_not_quoted(tmp_path: Path) -> None:
    secret = tmp_path / "elsewhere" / "private.log"
    secret.parent.mkdir()
    secret.write_text(_error_log(2).replace("ValueError: boom", "RuntimeError: SECRET token=hunter2"))
    secret.chmod(0o600)
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank0.log").write_text(_error_log(0))
    (job / "rank_2.log").symlink_to(secret)
    res = _postmortem(job)
    for shown in (res["text"], res["html"], res["json"]):
        assert "SECRET" not in shown and "hunter2" not in shown
    assert any("rank_2.log" in n and "points out of the folder" in n for n in res["notes"]), res["notes"]
    assert res["primary"] == 0


@pytest.mark.timeout(90)
def test_a_symlink_inside_the_folder_is_followed(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "real.log").write_text(_error_log(1))
    (tmp_path / "rank1.log").symlink_to(tmp_path / "logs" / "real.log")
    (tmp_path / "rank0.log").write_text("[rank0]: hello\n")
    res = _postmortem(tmp_path)
    assert res["primary"] == 1


@pytest.mark.timeout(90)
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_named_like_a_rank_log_does_not_block(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "rank_0.log")
    (tmp_path / "rank1.log").write_text(_error_log(1))
    res = _postmortem(tmp_path, timeout=20)
    assert res["primary"] == 1
    assert any("rank_0.log" in n and "FIFO" in n for n in res["notes"]), res["notes"]


@pytest.mark.timeout(90)
@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero here")
def test_a_link_to_dev_zero_ends_in_bounded_memory(tmp_path: Path) -> None:
    (tmp_path / "rank_0.log").symlink_to("/dev/zero")
    (tmp_path / "rank1.log").write_text(_error_log(1))
    res = _postmortem(tmp_path, timeout=20)
    assert res["primary"] == 1
    assert any("rank_0.log" in n for n in res["notes"]), res["notes"]


@pytest.mark.timeout(90)
def test_a_device_named_directly_is_refused_with_a_note(tmp_path: Path) -> None:
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero here")
    (tmp_path / "rank1.log").write_text(_error_log(1))
    code = textwrap.dedent(f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, ({LIMIT_AS}, {LIMIT_AS}))
        from nbdebug.dist import postmortem
        pm = postmortem(["/dev/zero", {str(tmp_path / "rank1.log")!r}])
        assert pm.primary_rank == 1 and any("/dev/zero" in n for n in pm.notes), pm.notes
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-3000:]


@pytest.mark.timeout(90)
def test_a_symlink_loop_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "a.log").symlink_to(tmp_path / "b.log")
    (tmp_path / "b.log").symlink_to(tmp_path / "a.log")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "up").symlink_to(tmp_path)  # a folder loop, inside the folder
    (tmp_path / "rank1.log").write_text(_error_log(1))
    res = _postmortem(tmp_path, timeout=20)
    assert res["primary"] == 1
    for name in ("a.log", "b.log"):
        assert any(n.startswith(str(tmp_path / name)) and n.split(": ", 1)[1].startswith("skipped")
                   for n in res["notes"]), res["notes"]


# -- reading speed -----------------------------------------------------------------------------------------------

@pytest.mark.timeout(120)
def test_blank_lines_and_short_lines_read_in_linear_time(tmp_path: Path) -> None:
    # 32 MiB of blank lines after a header, and 32 MiB of short prefixed lines: about 2.5 s here, where the old
    # code took about 24 s (a per-line scan for every kind of artifact); a whole-text search that crosses newlines
    # would be quadratic in the blank ones
    (tmp_path / "rank0.log").write_text("# nbdebug: rank 0 of 2 (local rank 0) host h pid 1\n" + "\n" * (32 << 20))
    (tmp_path / "rank1.log").write_text("[rank1]: x\n" * ((32 << 20) // 11) + _error_log(1))
    res = _postmortem(tmp_path, timeout=12)
    assert res["primary"] == 1
