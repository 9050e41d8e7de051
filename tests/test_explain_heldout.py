"""The engine against held-out corpora it was not written alongside.

tests/data/errors_heldout: 236 real error texts copied from public issue threads and pages whose URLs do not
appear in tests/data/errors.  tests/data/errors_heldout_r2 .. _r10: 38, 11, 12, 7, 7, 10, 14, 7 and 4 more, each
collected with broad queries after the previous rounds had been used to improve the engine; _r11: 66 texts for
the categories issue 10 added, gathered after they were written (a few texts of those categories that earlier
rounds had filed as ``unknown`` were renamed to their new slug).  First line
``# source: <url>``; file name prefix = expected slug, ``unknown__*`` are real errors outside every category.
Each folder's BASELINE.md records the accuracy measured before the engine was changed for it.  The issue's
targets: at least 95 % right category on in-category texts, ``unknown`` for at least 90 % of the others, and a
wrong category is worse than ``unknown``.
"""

from __future__ import annotations

import collections
import re
from pathlib import Path

import pytest

from nbdebug.core.explain import explain
from nbdebug.core.knowledge import entries

# the family-level categories that the traceback's structure places (no message names them) count as categories
SLUGS = tuple(e.slug for e in entries("explain")) + ("user_code_error", "library_raised", "import_failed", "bus_error",
                                                             "checkpoint_load_failed", "libraries_disagree",
                                                             "collate_failed", "distributed_call_failed")

DATA = Path(__file__).parent / "data"
HELDOUT = DATA / "errors_heldout"
ROUNDS = sorted(DATA.glob("errors_heldout_r*"))  # later rounds, in the order they were collected
FILES = sorted(HELDOUT.glob("*.txt")) + [p for r in ROUNDS for p in sorted(r.glob("*.txt"))]
ORIGINAL = DATA / "errors"


# texts filed as ``unknown`` whose category exists since (the folders are the lead's to rename): triton counting 0 GPU
# drivers on a CPU runtime is cuda_unavailable since the eighth wild sample's round
# (and a NameError in a Colab cell, whose frame an issue keeps as a Markdown link, "[<ipython-input-22-...>](https://...)
# in <cell line: 1>", read since the ninth sample's round: the cell's own line, user_code_error)
# (and transformers' "Can't load tokenizer for 'x'": a model's files that did not come from the Hub, checkpoint_load_failed
# with the Hub's step, since the same round)
_RENAMED = {"unknown__triton_zero_active_drivers.txt": "cuda_unavailable",
            "unknown__nameerror_torch_colab.txt": "user_code_error",
            "unknown__hf_cant_load_tokenizer_bert.txt": "checkpoint_load_failed",
            "unknown__hf_cant_load_tokenizer_windows_path.txt": "checkpoint_load_failed"}


def _expected(path: Path) -> str:
    return _RENAMED.get(path.name) or path.name.split("__", 1)[0]


def _source(path: Path) -> str:
    return path.read_text(errors="replace").split("\n", 1)[0].removeprefix("# source: ").strip().rstrip("/")


# The categories added by issue 10 were held out in their own round (r11), gathered after they were written.
ISSUE_10 = DATA / "errors_heldout_r11"


def test_heldout_is_big_and_spread():
    counts = collections.Counter(_expected(p) for p in HELDOUT.glob("*.txt"))
    assert set(counts) <= set(SLUGS) | {"unknown"}, sorted(set(counts) - set(SLUGS) - {"unknown"})
    later = collections.Counter(_expected(p) for p in FILES)
    new = {e.slug for e in entries("explain") if e.domain in ("ddp", "optim")} | {
        "grad_non_scalar", "cuda_unavailable", "cuda_fork", "numpy_conversion", "tensor_to_python",
        "index_out_of_range", "collate_mismatch", "batchnorm_single_sample", "nondeterministic_op",
        "cuda_hardware_fault", "mps_unsupported", "multiprocessing_pickle", "inference_tensor", "tokenizer_padding",
        "loss_broadcast", "nonleaf_grad_access", "checkpoint_no_grad"}
    # issue 23's families are held out in the wild sample (tests/data/errors_wild, scored by
    # benchmarks/bench_explain_wild.py), gathered by a rule that does not pick by type
    issue_23 = {e.slug for e in entries("explain") if e.domain in ("env", "crash", "usercode", "library")} | {
        "checkpoint_corrupt", "checkpoint_module_missing", "checkpoint_load_failed", "torchscript_error", "xla_not_imported",
        "wrapped_model_attribute", "xla_input_on_cpu", "process_group_missing", "store_unreachable", "user_code_error", "library_raised", "import_failed", "bus_error",
        "libraries_disagree", "collate_failed", "distributed_call_failed", "dataset_empty",
        # a shape any library reports, and a custom Function's backward failing (placed by the frames)
        "shape_reported", "backward_function_raised", "checkpoint_other_release",
        # the post-mortem's gloo size mismatch, read by the explainer too since 08_distributed's abort was taken for
        # a native crash: its texts are real aborts raised on this CPU, and no held-out text exists for it yet
        "gloo_size_mismatch",
        # the ninth sample's round: torch's own autograd check (held out in the wild sample like the others above)
        "autograd_internal_assert"}
    new -= issue_23
    thin = {slug: counts[slug] for slug in SLUGS if slug not in new | issue_23 and counts[slug] < 4}
    assert not thin, f"categories with fewer than 4 held-out texts: {thin}"
    thin_new = {slug: later[slug] for slug in new if later[slug] < 2}
    assert not thin_new, f"issue-10 categories with fewer than 2 held-out texts: {thin_new}"
    assert sum(1 for _ in ISSUE_10.glob("*.txt")) >= 60
    assert sum(n for slug, n in counts.items() if slug != "unknown") >= 150
    # 11 of the first round's out-of-category texts belong to categories issue 10 added, and 10 more to the
    # families issue 23 added (checkpoint files, pip finding no wheel), then 3 more that the traceback-structure
    # answers and the process-group category place: renamed to their slug
    assert counts["unknown"] >= 12
    # six more were placed by issue 23: two library checks (library_raised), DeepSpeed's rank disagreement, and three
    # texts of a distributed call without a process group (one moved to tests/data/errors for the corpus)
    # (and one more, an old init_process_group failing in torch.distributed's frames, by the distributed-call rule)
    # (and one more, triton's 0 active drivers on a CPU runtime, by cuda_unavailable: _RENAMED)
    # (and one more, a NameError in a Colab cell whose frame is a Markdown link, by user_code_error, and two of
    # transformers' "Can't load tokenizer", by checkpoint_load_failed: _RENAMED)
    assert sum(1 for p in FILES if _expected(p) == "unknown") >= 24


def test_heldout_sources_are_disjoint_from_the_original_corpus():
    original = {_source(p) for p in ORIGINAL.glob("*.txt")}
    overlap = sorted(p.name for p in FILES if _source(p) in original)
    assert not overlap, f"held-out texts from threads already in tests/data/errors: {overlap}"
    seen = {_source(p) for p in HELDOUT.glob("*.txt")}
    assert len(ROUNDS) >= 3
    for later in ROUNDS:
        overlap = sorted(p.name for p in later.glob("*.txt") if _source(p) in seen)
        assert not overlap, f"{later.name}: texts from threads already in an earlier round: {overlap}"
        seen |= {_source(p) for p in later.glob("*.txt")}
    assert all(re.match(r"https?://\S+$", _source(p)) for p in FILES), "every file names its public source"


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_heldout_file(path: Path):
    d = explain(path.read_text(errors="replace"))
    assert d.kind == _expected(path), f"{path.name}: got {d.kind} ({d.message!r})"
    if d.known:
        assert d.title and d.fixes and d.first_step and d.message
        assert "[[" not in d.summary and not re.search(r"\{\w+(?::\w+)?\}", d.summary), d.summary


def test_heldout_accuracy_meets_the_issue_targets():
    known = unknown = known_ok = unknown_ok = 0
    wrong_category, missed = [], []
    for path in FILES:
        expected, got = _expected(path), explain(path.read_text(errors="replace")).kind
        if expected == "unknown":
            unknown += 1
            unknown_ok += got == "unknown"
        else:
            known += 1
            known_ok += got == expected
        if got != expected:
            (missed if got == "unknown" else wrong_category).append(f"{path.name} -> {got}")
    report = (f"held-out: {known_ok}/{known} = {known_ok / known:.1%} right category; "
              f"{unknown_ok}/{unknown} = {unknown_ok / unknown:.1%} unknown; "
              f"wrong category: {wrong_category}; missed: {missed}")
    print(report)
    assert known_ok / known >= 0.95 and unknown_ok / unknown >= 0.90, report
    # a wrong diagnosis misleads; an honest "unknown" does not
    assert len(wrong_category) <= len(FILES) // 100, report


@pytest.mark.parametrize(
    ("name", "facts"),
    [
        ("cuda_oom__no_space_runtime_error_2", {}),
        ("target_out_of_bounds__old_thnn_wording", {"target": 100}),
        ("nccl_timeout__basicsr_pg_guid", {"op_type": "ALLREDUCE", "seq_num": 808, "timeout_ms": 600000}),
        ("cuda_oom__wrapped_blog", {"tried_to_allocate": 2 * 2**30, "device": 0}),
    ],
)
def test_heldout_facts_survive_old_and_wrapped_wordings(name, facts):
    d = explain((HELDOUT / f"{name}.txt").read_text())
    assert {k: d.evidence.get(k) for k in facts} == facts


@pytest.mark.parametrize(
    ("text", "slug"),
    [
        ("RuntimeError: cuda runtime error (2)", "cuda_oom"),  # cudaErrorMemoryAllocation
        ("RuntimeError: cuda runtime error (710) : device-side assert", "device_side_assert"),
        ("RuntimeError: cuda runtime error (59) :", "device_side_assert"),
        ("RuntimeError: CUDA error (101)", "invalid_device_ordinal"),
        ("RuntimeError: cuda runtime error (35) :", "version_mismatch"),
        # error 4 = cudaErrorLaunchFailure: a category of its own since issue 10
        ("RuntimeError: cuda runtime error (4) : unspecified launch failure", "cuda_hardware_fault"),
    ],
)
def test_cuda_error_numbers_alone(text, slug):
    assert explain(text).kind == slug


# Messages as PyTorch / its launchers word them in other versions than the corpora show (from the library's
# sources across releases); each pins one table pattern added while generalising from the held-out misses.
@pytest.mark.parametrize(
    ("slug", "text"),
    [
        ("address_in_use", "RuntimeError: The server socket has failed to bind to 0.0.0.0:29500 (system error: 10048 - "
                           "Only one usage of each socket address (protocol/network address/port) is normally permitted.)."),
        ("device_mismatch", "RuntimeError: Expected object of type torch.FloatTensor but found type torch.cuda.FloatTensor "
                            "for argument #2 'weight'"),
        ("dtype_mismatch", "RuntimeError: Expected object of type torch.cuda.LongTensor but found type "
                           "torch.cuda.FloatTensor for argument #2 'target'"),
        ("version_mismatch", "RuntimeError: CUDA error: invalid device function"),
        ("version_mismatch", "Search for `cudaErrorInvalidDeviceFunction' in https://docs.nvidia.com/cuda/cuda-runtime-api/"
                             "group__CUDART__TYPES.html for more information."),
        ("device_mismatch", "RuntimeError: module must have its parameters and buffers on device cuda:0 (device_ids[0]) "
                            "but found one of them on device: cpu"),
        ("shape_mismatch", "ValueError: Expected target size (16, 5), got torch.Size([16, 10])"),
        ("shape_mismatch", "RuntimeError: Expected size for first two dimensions of batch2 tensor to be: [8, 64] but got: "
                           "[8, 32]."),
        ("shape_mismatch", "RuntimeError: Tensors must have same number of dimensions: got 4 and 3"),
        ("shape_mismatch", "RuntimeError: shape mismatch: value tensor of shape [3] cannot be broadcast to indexing "
                           "result of shape [2]"),
        ("batchnorm_single_sample", "ValueError: Expected more than 1 value per channel when training, got input size "
                           "torch.Size([1, 256])"),
        ("nan_loss", "ValueError: Expected parameter logits (Tensor of shape (64, 10)) of distribution Categorical() to "
                     "satisfy the constraint IndependentConstraint(Real(), 1), but found invalid values:"),
        ("state_dict_keys", "KeyError: 'unexpected key \"module.encoder.embedding.weight\" in state_dict'"),
        ("size_mismatch_state_dict", 'While copying the parameter named "fc.weight", whose dimensions in the model are '
                                     "torch.Size([10, 512]) and whose dimensions in the checkpoint are torch.Size([1000, 512])."),
        ("no_grad_fn", "RuntimeError: element 0 of variables does not require grad and does not have a grad_fn"),
        ("dataloader_worker", "RuntimeError: Couldn't open shared file mapping: <torch_10592_2741451617>, error code: <1455>"),
        ("world_size_mismatch", "ValueError: Error initializing torch.distributed using env:// rendezvous: environment "
                                "variable RANK expected, but not set"),
        ("torch_compile", "RuntimeError: Windows not yet supported for torch.compile"),
        ("dtype_mismatch", "RuntimeError: expected mat1 and mat2 to have the same dtype, but got: float != c10::BFloat16"),
        ("cuda_oom", "RuntimeError: MPS backend out of memory (MPS allocated: 17.94 GB, other allocations: 56.58 MB, max "
                     "allowed: 18.13 GB). Tried to allocate 256.00 MB on private pool."),
        ("cuda_oom", "RuntimeError: cuda runtime error: out of memory"),
        ("nan_loss", "Epoch 3 | step 120 | loss: nan | lr 3e-4"),
        ("weights_only_unpickling", "_pickle.UnpicklingError: Can only build Tensor, Parameter, OrderedDict or types "
                                    "allowlisted via torch.serialization.add_safe_globals, but got <class 'set'>"),
        ("unknown", "Epoch 3 | step 120 | loss_scale: 65536.0 | grad_norm: 1.3"),
        ("unknown", "RuntimeError: Expected object of type Variable but found type Tensor"),
        ("host_oom", "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 3.45 GiB for an array with shape "
                    "(1000, 1000, 463) and data type float64"),
        ("unknown", "ValueError: operands could not be broadcast together with shapes (3,) (4,)"),
        ("unknown", "RuntimeError: CUDA error: the launch timed out and was terminated"),
    ],
)
def test_wordings_of_other_versions(slug, text):
    assert explain(text).kind == slug


def test_jupyter_header_names_a_cut_traceback_but_only_with_its_module():
    cut = (HELDOUT.parent / "errors_heldout_r2" / "torch_compile__jupyter_unsupported_header.txt").read_text()
    assert explain(cut).kind == "torch_compile"
    # the same generic class name from another library stays unknown
    other = "Unsupported                               Traceback (most recent call last)\nCell In[3], line 1\n"
    assert explain(other).kind == "unknown"


def test_truncated_traceback_is_recognised_from_its_last_raise_line():
    text = (HELDOUT / "torch_compile__frames_only_raise_backend.txt").read_text()
    assert "BackendCompilerFailed:" not in text  # only the frame's source line names it
    assert explain(text).kind == "torch_compile"
    # the same fallback never turns a generic raise into a category
    generic = 'Traceback (most recent call last):\n  File "a.py", line 3, in f\n    raise ValueError("bad config")\n'
    assert explain(generic).kind == "unknown"


def test_frames_recognise_a_failure_only_when_no_message_matched():
    # 0.4-era worker re-raise: the worker's traceback became the message of a plain AttributeError
    old_worker = (
        "AttributeError: Traceback (most recent call last):\n"
        '  File "/env/lib/python3.5/site-packages/torch/utils/data/dataloader.py", line 55, in _worker_loop\n'
        "    samples = collate_fn([dataset[i] for i in batch_indices])\n"
        '  File "/home/u/data/voc.py", line 129, in pull_item\n'
        "    height, width, channels = img.size[2] / img.count\n"
        "ZeroDivisionError: division by zero\n"
    )
    d = explain(old_worker)
    assert d.kind == "dataloader_worker"
    assert d.message == "division by zero"
    # the same error outside a worker is the user's own code (issue 23: placed by the frame that raised it)
    assert explain(old_worker.split("\n", 3)[3]).kind == "user_code_error"
    # a message in a category wins over the frames: the None an image loader returned (issue 23), and an inner
    # shape error inside a worker
    none = old_worker.replace("ZeroDivisionError: division by zero",
                              "AttributeError: 'NoneType' object has no attribute 'shape'")
    assert explain(none).kind == "wrong_object_attribute"
    inner = old_worker.replace("ZeroDivisionError: division by zero",
                               "RuntimeError: stack expects each tensor to be equal size, but got [3] at entry 0 "
                               "and [4] at entry 1")
    assert explain(inner).kind == "collate_mismatch"  # stacking in the loader's collate step (issue 10)
    # frames only the backend compiler runs
    compile_frames = (
        'W0916 19:14:38.825000 9120 Lib\\site-packages\\torch\\_dynamo\\convert_frame.py:1280]   File '
        '"E:\\env\\Lib\\site-packages\\torch\\_dynamo\\repro\\after_dynamo.py", line 150, in __call__\n'
        "W0916 19:14:38.825000 9120 Lib\\site-packages\\torch\\_dynamo\\convert_frame.py:1280]     "
        "compiled_gm = compiler_fn(gm, example_inputs)\n"
    )
    assert explain(compile_frames).kind == "torch_compile"
    # a generic user traceback has no such frames
    user = 'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n    main()\nZeroDivisionError: division by zero\n'
    assert explain(user).kind == "user_code_error"  # placed by its frame, in the user's train.py (issue 23)
