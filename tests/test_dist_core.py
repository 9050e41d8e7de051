"""The pure parts of nbdebug's distributed support: error classification, stack parsing and grouping, the
cross-rank comparisons, shipping names to the ranks, and rendering.  No process is started here."""

from __future__ import annotations

import dataclasses
import textwrap
import threading
from pathlib import Path

import pytest

from nbdebug.core import knowledge
from nbdebug.core.dist._checks import compare_batches, compare_fingerprints, step_report
from nbdebug.core.dist._failures import classify, explain_detail_mismatch, meaning, signal_name
from nbdebug.core.dist._hang import analyze_hang, collective_of, parse_faulthandler, parse_pyspy, user_frame
from nbdebug.core.dist._ship import ship
from nbdebug.errors import DistUsageError

DATA = Path(__file__).parent / "data" / "dist"

# Real error texts (sources: shared/notes/distributed.md runs on torch 2.9.1; the 2.13 runs of this suite;
# the NCCL lines from the GitHub issues named in tests/data/dist/*.log)
ERRORS = [
    ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by "
     "peer [127.0.0.1]:32164. This is typically caused by a remote worker crashing. Check the logs of the remote "
     "worker before reporting an error. GLHF!", "victim", "peer_closed", None),
    ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
     "[127.0.0.1]:18821: Connection reset by peer. This is typically caused by a remote worker crashing.",
     "victim", "peer_reset", None),
    ("RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 5000ms "
     "for recv operation to complete", "victim", "gloo_timeout", None),
    ("RuntimeError: [Rank 0]: Ranks 2 failed to pass monitoredBarrier in 5000 ms", "victim", "monitored_barrier", 2),
    ("RuntimeError: Rank 1 successfully reached monitoredBarrier, but received errors while waiting for send/recv "
     "from rank 0. Please check rank 0 logs for faulty rank.", "victim", "check_rank0", None),
    ("[rank1]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation "
     "timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, NumelOut=9801523, Timeout(ms)=600000) ran "
     "for 600020 milliseconds before timing out.", "victim", "nccl_timeout", None),
    ("RuntimeError: NCCL communicator was aborted on rank 1.", "victim", "nccl_error", None),
    ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited or there "
     "was a network error, NCCL version 2.21.5\nncclRemoteError: A call failed possibly due to a network error or a "
     "remote process exiting prematurely.", "victim", "nccl_error", None),
    ("torch.distributed.DistStoreError: wait timeout after 10000ms, keys: /default_pg/0//cpu//0", "victim",
     "store_timeout", None),
    ("gloo::EnforceNotMet ... op.preamble.length <= op.nbytes. 20 vs 12. Received data size doesn't match expected "
     "size. Is there a distributed collective mismatch in your code?", "cause", "gloo_size_mismatch", None),
    ("RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: "
     "CollectiveFingerPrint(SequenceNumber=0, OpType=ALLREDUCE, TensorShape=[10], TensorDtypes=Float, "
     "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cpu, layout=Strided (default), requires_grad="
     "false (default), pinned_memory=false (default), memory_format=(nullopt))), but Rank 1 is running collective: "
     "CollectiveFingerPrint(SequenceNumber=0, OpType=ALLREDUCE, TensorShape=[20], TensorDtypes=Float, "
     "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cpu, layout=Strided (default), requires_grad="
     "false (default), pinned_memory=false (default), memory_format=(nullopt))).Collectives differ in the following "
     "aspects: \tTensor Tensor shapes: 10vs 20", "cause", "collective_mismatch", None),
    ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
     "port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use", "cause",
     "address_in_use", None),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 "
     "GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.07 GiB memory in use.",
     "cause", "cuda_oom", None),
    ("ValueError: corrupt sample in shard 1 at step 2", "cause", None, None),
]


@pytest.mark.parametrize("text,kind,name,culprit", ERRORS, ids=[e[2] or "plain" for e in ERRORS])
def test_classify_real_errors(text, kind, name, culprit):
    got_kind, entry, got_culprit = classify(text)
    assert got_kind == kind
    assert (entry.slug if entry else None) == name
    assert got_culprit == culprit
    if entry is not None:
        assert meaning(entry) and "[[" not in meaning(entry) and not meaning(entry).endswith(".")


def test_every_rank_failure_entry_has_a_source_and_a_test():
    names = {e[2] for e in ERRORS}
    for e in knowledge.entries("rank_failure"):
        assert e.role in ("cause", "victim") and e.sources and e.fixes
        assert all(s.startswith("https://") for s in e.sources), e.slug
        assert e.slug in names, f"entry {e.slug} has no real example"


def test_signal_name():
    assert signal_name(-9) == "SIGKILL"
    assert signal_name(-6) == "SIGABRT"
    assert signal_name(1) == ""


@pytest.mark.parametrize("shape_a,shape_b,op_b,dtype_b,expect", [
    ("[10]", "[20]", "ALLREDUCE", "Float", "different tensor shapes ([10] on rank 0, [20] on rank 1)"),
    ("[4, 5]", "[5, 4]", "ALLREDUCE", "Float", "different tensor shapes ([4, 5] on rank 0, [5, 4] on rank 1)"),
    ("[3]", "[3]", "BROADCAST", "Float", "different collectives (ALLREDUCE on rank 0, BROADCAST on rank 1)"),
    ("[3]", "[3]", "ALLREDUCE", "Double", "different dtypes (Float on rank 0, Double on rank 1)"),
])
def test_explain_detail_mismatch(shape_a, shape_b, op_b, dtype_b, expect):
    # the message layout of TORCH_DISTRIBUTED_DEBUG=DETAIL (shared/notes/distributed.md §1.2)
    tail = ("TensorDeviceTypes=TensorOptions(dtype=float (default), device=cpu, layout=Strided (default), "
            "requires_grad=false (default), pinned_memory=false (default), memory_format=(nullopt)))")
    msg = (f"Detected mismatch between collectives on ranks. Rank 0 is running collective: CollectiveFingerPrint("
           f"SequenceNumber=3, OpType=ALLREDUCE, TensorShape={shape_a}, TensorDtypes=Float, {tail}, but Rank 1 is "
           f"running collective: CollectiveFingerPrint(SequenceNumber=3, OpType={op_b}, TensorShape={shape_b}, "
           f"TensorDtypes={dtype_b}, {tail}.Collectives differ in the following aspects: \tsomething")
    text = explain_detail_mismatch(msg)
    assert expect in text and "#3" in text
    assert explain_detail_mismatch("RuntimeError: something else") == ""


# -- stacks -----------------------------------------------------------------------------------------------------

def test_parse_pyspy_real_dump():
    frames0 = parse_pyspy((DATA / "pyspy_rank0.txt").read_text())
    frames1 = parse_pyspy((DATA / "pyspy_rank1.txt").read_text())
    assert [f["func"] for f in frames0] == ["<module>", "train_step", "_exception_logger.<locals>.wrapper",
                                            "all_reduce"]
    assert collective_of(frames0) == "all_reduce"
    assert user_frame(frames0)["line"] == 6 and user_frame(frames0)["func"] == "train_step"
    assert collective_of(frames1) == "" and user_frame(frames1)["line"] == 12


def test_parse_faulthandler_real_dump():
    frames0 = parse_faulthandler((DATA / "faulthandler_rank0.txt").read_text())
    assert collective_of(frames0) == "all_reduce"
    assert user_frame(frames0)["file"].endswith("hangchild.py") and user_frame(frames0)["line"] == 6
    frames1 = parse_faulthandler((DATA / "faulthandler_rank1.txt").read_text(), "0x00007f31a286bb80")
    assert user_frame(frames1)["line"] == 12


def _hang_from_dumps():
    frames = {r: parse_pyspy((DATA / f"pyspy_rank{r}.txt").read_text()) for r in (0, 1)}
    stacks = {r: (DATA / f"pyspy_rank{r}.txt").read_text() for r in (0, 1)}
    fr = {0: [{"collective_seq_id": 1, "profiling_name": "gloo:all_reduce", "input_sizes": [[2]]}], 1: []}
    return analyze_hang(5.0, frames, stacks, {}, fr, "py-spy")


def test_analyze_hang_names_missing_rank_and_line():
    hang = _hang_from_dumps()
    assert hang.collective == "all_reduce"
    assert hang.waiting_ranks == (0,)
    assert hang.missing_ranks == (1,)
    assert "hangchild.py:12" in hang.missing_where[1]
    assert "hangchild.py:6" in hang.location
    assert len(hang.groups) == 2 and hang.stacks[1]
    text = str(hang)
    assert "rank 1 never reached it" in text and "all_reduce" in text
    assert {row["rank"] for row in hang._records()} == {0, 1}


def test_analyze_hang_exited_rank_is_missing():
    frames = {0: parse_pyspy((DATA / "pyspy_rank0.txt").read_text())}
    hang = analyze_hang(5.0, frames, {0: "s"}, {1: "had already finished its code and exited (exit code 0)"})
    assert hang.missing_ranks == (1,) and "exit code 0" in hang.missing_where[1]


def test_analyze_hang_outside_collectives():
    frames = {r: parse_pyspy((DATA / "pyspy_rank1.txt").read_text()) for r in (0, 1)}
    hang = analyze_hang(5.0, frames, {0: "", 1: ""}, {})
    assert hang.collective == "" and hang.missing_ranks == ()
    assert "No rank is waiting in a collective" in hang.explanation
    assert len(hang.groups) == 1 and hang.groups[0].ranks == (0, 1)  # identical stacks grouped


# -- comparisons ------------------------------------------------------------------------------------------------

def _fp(name, kind, digest, constant=False):
    return (name, kind, (3,), "torch.float32", digest, 1.0, constant)


@pytest.mark.parametrize("rank1,kind,first", [
    ([_fp("w", "param", "a"), _fp("ln.weight", "param", "c", True), _fp("bn.running_mean", "buffer", "e")],
     "ok", ""),
    ([_fp("w", "param", "X"), _fp("ln.weight", "param", "c", True), _fp("bn.running_mean", "buffer", "e")],
     "unsynced_init", "w"),
    ([_fp("w", "param", "a"), _fp("ln.weight", "param", "X", True), _fp("bn.running_mean", "buffer", "e")],
     "diverged", "ln.weight"),
    ([_fp("w", "param", "a"), _fp("ln.weight", "param", "c", True), _fp("bn.running_mean", "buffer", "X")],
     "buffers", "bn.running_mean"),
    ([_fp("w", "param", "a"), _fp("ln.weight", "param", "c", True)], "structure", "(number of tensors)"),
])
def test_compare_fingerprints(rank1, kind, first):
    rank0 = [_fp("w", "param", "a"), _fp("ln.weight", "param", "c", True), _fp("bn.running_mean", "buffer", "e")]
    report = compare_fingerprints([rank0, rank1])
    assert report.kind == kind and report.ok == (kind == "ok")
    assert report.first_difference == first
    if not report.ok:
        assert report.differing_ranks == (1,)
        assert first in str(report)
        (f,) = report.findings
        assert f.fixes and f.message == report.explanation and "rank 1" in f.where and first in f.where
        assert f"fix: {f.fixes[0].title}" in str(report) and 'class="nbd-findings"' in report._repr_html_()
    else:
        assert report.findings == ()


def test_compare_batches():
    assert compare_batches([[0, 1, 2], [0, 1, 2]], 0, None).kind == "same_batches"
    assert compare_batches([[0, 1, 2], [2, 3, 4]], 0, None).kind == "overlap"
    assert compare_batches([[0, 2, 4], [1, 3, 5]], 0, None).ok
    assert compare_batches([[0, 2, 4], [1, 3, 5]], 1, [0, 2, 4]).kind == "same_every_epoch"
    assert compare_batches([[6, 2, 0], [1, 3, 5]], 1, [0, 2, 4]).ok
    assert [f.kind for f in compare_batches([[0, 1, 2], [0, 1, 2]], 0, None).findings] == ["same_batches"]
    assert [f.kind for f in compare_batches([[0, 1, 2], [2, 3, 4]], 0, None).findings] == ["shards_overlap"]
    assert "set_epoch" in compare_batches([[0, 2, 4], [1, 3, 5]], 1, [0, 2, 4]).findings[0].fixes[0].code
    assert compare_batches([[0, 2, 4], [1, 3, 5]], 0, None).findings == ()


def test_step_report_names_straggler_and_loss_outlier():
    recs = []
    for step in range(5):
        base = 1_000_000_000 * step
        for rank in range(3):
            late = 40_000_000 if rank == 2 else rank * 100_000  # rank 2 arrives 40 ms late
            loss = 50.0 if rank == 1 else 1.0 + rank * 0.01
            recs.append({"rank": rank, "step": step, "seconds": 0.1 if step else None, "loss": loss,
                         "arrivals": [(step + 1, base + late)]})
    rep = step_report(recs, 3)
    assert rep.slowest_rank == 2
    kinds = {f.kind: f for f in rep.findings}
    assert "rank 2 is a straggler" in kinds["straggler"].message and kinds["straggler"].where == ("rank 2",)
    assert "rank 1's loss" in kinds["loss_outlier"].message and kinds["loss_outlier"].evidence["loss"] == 50.0
    assert kinds["straggler"].fixes and kinds["straggler"].title
    assert not rep.ok and "straggler" in str(rep)
    assert "rank 2 is a straggler" in rep._repr_mimebundle_()["text/html"]


def test_step_report_identical_losses_flag_missing_sampler():
    recs = [{"rank": r, "step": s, "seconds": 0.1, "loss": 2.5 - s * 0.1} for s in range(3) for r in range(2)]
    rep = step_report(recs, 2)
    assert [f.kind for f in rep.findings] == ["identical_losses"]
    assert "identical on every rank" in rep.findings[0].message and "DistributedSampler" in rep.findings[0].fixes[0].code


def test_step_report_thresholds_come_from_the_knowledge():
    from nbdebug.core.knowledge import thresholds

    assert {"straggler_lateness", "straggler_min_ms", "straggler_step_ratio", "loss_outlier_ratio",
            "identical_loss_steps"} <= set(thresholds("dist"))


# -- shipping ---------------------------------------------------------------------------------------------------

def helper(x):
    return x + 1


class Config:
    lr = 0.1


def test_ship_functions_classes_modules_values():
    import math

    ns = {"helper": helper, "Config": Config, "m": math, "cfg": {"lr": 0.1}, "np_like": [1, 2]}
    s = ship(["helper", "Config", "m", "cfg"], ns)
    assert "def helper" not in s.preamble  # importable from this test module: imported, not copied
    assert "import helper" in s.preamble and "import math as m" in s.preamble
    assert s.values is not None and s.shipped == ("helper", "Config", "m", "cfg")


def test_ship_main_function_by_source():
    code = "def notebook_fn(a):\n    return a * 2\n"
    ns: dict = {"__name__": "__main__"}
    import linecache

    linecache.cache["<nbcell-1>"] = (len(code), None, code.splitlines(True), "<nbcell-1>")
    exec(compile(code, "<nbcell-1>", "exec"), ns)
    ns["notebook_fn"].__module__ = "__main__"
    s = ship(["notebook_fn"], ns)
    assert "def notebook_fn(a):" in s.preamble
    assert not s.notes


def test_ship_notes_unshipped_globals():
    import linecache

    code = "LR = 0.1\ndef step(w):\n    return w - LR\n"
    linecache.cache["<nbcell-2>"] = (len(code), None, code.splitlines(True), "<nbcell-2>")
    ns: dict = {"__name__": "__main__"}
    exec(compile(code, "<nbcell-2>", "exec"), ns)
    ns["step"].__module__ = "__main__"
    assert any("LR" in n for n in ship(["step"], ns).notes)
    assert not ship(["step", "LR"], ns).notes


@pytest.mark.parametrize("value,match", [
    (lambda x: x, "is a lambda"),
    (open(__file__), "cannot be pickled"),  # noqa: SIM115
    (threading.Lock(), "cannot be pickled"),
])
def test_ship_refuses_with_reason(value, match):
    with pytest.raises(DistUsageError, match=match):
        ship(["thing"], {"thing": value})


def test_ship_refuses_closure_and_unknown_name():
    def outer():
        k = 3

        def inner():
            return k

        return inner

    with pytest.raises(DistUsageError, match="closure over k"):
        ship(["inner"], {"inner": outer()})
    with pytest.raises(DistUsageError, match="no variable 'nope'"):
        ship(["nope"], {})


def test_ship_refuses_cuda_tensor_like():
    @dataclasses.dataclass
    class _Dev:
        type: str = "cuda"

    class FakeCudaTensor:
        device = _Dev()

    FakeCudaTensor.__module__ = "torch.fake"
    with pytest.raises(DistUsageError, match="CUDA tensors cannot be shipped"):
        ship(["t"], {"t": FakeCudaTensor()})


def test_parse_traceback_of_a_victim_joins_the_waiting_ranks():
    from nbdebug.core.dist._hang import parse_traceback

    # rank 0's traceback after its own process-group timeout fired (shared/notes/distributed.md §1.4 layout)
    tb = textwrap.dedent('''\
        Traceback (most recent call last):
          File "scratch/dist/c_exc.py", line 22, in <module>
            dist.all_reduce(x)
          File "/home/user/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 81, in wrapper
            return func(*args, **kwargs)
                   ^^^^^^^^^^^^^^^^^^^^^
          File "/home/user/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2942, in all_reduce
            work.wait()
        RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 5000ms for recv operation to complete
    ''')
    frames = parse_traceback(tb)
    assert [f["line"] for f in frames] == [22, 81, 2942]
    assert frames[0]["code"] == "dist.all_reduce(x)" and frames[1]["code"] == "return func(*args, **kwargs)"
    live = {1: parse_pyspy((DATA / "pyspy_rank1.txt").read_text())}
    hang = analyze_hang(5.0, {**live, 0: frames}, {0: tb, 1: ""}, {})
    assert hang.waiting_ranks == (0,) and hang.missing_ranks == (1,)
    assert "c_exc.py:22" in hang.location


def _synthetic_run():
    from nbdebug.core.dist._types import DistRun, RankResult

    ranks = (
        RankResult(rank=0, pid=10, exitcode=1, stderr="x", error="RuntimeError: Connection closed by peer <b>",
                   error_kind="victim", traceback="Traceback ...\nRuntimeError: Connection closed by peer <b>"),
        RankResult(rank=1, pid=11, exitcode=1, stdout="<script>alert(1)</script>",
                   error="ValueError: bad <script>", error_kind="cause", traceback="Traceback ...\nValueError: bad"),
    )
    return DistRun(succeeded=False, nprocs=2, backend="gloo", ranks=ranks, primary_rank=1,
                   primary_reason="rank 1 failed first: ValueError: bad <script>", seconds=1.5, port=1234)


def test_render_escapes_everything_and_marks_the_primary():
    run = _synthetic_run()
    html = run._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "Primary failure: rank 1" in html
    text = str(run)
    assert "Primary failure: rank 1" in text and "<- primary" in text
    assert repr(run) == "<DistRun: FAILED: rank 1: ValueError: bad <script>>"
    df = run.to_pandas()
    assert list(df["primary"]) == [False, True]
    assert run.to_dict()["ranks"][1]["error_kind"] == "cause"
    assert run.nccl_log() is None


def test_nccl_log_of_a_run():
    import dataclasses as dc

    run = _synthetic_run()
    log = (DATA / "no_route_to_host.log").read_text()
    run = dc.replace(run, ranks=(dc.replace(run.ranks[0], stderr=log), run.ranks[1]))
    assert run.nccl_log().findings[0].kind == "no_route_to_host"


def test_dist_enricher_adds_a_section_for_distributed_errors():
    from nbdebug.core.explain import Diagnosis
    from nbdebug.ipython._dist import dist_enricher

    base = Diagnosis(kind="unknown", title="?", summary="?")
    exc = RuntimeError("[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
                       "[127.0.0.1]:32164")
    enriched = dist_enricher(exc, base)
    assert enriched.sections and "victim" in enriched.sections[0].text
    assert enriched.sections[0].title == "Distributed" and enriched.sections[0].fixes
    assert dist_enricher(ValueError("plain"), base) is base


@pytest.mark.parametrize("exc", [
    BrokenPipeError(32, "Broken pipe"),
    OSError(98, "Address already in use"),
    ConnectionResetError("Connection reset by peer"),
], ids=["broken_pipe", "address_in_use", "reset"])
def test_dist_enricher_leaves_single_process_errors_alone(exc):
    from nbdebug.core.explain import Diagnosis
    from nbdebug.ipython._dist import dist_enricher

    base = Diagnosis(kind="unknown", title="?", summary="?")
    assert dist_enricher(exc, base) is base


def test_dist_enricher_survives_an_exception_whose_str_raises():
    from nbdebug.core.explain import Diagnosis
    from nbdebug.ipython._dist import dist_enricher

    class Weird(RuntimeError):
        def __str__(self):
            raise ValueError("no str for you")

    base = Diagnosis(kind="unknown", title="?", summary="?")
    assert dist_enricher(Weird(), base) is base
    Weird.__module__ = "torch.distributed"
    assert dist_enricher(Weird(), base) is base  # distributed by type, but nothing known in its text


def test_dist_enricher_survives_a_str_that_raises_keyboard_interrupt():
    from nbdebug.core.explain import Diagnosis
    from nbdebug.ipython._dist import dist_enricher

    class Nasty(RuntimeError):
        def __str__(self):
            raise KeyboardInterrupt

    Nasty.__module__ = "torch.distributed"
    base = Diagnosis(kind="unknown", title="?", summary="?")
    assert dist_enricher(Nasty(), base) is base  # no KeyboardInterrupt escapes in place of the user's error


def test_dist_enricher_does_not_repeat_the_fixes_of_the_diagnosis():
    from nbdebug.core.explain import explain
    from nbdebug.ipython._dist import dist_enricher

    exc = RuntimeError("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=8, OpType=ALLREDUCE, "
                       "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600020 milliseconds before timing out.")
    diagnosis = explain(exc)
    assert diagnosis.kind == "nccl_timeout"
    section = dist_enricher(exc, diagnosis).sections[-1]
    assert "victim" in section.text and not section.fixes


def test_render_titles_are_cut_at_words_and_never_empty():
    import dataclasses as dc

    from nbdebug.render.dist import clip

    fp = ("RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: "
          "CollectiveFingerPrint(SequenceNumber=0, OpType=ALLREDUCE, TensorShape=[10], TensorDtypes=Float)")
    cut = clip(fp, 120)
    assert cut.endswith(" …") and len(cut) <= 122
    assert fp.startswith(cut[:-2]) and fp[len(cut) - 2] in " ,;:)"
    assert clip("short", 120) == "short"
    run = _synthetic_run()
    run = dc.replace(run, ranks=(run.ranks[0], dc.replace(run.ranks[1], error=fp)))
    assert "CollectiveFingerPrint(Sequen<" not in run._repr_html_()
    silent = dc.replace(run, ranks=(run.ranks[0], dc.replace(run.ranks[1], error="", exitcode=-9)))
    html = silent._repr_html_()
    assert "FAILED — rank 1: exit code -9" in html
    assert "FAILED — rank 1: <" not in html


def test_rank_and_hang_have_their_own_panels():
    run = _synthetic_run()
    html = run.ranks[1]._repr_html_()
    assert 'class="nbdebug error' in html and "rank 1: cause — ValueError: bad &lt;script&gt;" in html
    assert "<pre>" not in html.split("</summary>")[0]
    hang = analyze_hang(5.0, {0: parse_pyspy((DATA / "pyspy_rank0.txt").read_text()),
                              1: parse_pyspy((DATA / "pyspy_rank1.txt").read_text())},
                        {0: "stack 0", 1: "stack 1"}, {})
    html = hang._repr_html_()
    assert "HANG in" in html and hang.explanation[:40].replace("'", "&#x27;") in html
    assert "<h4>Ranks grouped by stack" in html


def test_a_cell_whose_ranks_all_fail_with_name_error_says_to_use_use():
    from nbdebug.core.dist._types import RankResult
    from nbdebug.core.dist._verdict import _name_errors

    ranks = [RankResult(rank=r, pid=r, exitcode=1, error="NameError: name 'model' is not defined", error_kind="cause")
             for r in range(2)]
    (f,) = _name_errors(ranks)
    assert f.kind == "name_not_shipped" and f.where == ("model",)
    assert "fresh Python process" in f.message and "--use model" in f.fixes[0].code
    mixed = [ranks[0], RankResult(rank=1, pid=1, exitcode=1, error="ValueError: x", error_kind="cause")]
    assert _name_errors(mixed) == []


def test_the_report_carries_the_explainers_diagnosis_of_the_primary_error():
    from nbdebug.core.dist._types import RankResult
    from nbdebug.core.dist._verdict import _diagnose

    r = RankResult(rank=1, pid=1, exitcode=1, error="RuntimeError: mat1 and mat2 shapes cannot be multiplied "
                   "(4x3 and 5x2)", traceback="Traceback (most recent call last):\n  File \"<cell>\", line 3, "
                   "in <module>\nRuntimeError: mat1 and mat2 shapes cannot be multiplied (4x3 and 5x2)")
    d = _diagnose(r)
    assert d is not None and d.known
    assert _diagnose(RankResult(rank=0, pid=0, exitcode=1, error="Zorg: qux")) is None
    import dataclasses as dc

    run = dc.replace(_synthetic_run(), diagnosis=d)
    assert d.title in run._repr_html_() and d.title in str(run)


def test_facade_is_exactly_core_dist():
    import nbdebug.core.dist as core
    import nbdebug.dist as facade

    assert facade.__all__ == core.__all__
    assert all(getattr(facade, n) is getattr(core, n) for n in core.__all__)
    assert "Parameters" in core.run.__doc__ and "Parameters" in core.run_script.__doc__


@pytest.mark.parametrize("source", [b"print(1)", None, "print('\ud800')"])
def test_a_bad_source_is_one_clear_error_and_leaves_no_folder(source, tmp_path, monkeypatch):
    import tempfile

    from nbdebug import dist

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(DistUsageError, match="source"):
        dist.run(source, 2, timeout=10, echo=False)
    assert not list(tmp_path.glob("nbdebug-dist-*"))
