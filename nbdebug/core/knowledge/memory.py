"""Memory findings: what a snapshot or a traced cell says about where the memory went.

These entries have no message patterns (the explainer's ``cuda_oom`` entry recognises the error itself); the
memory analyses build findings of these kinds from numbers: the OOM section under a CUDA out-of-memory error
(``nbdebug.core.memory._oom``) and ``MemTrace.findings`` (memory a cell kept alive).
"""

from __future__ import annotations

from nbdebug.core._findings import Fix, Severity
from nbdebug.core.knowledge._schema import Entry, Threshold

__all__ = ["ENTRIES", "THRESHOLDS"]

_ALLOC_CONF = "https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf"
_MEMORY_DOCS = "https://docs.pytorch.org/docs/stable/torch_cuda_memory.html"

ENTRIES: tuple[Entry, ...] = (
    Entry(
        slug="memory_fragmentation",
        title="Fragmented GPU memory: enough is free, but not in one block",
        severity=Severity.ERROR,
        summary=("The caching allocator holds enough reserved-but-free memory for the request, but no single free "
                 "block is large enough."),
        fixes=(
            Fix("Let the allocator grow segments instead of cutting new ones (set before CUDA is initialised)",
                'import os\nos.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"'),
            Fix("Return the cached blocks to CUDA before the large allocation", "torch.cuda.empty_cache()"),
        ),
        sources=(_ALLOC_CONF,),
        contexts=(),
    ),
    Entry(
        slug="memory_exhausted",
        title="The GPU's memory is genuinely in use",
        severity=Severity.ERROR,
        summary="The request is larger than all the memory the allocator has free: the tensors alive fill the GPU.",
        fixes=(
            Fix("Make the step smaller: a smaller batch, or gradient accumulation over micro-batches"),
            Fix("Keep fewer activations: activation checkpointing",
                "from torch.utils.checkpoint import checkpoint\ny = checkpoint(block, x, use_reentrant=False)"),
            Fix("Use less memory per number: mixed precision",
                "with torch.autocast('cuda', dtype=torch.bfloat16):\n    loss = model(x)"),
        ),
        sources=(_MEMORY_DOCS,),
        contexts=(),
    ),
    Entry(
        slug="failed_cell_holds_memory",
        title="The failed cell's tensors are still alive",
        severity=Severity.INFO,
        summary=("The stored traceback (sys.last_traceback, and IPython's record of the last error) keeps every "
                 "frame of the failed cell, with its local tensors, in memory."),
        fixes=(
            Fix("Drop those references and return the memory before retrying",
                "nbdebug.core.memory.release_failed_cell()"),
        ),
        contexts=(),
    ),
    Entry(
        slug="memory_retained",
        title="Memory allocated by the cell is still alive after it",
        severity=Severity.WARNING,
        summary=("Memory allocated during the cell was not freed by its end: a result kept on purpose, or a leak "
                 "that grows every time the cell runs."),
        fixes=(
            Fix("Keep numbers, not graphs: store loss.item() instead of the loss tensor", "losses.append(loss.item())"),
            Fix("Run inference without building a graph", "with torch.no_grad():\n    out = model(x)"),
            Fix("Delete what you no longer need", "del activations"),
        ),
        sources=(_MEMORY_DOCS,),
        contexts=(),
    ),
    Entry(
        slug="training_state",
        title="What the cell kept is what training keeps: the model, its gradients, the optimizer's state",
        severity=Severity.INFO,
        summary=("Training keeps memory on purpose: the model's parameters; a gradient the size of each parameter, "
                 "which backward() leaves in .grad until the next zero_grad(); and the optimizer's state, created by "
                 "its first step() (Adam: two buffers per parameter; SGD with momentum: one).  Each is made once "
                 "and reused, so memory does not grow from step to step."),
        # nothing needs fixing: each fix holds less of one part (the finding keeps those of the parts it saw)
        fixes=(
            Fix("Gradients: to hold less between steps, free them as soon as the step is done",
                "optimizer.step()\noptimizer.zero_grad(set_to_none=True)"),
            Fix("Optimizer state: SGD with momentum keeps one buffer per parameter where Adam keeps two",
                "optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)"),
            Fix("Parameters: half the bytes in bfloat16, where the model trains well in it",
                "model = model.to(torch.bfloat16)"),
        ),
        sources=("https://docs.pytorch.org/docs/stable/generated/torch.optim.Optimizer.zero_grad.html",
                 "https://docs.pytorch.org/docs/stable/generated/torch.optim.Adam.html"),
        contexts=(),
    ),
    Entry(
        slug="memory_other_threads",
        title="Allocations made by other threads are not in this report",
        severity=Severity.INFO,
        summary=("PyTorch's profiler reports CPU memory per thread: memtrace records the thread that runs the block, "
                 "and names the other threads that ran meanwhile, with how much the process's memory grew."),
        fixes=(
            Fix("Run the code whose memory you want to see on the thread that runs the block, or trace inside the "
                "thread itself", "def target():\n    with nbdebug.memtrace('cpu') as rec:\n        work()"),
        ),
        sources=("https://docs.pytorch.org/docs/stable/profiler.html",),
        contexts=(),
    ),
)

THRESHOLDS: tuple[Threshold, ...] = (
    Threshold(
        name="memory_retained_min_bytes",
        value=1024**2,
        why=("Below 1 MiB, memory a cell keeps is usually a scalar result or the allocator's rounding, not worth a "
             "warning."),
        source="nbdebug's choice (small enough to catch a kept loss graph of a toy model)",
    ),
    Threshold(
        name="memory_graph_min_bytes",
        value=64 * 1024,
        why=("A list of tensors with autograd graphs is the classic leak when the graphs hold what was saved for "
             "their backward: even a toy model's step saves a (64, 256) float32 activation, 64 KiB.  After "
             "backward() those are freed and a kept loss holds a few bytes of its own: no leak to warn about."),
        source="nbdebug's choice (measured: 5 kept losses after backward() keep 5 KiB; before it, 640 KiB)",
    ),
)
