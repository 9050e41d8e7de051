"""torch_xla."""

from __future__ import annotations

from nbdebug.core._findings import Fix, Severity
from nbdebug.core.knowledge._schema import Entry, Threshold

__all__ = ["ENTRIES", "THRESHOLDS"]

ENTRIES: tuple[Entry, ...] = (
    Entry(
        slug="xla_error",
        title="PyTorch/XLA (TPU) error",
        summary="The XLA runtime reported an error[[: {xla_status}]].",
        keywords=("computation requires more parameters", "xrtcompile", "cannot replicate if number of devices", "xla", "tpu", "hbm", "pjrt", "statusor", "equal rank",
                  "mesh master", "hlo"),
        patterns=(
            r"is not a TPU device",
            r"Exception in device=TPU:\d+",
            r"torch_xla/csrc/(?:(?!torch_xla/csrc/)[\w/.])+:\d+ : Check failed",
            r"XRTCompile",
            r"tensorflow/compiler/xla/(?:(?!tensorflow/compiler/xla/)[\w/.])+\.(?:cc|h):\d+(?:\\?\]| :)",
            r"xla_client/(?:(?!xla_client/)[\w/.])+:\d+\]",
            r"\btorch_xla::(?:runtime|bridge|XLAGraphExecutor|tensor_methods)::\w+",
            r"No matching devices found for '/job:\w*tpu",
            r"(?<![\w.])torch_xla\.\w[\w.]*Error",
            r"XlaRuntimeError",
            r"Computation requires more parameters \(\d+\) than supported",
            r"Ran out of memory in memory space hbm",
            r"torch_xla\._XLAC\.\w+",
            r"PJRT_DEVICE",
            r"Bad StatusOr access",
            r"XLA:TPU",
            r"Shapes must be equal rank, but are \d+ and \d+",
            r"Do not use the XLA device before calling xmp\.spawn",
            # the runtime finding no TPU, or fewer devices than asked for
            r"Failed to get global TPU topology",
            # XRT's multi-process setup: a worker that cannot reach the master process's mesh service
            r"Failed to connect to client mesh master",
            # XLA's compiler failing on the graph (its own advice: dump the HLO and report it)
            r"HLO -> LLVM IR lowering|Rerun with --xla_dump_to",
            r"TPU initialization failed",
            r"Cannot replicate if number of devices \(\d+\) is different from \d+",
            r"XLA tensors do not have storage",
        ),
        priority=50,
        facts=(
            (r"(?P<xla_status>(?:Invalid argument|Resource exhausted|Failed precondition|Aborted|Internal|Unimplemented|"
             r"INVALID_ARGUMENT|RESOURCE_EXHAUSTED|FAILED_PRECONDITION|ABORTED|INTERNAL|UNIMPLEMENTED):[^\n]{0,160})",
             {"xla_status": "str"}),
        ),
        causes=(
            "A graph too large or too dynamic for the TPU compiler (many parameters, changing shapes).",
            "CPU tensors mixed with XLA tensors (a tensor not moved to xm.xla_device()).",
            "A TPU runtime / torch_xla version mismatch or a TPU that is not reachable.",
            "TPU memory exhausted (RESOURCE_EXHAUSTED).",
        ),
        fixes=(
            Fix("Move every input to the XLA device", "import torch_xla.core.xla_model as xm\ndevice = xm.xla_device()\nx = x.to(device)"),
            Fix("Keep shapes static so graphs are reused", "DataLoader(ds, batch_size=bs, drop_last=True)  # and pad sequences"),
            Fix("Read the metrics report for compilations and CPU fallbacks", "import torch_xla.debug.metrics as met\nprint(met.short_metrics_report())"),
        ),
        first_step="Read the status line (Invalid argument / Resource exhausted / ...) and check the metrics "
        "report: many compilations mean dynamic shapes.",
        sources=("https://github.com/pytorch/xla/issues/1963",),
    ),
)

ENTRIES += (
    Entry(
        slug="xla_input_on_cpu",
        title="A tensor on the CPU reached an operation on the XLA device",
        summary=("An operation on the XLA device received a tensor that is still on the CPU[[ ({cpu_type})]]: the "
                 "model (or one tensor) was moved to the XLA device and its input was not."),
        keywords=("not an xla tensor", "check failed: xtensor"),
        patterns=(r"Input tensor is not an XLA tensor",
                  # torch_xla 1.x's wording of the same check, in its bridge's GetXlaTensor
                  r"aten_xla_bridge\.cpp:\d+ : Check failed: xtensor\b"),
        priority=56,
        extra={"family": "device_mismatch"},
        facts=((r"Input tensor is not an XLA tensor: (?P<cpu_type>[\w.]{1,80})", {"cpu_type": "str"}),),
        causes=("The batch (or a tensor made inside forward, e.g. torch.zeros without device=) stays on the CPU while "
                "the model's parameters are on the XLA device.",),
        fixes=(Fix("Move the batch to the model's device",
                   "import torch_xla.core.xla_model as xm\ndevice = xm.xla_device()\nx = x.to(device)"),),
        first_step="Move the input (and any tensor created inside forward) to the XLA device, e.g. "
        "x = x.to(xm.xla_device()), before calling the model.",
        sources=("https://pytorch.org/xla/release/2.5/index.html",),
    ),
)

# --- what makes a torch_xla run slow: the kinds of ``nbdebug.xla.diagnose``'s findings ------------------------

_TROUBLESHOOT = "https://github.com/pytorch/xla/blob/master/docs/source/learn/troubleshoot.md"
_METRICS_ANALYSIS = "https://github.com/pytorch/xla/blob/master/torch_xla/csrc/runtime/metrics_analysis.cc"

ENTRIES += (
    Entry(
        slug="recompilation",
        title="torch_xla keeps compiling new graphs",
        severity=Severity.WARNING,
        contexts=(),
        summary="New graphs keep appearing: each one costs a compilation, and a step waits for it.",
        causes=(
            "Dynamic input shapes (unpadded sequence lengths, a short last batch).",
            "A Python scalar baked into the graph as a constant (a changing exponent, threshold or schedule value).",
            "Data-dependent shapes (boolean indexing, nonzero).",
        ),
        fixes=(
            Fix("Pad or bucket sequence lengths to a few fixed sizes",
                "n = -(-x.shape[1] // 64) * 64  # round up to a multiple of 64\n"
                "x = torch.nn.functional.pad(x, (0, 0, 0, n - x.shape[1]))  # x: (B, T, C)"),
            Fix("Give the last batch the same shape", "DataLoader(ds, batch_size=bs, drop_last=True)"),
            Fix("Pass changing Python scalars (schedules, exponents, temperatures) as device tensors",
                "lr_t = torch.tensor(lr, device=device)  # not a Python float"),
            Fix("Replace boolean indexing / nonzero with torch.where so shapes do not depend on data",
                "y = torch.where(mask, x, 0)  # not x[mask]"),
        ),
        sources=(_TROUBLESHOOT, "https://github.com/pytorch/xla/issues/3356", "https://github.com/pytorch/xla/issues/2327"),
    ),
    Entry(
        slug="host_sync",
        title="The step reads tensor values on the host",
        severity=Severity.WARNING,
        contexts=(),
        summary="Each read (.item(), print(tensor), float(t), `if tensor:`) stops tracing, runs the graph so far "
        "and waits for it.",
        fixes=(
            Fix("Log through a step closure instead of reading values inside the step",
                "xm.add_step_closure(lambda: print(loss.item()))"),
            Fix("Accumulate on the device and read every N steps, after torch_xla.sync()",
                "total += loss.detach()\nif step % 50 == 0:\n    torch_xla.sync()\n    print(total.item())"),
            Fix("Replace Python control flow on tensors with torch.where", "x = torch.where(cond, a, b)"),
        ),
        sources=(_TROUBLESHOOT, "https://github.com/pytorch/xla/issues/1155"),
    ),
    Entry(
        slug="cpu_fallback",
        title="Ops without an XLA lowering ran on the CPU",
        severity=Severity.WARNING,
        contexts=(),
        summary="Each call copies its inputs to the host, cuts the graph and uploads the result.",
        fixes=(
            Fix("Move the op out of the step: precompute it on the CPU in the data pipeline"),
            Fix("Rewrite it with ops that have an XLA lowering"),
            Fix("Ask for a lowering at https://github.com/pytorch/xla/issues"),
        ),
        sources=(_TROUBLESHOOT, "https://github.com/pytorch/xla/issues/2296"),
    ),
    Entry(
        slug="missing_sync",
        title="No torch_xla.sync() at the end of the step",
        severity=Severity.WARNING,
        contexts=(),
        summary="Without a sync the lazy graph grows with every step and is compiled once, huge, when a value "
        "is finally read.",
        fixes=(
            Fix("Call torch_xla.sync() at the end of every training step (xm.mark_step() before 2.8)",
                "for batch in loader:\n    train_step(batch)\n    torch_xla.sync()"),
            Fix("Or iterate over an MpDeviceLoader, which syncs for you",
                "import torch_xla.distributed.parallel_loader as pl\nloader = pl.MpDeviceLoader(loader, device)"),
        ),
        sources=(_TROUBLESHOOT,),
    ),
    # ATen ops known to fall back to the CPU (patterns match the counter name, e.g. ``aten::nonzero``; the summary
    # says why, in a few words, for the finding's message)
    Entry(
        slug="xla_fallback_nonzero",
        title="aten::nonzero has a data-dependent output shape (also behind x[mask] and masked_select)",
        severity=Severity.WARNING,
        contexts=("xla_fallback",),
        patterns=(r"^aten::nonzero",),
        summary="data-dependent output shape (also behind x[mask] and masked_select)",
        fixes=(
            Fix("Keep shapes static: masked sums/means with torch.where instead of x[mask]",
                "y = torch.where(mask, x, torch.zeros_like(x))"),
            Fix("Or use the bounded-dynamic lowering", "XLA_EXPERIMENTAL=nonzero:masked_select python train.py"),
        ),
        sources=("https://github.com/pytorch/xla/pull/1401",),
    ),
    Entry(
        slug="xla_fallback_masked_select",
        title="aten::masked_select has a data-dependent output shape",
        severity=Severity.WARNING,
        contexts=("xla_fallback",),
        patterns=(r"^aten::masked_select",),
        summary="data-dependent output shape",
        fixes=(
            Fix("Use torch.where and reduce with a mask", "(torch.where(mask, x, 0)).sum() / mask.sum()"),
            Fix("Or use the bounded-dynamic lowering", "XLA_EXPERIMENTAL=nonzero:masked_select python train.py"),
        ),
        sources=("https://github.com/pytorch/xla/issues/2918",),
    ),
    Entry(
        slug="xla_fallback_unique",
        title="torch.unique (aten::unique / aten::_unique) has a data-dependent output shape",
        severity=Severity.WARNING,
        contexts=("xla_fallback",),
        patterns=(r"^aten::_?unique",),
        summary="data-dependent output shape (torch.unique)",
        fixes=(
            Fix("Use a fixed-size count instead of torch.unique", "counts = torch.bincount(x, minlength=n_classes)"),
            Fix("Or compute it on the CPU outside the step"),
        ),
        sources=("https://github.com/pytorch/xla/issues/4432",),
    ),
    Entry(
        slug="xla_fallback_fft",
        title="torch.fft has no XLA lowering in torch_xla 2.9 (verified: aten::_fft_r2c)",
        severity=Severity.WARNING,
        contexts=("xla_fallback",),
        patterns=(r"^aten::_fft_",),
        summary="no XLA lowering for torch.fft in torch_xla 2.9",
        fixes=(
            Fix("Compute the FFT in the data pipeline on the CPU"),
            Fix("Or express a small fixed-size DFT as a matmul with a precomputed (cos, sin) matrix on the device",
                "k = torch.arange(n)\nangle = 2 * math.pi * k[:, None] * k[None, :] / n\n"
                "re, im = x @ torch.cos(angle).to(device), -x @ torch.sin(angle).to(device)"),
        ),
        # measured on torch_xla 2.9.0 (the fft_fallback scenario of the integration tests)
        sources=(),
    ),
    Entry(
        slug="xla_fallback_median",
        title="aten::median with a dim has no XLA lowering",
        severity=Severity.WARNING,
        contexts=("xla_fallback",),
        patterns=(r"^aten::median",),
        summary="no XLA lowering for median with a dim",
        fixes=(
            Fix("Sort and pick the middle index instead of torch.median(x, dim)",
                "m = torch.sort(x, dim).values.select(dim, (x.shape[dim] - 1) // 2)"),
        ),
        sources=("https://github.com/pytorch/xla/blob/master/torch_xla/csrc/aten_fallback.cpp",),
    ),
    Entry(
        slug="xla_not_imported",
        title="The 'xla' device is used before torch_xla registered it",
        summary=("torch knows the 'xla' device only once torch_xla has been imported in this process; here the device "
                 "was used without it (or with a torch_xla that does not match torch, so it could not register)."),
        keywords=("support for xla devices",),
        patterns=(r"not linked with support for xla devices",),
        priority=93,
        causes=(
            "import torch_xla is missing from the process that uses device 'xla' (a DataLoader worker, a spawned "
            "process, a script run without it).",
            "torch and torch_xla of different releases: the import fails or registers nothing.",
        ),
        fixes=(
            Fix("Import torch_xla before using the device", "import torch\nimport torch_xla\n"
                "import torch_xla.core.xla_model as xm\ndevice = xm.xla_device()"),
            Fix("Install matching releases", "pip install 'torch==X.Y.*' 'torch_xla==X.Y.*'"),
        ),
        first_step="Import torch_xla (and torch_xla.core.xla_model) in the process before it uses device 'xla', and "
        "check that torch and torch_xla are the same release.",
        sources=("https://pytorch.org/xla/",),
    ),
)

THRESHOLDS: tuple[Threshold, ...] = (
    Threshold(
        "warmup_graphs", 2,
        "a training step compiles one graph without optimizer state and one with it (measured on 2.9: "
        "SGD+momentum and Adam loops compile 2 graphs, then only hit the cache)",
        "https://github.com/pytorch/xla/issues/2327",
    ),
    Threshold(
        "storm_compiles_per_step", 0.5,
        "torch_xla's own analyzer calls CompileTime 'too frequent' above 0.5 compiles per step",
        _METRICS_ANALYSIS,
    ),
    Threshold(
        "host_reads_per_step", 0.5,
        "torch_xla's own analyzer calls TransferFromDeviceTime 'too frequent' above 0.5 per step; fewer is "
        "occasional logging",
        _METRICS_ANALYSIS,
    ),
    Threshold(
        "min_steps", 3,
        "below three steps, warm-up compiles cannot be told from recompilation",
        "https://github.com/pytorch/xla/issues/1368",
    ),
    Threshold(
        "cache_hit_ratio", 0.5,
        "when fewer than half of the graphs run came from the cache, new graphs keep appearing",
        "https://github.com/pytorch/xla/issues/3356",
    ),
)
