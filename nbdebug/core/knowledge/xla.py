"""torch_xla."""

from __future__ import annotations

from nbdebug.core._findings import Fix
from nbdebug.core.knowledge._schema import Entry
from nbdebug.core.knowledge._sources import SEED_GPU

__all__ = ["ENTRIES"]

ENTRIES: tuple[Entry, ...] = (
    Entry(
        slug="xla_error",
        title="PyTorch/XLA (TPU) error",
        summary="The XLA runtime reported an error[[: {xla_status}]].",
        keywords=("xla", "tpu", "hbm", "pjrt", "statusor", "equal rank"),
        patterns=(
            r"Exception in device=TPU:\d+",
            r"torch_xla/csrc/[\w/.]+:\d+ : Check failed",
            r"XRTCompile",
            r"tensorflow/compiler/xla/[\w/.]+\.(?:cc|h):\d+(?:\\?\]| :)",
            r"xla_client/[\w/.]+:\d+\]",
            r"\btorch_xla::(?:runtime|bridge|XLAGraphExecutor|tensor_methods)::\w+",
            r"Input tensor is not an XLA tensor",
            r"No matching devices found for '/job:\w*tpu",
            r"torch_xla\.\w+[\w.]*Error",
            r"XlaRuntimeError",
            r"Computation requires more parameters \(\d+\) than supported",
            r"Ran out of memory in memory space hbm",
            r"torch_xla\._XLAC\.\w+",
            r"PJRT_DEVICE",
            r"Bad StatusOr access",
            r"XLA:TPU",
            r"Shapes must be equal rank, but are \d+ and \d+",
            r"Do not use the XLA device before calling xmp\.spawn",
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
        sources=(SEED_GPU, "https://github.com/pytorch/xla/issues/1963"),
    ),
)
