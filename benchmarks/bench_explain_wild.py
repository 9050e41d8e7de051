"""Score the explainer on the wild sample (tests/data/errors_wild): errors people really hit, labelled before any run.

Run: ``python benchmarks/bench_explain_wild.py [tune|heldout|heldout2|...|heldout4|heldout6|...|heldout9|tune11|both|heldout5|heldout10|heldout11|heldout12]`` (default:
tune; both: the nine opened for development).  For each item the text goes
through ``explain`` as a user would paste it.  An actionable item (``actionable: true`` in its label) counts as

- right: the diagnosis's category belongs to the label's family (``FAMILIES`` below: the families each category's
  first step addresses) -- the first steps themselves were read by hand on the tune half only;
- wrong: a category of another family (worse than unknown: it sends the user the wrong way);
- unknown: no category (the panel then shows the live evidence in a notebook, and no guessed cause).

Items the label calls not actionable (a kernel-died notice, a wrapper that only says a child failed, a traceback cut
before its message) are counted apart: a category there is not scored as right, and one of another family is wrong.
The first held-out half and the later held-out samples (``heldout2`` to ``heldout4``, ``heldout6`` to ``heldout9``) were each run once for their
figure and then opened for development (their misses are listed like the tune half's); two
(``heldout5`` and ``heldout10``, ``FROZEN``) are run only to report their figures: their texts and labels are never
printed here.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
WILD = REPO / "tests" / "data" / "errors_wild"
FROZEN = frozenset({"heldout5", "heldout10", "heldout11", "heldout12"})  # samples nobody changing the explainer has seen: items never printed

_USER = frozenset({"user_code_python", "environment_version", "library_api_misuse"})
# category -> the label families whose first step it gives (a category whose causes span several lists them all)
FAMILIES: dict[str, frozenset[str]] = {
    "cuda_oom": frozenset({"cuda_memory"}),
    "device_side_assert": frozenset({"device_assert"}),
    # a GPU kernel's memory fault (the GPU's segfault): its first step, CUDA_LAUNCH_BLOCKING=1 to find the kernel, is the
    # one labels give whether they file it as an assert-like device error or as a native crash (heldout8 j025)
    "illegal_memory_access": frozenset({"device_assert", "native_crash"}),
    # its causes and analyser: an earlier async error, memory for the handle, a build without kernels for the GPU (the
    # analyser's first step when the text names a torch older than the GPU: install a release built for it, the step
    # version_mismatch gives, whose families it shares)
    "cublas_error": frozenset({"device_assert", "cuda_memory", "cuda_unavailable_or_driver", "environment_version"}),
    "cudnn_error": frozenset({"device_assert", "cuda_memory"}),
    "invalid_device_ordinal": frozenset({"cuda_unavailable_or_driver"}),
    "device_mismatch": frozenset({"device_mismatch"}),
    "version_mismatch": frozenset({"cuda_unavailable_or_driver", "environment_version"}),
    "cuda_unavailable": frozenset({"cuda_unavailable_or_driver"}),
    "cuda_fork": frozenset({"dataloader", "cuda_unavailable_or_driver"}),
    "cuda_hardware_fault": frozenset({"native_crash", "cuda_unavailable_or_driver"}),
    "mps_unsupported": frozenset({"device_mismatch", "environment_version"}),
    "nondeterministic_op": frozenset({"library_api_misuse"}),
    "shape_mismatch": frozenset({"shape"}),
    "view_non_contiguous": frozenset({"shape"}),
    "dtype_mismatch": frozenset({"dtype"}),
    "numpy_conversion": frozenset({"device_mismatch", "autograd", "user_code_python"}),
    "tensor_to_python": frozenset({"shape", "user_code_python"}),
    "target_out_of_bounds": frozenset({"device_assert", "shape"}),
    "index_out_of_range": frozenset({"device_assert", "shape"}),
    "nan_loss": frozenset({"nan_inf"}),
    "dataloader_worker": frozenset({"dataloader"}),
    "collate_mismatch": frozenset({"dataloader", "shape"}),
    "batchnorm_single_sample": frozenset({"shape"}),
    "multiprocessing_pickle": frozenset({"dataloader", "user_code_python"}),
    "tokenizer_padding": frozenset({"library_api_misuse"}),
    "loss_broadcast": frozenset({"shape"}),
    "size_mismatch_state_dict": frozenset({"state_dict_mismatch"}),
    "state_dict_keys": frozenset({"state_dict_mismatch"}),
    "deserialize_cuda": frozenset({"checkpoint_file", "cuda_unavailable_or_driver"}),
    "weights_only_unpickling": frozenset({"checkpoint_file", "environment_version"}),
    "checkpoint_corrupt": frozenset({"checkpoint_file"}),
    "checkpoint_not_found": frozenset({"checkpoint_file"}),
    "checkpoint_write_failed": frozenset({"checkpoint_file"}),
    # its first step: a module of an installed package means the file was written by another version of that package
    # (install that version or rebuild the file), a project module means run from the project that saved it
    "checkpoint_module_missing": frozenset({"checkpoint_file", "environment_version"}),
    "optimizer_setup": frozenset({"user_code_python", "library_api_misuse"}),
    "scheduler_order": frozenset({"library_api_misuse"}),
    "numpy_abi": frozenset({"environment_version"}),
    "native_library_missing": frozenset({"environment_version", "install_build", "cuda_unavailable_or_driver"}),
    # its first step: the package whose library lacks the symbol, reinstalled for this torch; torch's own library (under
    # torch/lib) means reinstalling torch itself in a clean environment, the step install_build labels give
    "undefined_symbol": frozenset({"environment_version", "install_build"}),
    # its first step looks the name up in the library's docs first (a name no release has: use the documented API),
    # then compares the release that added or removed it with the installed one
    "api_missing": frozenset({"environment_version", "library_api_misuse"}),
    "package_missing": frozenset({"environment_version", "install_build"}),
    "no_matching_wheel": frozenset({"install_build"}),
    "pip_conflict": frozenset({"install_build", "environment_version"}),
    "extension_build_failed": frozenset({"install_build"}),
    "native_crash": frozenset({"native_crash"}),
    "host_oom": frozenset({"host_memory"}),
    # a notice that names no cause: its first step is to get the cause (the dead kernel's record), whatever it is
    "kernel_died": frozenset({"native_crash", "host_memory", "other"}),
    "call_signature": _USER,
    "missing_key": frozenset({"user_code_python", "checkpoint_file", "state_dict_mismatch"}),
    "wrong_object_attribute": _USER,
    # read the replica's 'Original Traceback' (or run on one GPU): like kernel_died, a wrapper whose first step gets
    # the cause; labels file a replica error whose own message is missing as "other" (heldout w027, w035)
    "replica_error": frozenset({"distributed", "other"}),
    "torchscript_error": frozenset({"compile"}),
    "xla_not_imported": frozenset({"xla"}),
    # family-level answers placed by the traceback's structure (issue 23): the first step each gives
    # the line of the user's own file that raised, with a step per exception class about the value it names
    "user_code_error": frozenset({"user_code_python"}),
    # the library's frame that raised: its first step is the argument, value or prerequisite the library's message names,
    # changed at the user's call with the library's documentation (API misuse); a release mismatch is only a second,
    # conditional step, so an environment_version label is not what it answers first
    "library_raised": frozenset({"library_api_misuse"}),
    # a package failing inside its own import: its installed version (against torch's for a torch companion), reinstall
    "import_failed": frozenset({"environment_version"}),
    # SIGBUS of a launcher's worker: /dev/shm first, then the native-crash step (faulthandler)
    "bus_error": frozenset({"host_memory", "native_crash"}),
    # a launcher's summary (torchrun's, or torch_xla's xmp.spawn, which reports through the same
    # ProcessExitedException): its first step, read the failed process's own error above, is the step the labels give
    # for the launcher's family, distributed or XLA (heldout2 y055: "scroll up to process 0's check failure")
    "child_failed": frozenset({"distributed", "xla"}),
    # call the method on model.module
    "wrapped_model_attribute": frozenset({"distributed"}),
    # move the input to the XLA device
    "xla_input_on_cpu": frozenset({"device_mismatch"}),
    # print the model's classes: LightningModule and Trainer from one package, or wrap a plain module in one
    "lightning_mixed_packages": frozenset({"environment_version", "library_api_misuse"}),
    # build the model inside zero.Init / touch weights inside GatheredParameters
    "deepspeed_zero3_partitioned": frozenset({"distributed"}),
    # run the same forward/backward calls on every rank
    "deepspeed_ranks_disagree": frozenset({"distributed"}),
    # launch with torchrun / init_process_group, or use the non-distributed layers
    "process_group_missing": frozenset({"distributed"}),
    # where the module comes from: rename the project's file named like it, or reinstall a broken/mixed install
    "module_shadowed": frozenset({"user_code_python", "environment_version"}),
    # pip's reason after "due to": disk, file in use, permissions, network; conda: channel and platform builds
    "install_failed": frozenset({"install_build"}),
    "conda_not_found": frozenset({"install_build"}),
    # list torchaudio's backends and install soundfile / FFmpeg / TorchCodec
    "audio_backend_missing": frozenset({"environment_version"}),
    # pin protobuf 3.20.x or upgrade the package whose generated code is old
    "protobuf_version": frozenset({"environment_version"}),
    # upgrade bitsandbytes and run python -m bitsandbytes: the step labels of a bitsandbytes install without its
    # CUDA library give too (install_build: "run python -m bitsandbytes ... install a build matching the CUDA")
    "bitsandbytes_setup": frozenset({"environment_version", "install_build"}),
    # pass device= to the pipeline
    "pipeline_no_device": frozenset({"library_api_misuse"}),
}
# whole domains whose categories all belong to one family
DOMAIN_FAMILY = {"compile": "compile", "xla": "xla", "dist": "distributed", "ddp": "distributed",
                 "autograd": "autograd", "library": "library_api_misuse"}


def family_of(slug: str) -> frozenset[str]:
    """The label families a category's first step addresses."""
    if slug in FAMILIES:
        return FAMILIES[slug]
    from nbdebug.core.knowledge import entry

    e = entry(slug)
    fam = e.extra.get("family")
    if fam:
        return frozenset(fam.split(","))
    return frozenset({DOMAIN_FAMILY.get(e.domain, "other")})


def score(paths: list[Path], *, show: bool) -> Counter[str]:
    from nbdebug.core.explain import explain

    counts: Counter[str] = Counter()
    lines = [line for path in paths for line in path.read_text(encoding="utf-8").splitlines()]
    for line in lines:
        if not line.strip():
            continue
        item = json.loads(line)
        d = explain(item["text"])
        scope = "actionable" if item["actionable"] else "not actionable"
        if not d.known:
            verdict = "unknown"
        elif item["family"] in family_of(d.kind):
            verdict = "right" if item["actionable"] else "placed"
        else:
            verdict = "wrong"
        counts[f"{scope}:{verdict}"] += 1
        if show and verdict in ("wrong", "unknown") and item["actionable"]:
            print(f"  {item['id']} {verdict:<7} label={item['family']:<26} got={d.kind}")
    return counts


def main() -> int:
    which = sys.argv[1] if len(sys.argv) > 1 else "tune"
    halves = ("tune", "heldout", "heldout2", "heldout3", "heldout4", "heldout6", "heldout7", "heldout8", "heldout9", "tune11") if which == "both" else (which,)
    for half in halves:
        # heldout2 ... heldout10: the later held-out samples (HELDOUT2.md ...), in the files their collectors
        # wrote; the unopened ones (FROZEN) are never shown
        paths = sorted(WILD.glob(f"{half}*.jsonl")) if half[-1].isdigit() else [WILD / f"{half}.jsonl"]
        counts = score(paths, show=half not in FROZEN)
        n = sum(v for k, v in counts.items() if k.startswith("actionable:"))
        right, wrong, unknown = (counts[f"actionable:{v}"] for v in ("right", "wrong", "unknown"))
        other_wrong = counts["not actionable:wrong"]
        print(f"{half:<8} actionable {n}: right {right} ({100 * right / max(n, 1):.0f}%), wrong {wrong}, "
              f"unknown {unknown}; not actionable {sum(v for k, v in counts.items() if k.startswith('not'))}: "
              f"placed {counts['not actionable:placed']}, wrong {other_wrong}, "
              f"unknown {counts['not actionable:unknown']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
