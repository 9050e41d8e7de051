"""nbdebug/_files.py: the one layer every read and write goes through, on the filesystem's awkward cases."""

from __future__ import annotations

import os
import threading

import pytest

from nbdebug._files import Skipped, folder_files, open_append, read_bytes, read_text, write_file
from nbdebug.errors import NbdebugError


def test_a_fifo_is_refused_at_once_not_waited_on(tmp_path):
    fifo = tmp_path / "rank_0.log"
    os.mkfifo(fifo)
    done = []
    t = threading.Thread(target=lambda: done.append(pytest.raises(NbdebugError, read_text, fifo, "a log")))
    t.start()
    t.join(timeout=10)
    assert done and "FIFO" in str(done[0].value) and "a log" in str(done[0].value)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero on this system")
def test_a_device_is_refused():
    with pytest.raises(NbdebugError, match="character device, not a regular file; expected a report"):
        read_bytes("/dev/zero", "a report")


def test_reads_are_capped_from_the_start_or_the_end(tmp_path):
    f = tmp_path / "big.txt"
    f.write_bytes(b"a" * 1000 + b"END")
    assert read_bytes(f, "x", cap=10) == b"a" * 10
    assert read_bytes(f, "x", cap=5, tail=True) == b"aaEND"
    assert read_text(f, "x") == "a" * 1000 + "END"


def test_text_is_decoded_once_with_universal_newlines(tmp_path):
    f = tmp_path / "t.txt"
    f.write_bytes(b"a\r\nb\rc\xff\n")
    assert read_text(f, "x") == "a\nb\nc\ufffd\n"


def test_a_missing_file_or_a_folder_is_one_clear_error(tmp_path):
    with pytest.raises(NbdebugError, match=r"cannot read .*nope.*expected a snapshot"):
        read_bytes(tmp_path / "nope", "a snapshot")
    with pytest.raises(NbdebugError, match="a folder, not a regular file"):
        read_bytes(tmp_path, "a snapshot")


def test_a_symlink_is_refused_where_it_must_not_be_followed(tmp_path):
    (tmp_path / "real").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert read_text(tmp_path / "link", "x") == "x"
    with pytest.raises(NbdebugError, match="symlink"):
        read_text(tmp_path / "link", "x", follow=False)


def test_folder_files_stay_inside_the_folder(tmp_path):
    outside = tmp_path / "secret.txt"
    outside.write_text("RuntimeError: SECRET")
    job = tmp_path / "job"
    (job / "sub").mkdir(parents=True)
    (job / "rank_0.log").write_text("ok")
    (job / "sub" / "rank_1.log").write_text("ok")
    (job / "rank_2.log").symlink_to(outside)  # out of the folder
    (job / "inside.log").symlink_to(job / "rank_0.log")  # stays inside
    (job / "loop").symlink_to(job / "loop")
    (job / "up").symlink_to(job)  # a folder loop
    os.mkfifo(job / "rank_3.log")
    skipped: list[Skipped] = []
    files = list(folder_files(job, skipped=skipped))
    names = sorted(os.path.relpath(f, job) for f in files)
    assert names == ["inside.log", "rank_0.log", os.path.join("sub", "rank_1.log")]
    why = {os.path.basename(s.path): s.why for s in skipped}
    assert "out of the folder" in why["rank_2.log"] and "FIFO" in why["rank_3.log"] and "loop" in why
    assert not any("secret" in f for f in files)


def test_folder_files_stop_at_the_limit_and_say_so(tmp_path):
    for i in range(5):
        (tmp_path / f"f{i}").write_text("x")
    skipped: list[Skipped] = []
    assert len(list(folder_files(tmp_path, limit=3, skipped=skipped))) == 3
    assert len(skipped) == 1 and "more than 3 files" in skipped[0].why


def test_writing_replaces_a_planted_symlink_instead_of_writing_through_it(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    planted = tmp_path / "error.json"
    planted.symlink_to(victim)
    write_file(planted, '{"message": "boom"}')
    assert victim.read_text() == "keep me"
    assert not planted.is_symlink() and planted.read_text() == '{"message": "boom"}'
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_appending_never_goes_through_a_symlink(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "stacks.txt").symlink_to(victim)
    with pytest.raises(OSError):
        open_append(tmp_path / "stacks.txt")
    with open_append(tmp_path / "log.txt") as fh:
        fh.write("a\n")
    with open_append(tmp_path / "log.txt") as fh:
        fh.write("b\n")
    assert (tmp_path / "log.txt").read_text() == "a\nb\n" and victim.read_text() == "keep me"
