"""What nbdebug knows about torch_xla slowness: thresholds, fixes and the ops without lowerings, with sources.

Every entry is data, tested in ``tests/test_xla_knowledge.py``; ``diagnose`` only reads these tables.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Threshold", "THRESHOLDS", "FIXES", "FallbackOp", "FALLBACK_OPS", "fallback_fix", "SOURCES"]


@dataclass(frozen=True)
class Threshold:
    """A number a finding depends on, and why it has that value."""

    name: str
    value: float
    why: str
    source: str


THRESHOLDS: dict[str, Threshold] = {
    t.name: t
    for t in (
        Threshold(
            "warmup_graphs",
            2,
            "a training step compiles one graph without optimizer state and one with it (measured on 2.9: "
            "SGD+momentum and Adam loops compile 2 graphs, then only hit the cache)",
            "https://github.com/pytorch/xla/issues/2327",
        ),
        Threshold(
            "storm_compiles_per_step",
            0.5,
            "torch_xla's own analyzer calls CompileTime 'too frequent' above 0.5 compiles per step",
            "torch_xla/csrc/runtime/metrics_analysis.cpp (CompileTime too frequent)",
        ),
        Threshold(
            "host_reads_per_step",
            0.5,
            "torch_xla's own analyzer calls TransferFromDeviceTime 'too frequent' above 0.5 per step; fewer is "
            "occasional logging",
            "torch_xla/csrc/runtime/metrics_analysis.cpp (TransferFromDeviceTime too frequent)",
        ),
        Threshold(
            "min_steps",
            3,
            "below three steps, warm-up compiles cannot be told from recompilation",
            "https://github.com/pytorch/xla/issues/1368",
        ),
        Threshold(
            "cache_hit_ratio",
            0.5,
            "when fewer than half of the graphs run came from the cache, new graphs keep appearing",
            "https://github.com/pytorch/xla/issues/3356",
        ),
    )
}

# kind -> (what it costs, the concrete fixes in order); shown in every finding of that kind
FIXES: dict[str, str] = {
    "recompilation": (
        "Make every step trace the same graph: pad or bucket sequence lengths to a few fixed sizes "
        "(e.g. round up to a multiple of 64); use DataLoader(..., drop_last=True) so the last batch has the "
        "same shape; pass changing Python scalars (schedules, exponents, temperatures) as device tensors "
        "(torch.tensor(v, device=dev)) instead of floats; replace boolean indexing / nonzero with "
        "torch.where(mask, x, 0) so shapes do not depend on data."
    ),
    "host_sync": (
        "Do not read tensor values inside the step: no .item(), print(tensor), float(t), or `if tensor:`. Log "
        "through xm.add_step_closure(lambda: print(loss.item())) or accumulate on the device and read after "
        "torch_xla.sync() every N steps; replace Python control flow on tensors with torch.where."
    ),
    "cpu_fallback": (
        "These ops have no XLA lowering and run on the CPU, with a device->host->device round trip each call: "
        "move them out of the step (precompute on the CPU in the data pipeline), or rewrite them with lowered "
        "ops; ask for a lowering at https://github.com/pytorch/xla/issues."
    ),
    "missing_sync": (
        "Call torch_xla.sync() (xm.mark_step() before 2.8) at the end of every training step, or iterate over "
        "a torch_xla.distributed.parallel_loader.MpDeviceLoader, which syncs for you; otherwise the lazy graph "
        "grows with every step and is compiled once, huge, when a value is finally read."
    ),
}


@dataclass(frozen=True)
class FallbackOp:
    """An ATen op (name prefix) known to fall back to the CPU, with the specific fix."""

    prefix: str
    why: str
    fix: str
    source: str


FALLBACK_OPS: tuple[FallbackOp, ...] = (
    FallbackOp(
        "aten::nonzero",
        "data-dependent output shape (also behind x[mask] and masked_select)",
        "keep shapes static: torch.where(mask, x, torch.zeros_like(x)) and masked sums/means instead of x[mask]; "
        "or XLA_EXPERIMENTAL=nonzero:masked_select for the bounded-dynamic lowering",
        "https://github.com/pytorch/xla/pull/1401",
    ),
    FallbackOp(
        "aten::masked_select",
        "data-dependent output shape",
        "use torch.where(mask, x, 0) and reduce with a mask; or XLA_EXPERIMENTAL=nonzero:masked_select",
        "https://github.com/pytorch/xla/issues/2918",
    ),
    FallbackOp(
        "aten::_unique",
        "data-dependent output shape (torch.unique)",
        "use a fixed-size one-hot/bincount with minlength instead of torch.unique, or compute it on the CPU "
        "outside the step",
        "https://github.com/pytorch/xla/issues/4432",
    ),
    FallbackOp(
        "aten::unique",
        "data-dependent output shape (torch.unique)",
        "use a fixed-size one-hot/bincount with minlength instead of torch.unique",
        "https://github.com/pytorch/xla/issues/4432",
    ),
    FallbackOp(
        "aten::_fft_",
        "torch.fft has no XLA lowering in torch_xla 2.9 (verified: aten::_fft_r2c)",
        "compute the FFT in the data pipeline on the CPU, or express a small fixed-size DFT as a matmul with a "
        "precomputed (cos, sin) matrix on the device",
        "measured on torch_xla 2.9.0: tests/xla/scenarios.py fft_fallback",
    ),
    FallbackOp(
        "aten::median",
        "no lowering for median with dim",
        "use torch.sort(x, dim).values and pick the middle index instead of torch.median(x, dim)",
        "torch_xla 2.9 fallback counter aten::median.dim_values (aten_fallback.cpp)",
    ),
)


def fallback_fix(op: str) -> FallbackOp | None:
    """The table entry for a fallback op name (``aten::nonzero``), or None."""
    for entry in FALLBACK_OPS:
        if op.startswith(entry.prefix):
            return entry
    return None


SOURCES = (
    "https://github.com/pytorch/xla/blob/master/docs/source/learn/troubleshoot.md",
    "https://github.com/pytorch/xla/issues/3356",
    "https://github.com/pytorch/xla/issues/1155",
    "https://github.com/pytorch/xla/issues/2296",
)
