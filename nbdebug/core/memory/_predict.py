"""``predict_memory``: the peak of one training step, predicted on fake tensors, and the what-ifs built on it."""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nbdebug._units import fmt_bytes, parse_bytes
from nbdebug.core.memory._predict_alloc import CUDA_CONTEXT_BYTES, round_size, simulate
from nbdebug.core.memory._predict_result import KindBytes, MemoryFix, MemoryPrediction, ModuleBytes
from nbdebug.core.memory._predict_step import (
    Settings,
    autocast,
    autocast_dtype,
    call_model,
    checkpoint_blocks,
    ddp_buckets,
    fake_optimizer,
    is_lightning,
    loss_of,
    unwrap_ddp,
    warm_up,
)
from nbdebug.core.memory._predict_trace import (
    KINDS,
    UNCOUNTED,
    Ledger,
    StepError,
    fake_world,
    trace_step,
    uncounted,
)

__all__ = ["predict_memory", "repredict", "largest_batch", "predicted_fixes"]


@dataclass(frozen=True)
class _Inputs:
    model: Any
    batch: Any
    loss_fn: Any
    optimizer: Any
    step: Any
    device: str
    capacity: int | None
    context_bytes: int


def predict_memory(model: Any, batch: Any = None, loss_fn: Callable[..., Any] | None = None, optimizer: Any = None,
                   *, step: Callable[[Any, Any, Any], Any] | None = None, device: str = "cuda",
                   batch_size: int | None = None, dtype: Any = None, checkpointing: bool = False,
                   accumulation_steps: int = 1, capacity: int | str | None = None,
                   context_bytes: int | None = None) -> MemoryPrediction:
    """Predict the peak memory of one steady-state training step without running it.

    The step (forward, loss, backward, optimizer step, after a first step created the optimizer's state; the
    gradients set to None between steps, as ``zero_grad()`` does) runs on fake copies of ``model``, ``batch``
    and ``optimizer`` (shapes, no data): nothing is allocated and the user's objects are not touched.

    Parameters
    ----------
    model : torch.nn.Module
        The model (a Hugging Face model, a LightningModule, any module); it may live on the meta device.
    batch : tensor, tuple ``(x, y, ...)`` or dict
        One batch: ``model(**batch)`` for a dict, ``model(x)`` for a tuple, else ``model(batch)``.
    loss_fn : callable, optional
        ``loss_fn(out, y)``; without it the output's ``.loss`` (Hugging Face) or a stand-in (noted).
    optimizer : torch.optim.Optimizer, class or name, optional
        The user's optimizer (copied with its state), or a class / ``"adamw"`` for a fresh one; None: no step.
    step : callable, optional
        ``step(model, batch, optimizer)`` running one step of a custom loop on the objects it is given.
    device : ``"cuda"`` or ``"cpu"``
        ``"cuda"`` models the caching allocator (rounding, segments) and adds the CUDA context.
    batch_size, dtype, checkpointing, accumulation_steps
        Changes to the step: the leading size of the batch, bf16/fp16 autocast, activation checkpointing of every
        repeated block, gradient accumulation over that many micro-batches.
    capacity : int or str, optional
        The budget (``"8 GiB"``); default the current GPU's memory when ``device="cuda"`` and one is present.
    context_bytes : int, optional
        Replaces the CUDA context estimate (``CUDA_CONTEXT_BYTES``).

    Returns
    -------
    MemoryPrediction
    """
    dev = str(device).split(":")[0]
    if dev not in ("cuda", "cpu"):
        raise ValueError(f"device={device!r}: expected 'cuda' or 'cpu'")
    if accumulation_steps < 1:
        raise ValueError(f"accumulation_steps must be at least 1, got {accumulation_steps}")
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if batch is None and step is None and not is_lightning(model):
        raise ValueError("predict_memory needs a batch (or step= for a custom loop)")
    settings = Settings(batch_size=batch_size, dtype=autocast_dtype(dtype), checkpointing=bool(checkpointing),
                        optimizer=None, accumulation_steps=accumulation_steps)
    inputs = _Inputs(model, batch, loss_fn, optimizer, step, dev, _capacity(capacity, dev),
                     CUDA_CONTEXT_BYTES if context_bytes is None else int(context_bytes))
    return _predict(inputs, settings)


def _capacity(capacity: int | str | None, device: str) -> int | None:
    if isinstance(capacity, str):
        return parse_bytes(capacity)
    if capacity is not None:
        return int(capacity)
    import sys

    torch: Any = sys.modules.get("torch")
    if device == "cuda" and torch is not None and torch.cuda.is_available():
        return int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)
    return None


def _predict(inputs: _Inputs, settings: Settings) -> MemoryPrediction:
    import torch

    t0 = time.perf_counter()
    notes: list[str] = []
    world = fake_world(inputs.device)
    user_model, ddp = unwrap_ddp(inputs.model)
    fmodel = world.module(user_model)
    world.module_names = {id(m): n or type(m).__name__ for n, m in fmodel.named_modules()}  # type: ignore[attr-defined]
    if settings.checkpointing and checkpoint_blocks(fmodel) == 0:
        notes.append("checkpointing: the model has no repeated blocks to checkpoint; nothing was changed")
    lightning = is_lightning(user_model) and inputs.step is None
    with world.mode:
        opt_choice = settings.optimizer if settings.optimizer is not None else inputs.optimizer
        if opt_choice is None and lightning:
            opt_choice = _lightning_optimizer(fmodel)
        fopt = fake_optimizer(world, fmodel, user_model, opt_choice, inputs.device)
        fbatch = world.batch(inputs.batch, settings.batch_size) if inputs.batch is not None else None
    if inputs.step is None:
        with uncounted(world):
            warm_up(fopt)
    params = [p for p in fmodel.parameters()]
    amp = settings.dtype
    buckets: list[Any] = []
    if ddp is not None:
        with world.mode:
            buckets = [torch.empty(n, dtype=d, device=world.traced_on) for n, d in ddp_buckets(ddp, params)]
        notes.append(f"DistributedDataParallel: its {len(buckets)} gradient buckets are counted as gradients "
                     "(they live as long as the wrapper)" + (
                         "; with gradient_as_bucket_view=True the gradients are views of them, yet counted besides "
                         "them here: an overestimate by the gradients' size" if ddp.gradient_as_bucket_view else ""))

    def registered(ledger: Ledger) -> None:
        def gradient(p: Any) -> None:
            ledger.note(p.grad, kind="gradients")

        for p in params:
            ledger.note(p, kind="parameters")
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(gradient)
        for b in fmodel.buffers():
            ledger.note(b, kind="parameters")
        for t in _state_tensors(fopt):
            ledger.note(t, kind="optimizer state")
        for t in _tensors(fbatch):
            ledger.note(t, kind="batch")
        for t in buckets:
            ledger.note(t, kind="gradients")

    def run(ledger: Ledger) -> None:
        if inputs.step is not None:
            inputs.step(fmodel, fbatch, fopt)
            return
        for _ in range(settings.accumulation_steps):
            with autocast(world.traced_on, amp):
                if lightning:
                    out = fmodel.training_step(fbatch, 0)
                    loss = out["loss"] if isinstance(out, dict) else out
                else:
                    out = call_model(fmodel, fbatch)
                    loss = loss_of(out, fbatch, inputs.loss_fn, notes)
            if settings.accumulation_steps > 1:
                loss = loss / settings.accumulation_steps
            loss.backward()
        if fopt is not None:
            fopt.step()
            fopt.zero_grad(set_to_none=True)

    def finished(ledger: Ledger) -> None:
        for t in _state_tensors(fopt):  # state a step callable created in the step itself
            ledger.note(t, kind="optimizer state")

    if inputs.step is not None:  # a custom loop: its first run creates the optimizer's state
        with uncounted(world):
            inputs.step(fmodel, fbatch, fopt)
            for p in params:
                p.grad = None
    ledger = trace_step(world, run, registered, finished)
    if ledger.stand_ins:
        lines = sorted(set(ledger.stand_ins))
        notes.append("tensor values were read (.item() or a bool test) at " + "; ".join(lines[:3]) +
                     ": they were stand-ins (1, or False for a test), so control flow that depends on them may differ")
    for op in sorted(ledger.uncounted):
        notes.append("not counted: " + UNCOUNTED[op])
    if world.traced_on != inputs.device:
        notes.append("this torch has no CUDA: the step was traced with CPU kernels (attention and autocast take "
                     "their CPU paths) and the CUDA allocator modelled on those tensors")
    if settings.optimizer is None and inputs.optimizer is None and not lightning and inputs.step is None:
        notes.append("no optimizer was given: no optimizer state or step is counted")
    result = _result(ledger, inputs, settings, notes, torch.__version__, fopt)
    return dataclasses.replace(result, seconds=time.perf_counter() - t0)


def _lightning_optimizer(fmodel: Any) -> Any:
    conf = fmodel.configure_optimizers()
    if isinstance(conf, dict):
        conf = conf.get("optimizer")
    if isinstance(conf, (list, tuple)):
        conf = conf[0] if conf else None
        if isinstance(conf, (list, tuple)):
            conf = conf[0] if conf else None
    return conf


def _tensors(obj: Any) -> list[Any]:
    import torch
    from torch.utils._pytree import tree_leaves

    return [x for x in tree_leaves(obj) if isinstance(x, torch.Tensor)] if obj is not None else []


def _state_tensors(optimizer: Any) -> list[Any]:
    import torch

    if optimizer is None:
        return []
    return [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]


def _result(ledger: Ledger, inputs: _Inputs, settings: Settings, notes: list[str], version: str,
            optimizer: Any = None) -> MemoryPrediction:
    cuda = inputs.device == "cuda"
    size_of: Callable[[int], int] = round_size if cuda else int
    level, peak, peak_i = 0, 0, -1
    for i, (_, delta) in enumerate(ledger.events):
        level += size_of(delta) if delta > 0 else -size_of(-delta) if delta < 0 else 0
        if level > peak:
            peak, peak_i = level, i
    alive: set[int] = set()
    for serial, delta in ledger.events[:peak_i + 1]:
        (alive.add if delta > 0 else alive.discard)(serial)
    kinds: dict[str, int] = defaultdict(int)
    made: dict[str, int] = defaultdict(int)  # allocated by the step itself
    modules: dict[str, int] = defaultdict(int)
    for serial in alive:
        info = ledger.storages[serial]
        if info.nbytes == 0:
            continue
        kind = ledger.kind_of(serial)
        kinds[kind] += size_of(info.nbytes)
        if info.phase != "setup":
            made[kind] += size_of(info.nbytes)
        if kind == "activations":
            modules[info.module or "(outside any module)"] += size_of(info.nbytes)
    state = sum(size_of(s.nbytes) for s in ledger.storages.values() if s.phase == "setup" and s.nbytes)
    place = ledger.storages[ledger.events[peak_i][0]] if peak_i >= 0 else None
    reserved = simulate(ledger.events).reserved_peak if cuda else peak
    if cuda:
        notes.append(f"the CUDA context ({fmt_bytes(inputs.context_bytes)}) is an estimate, not a measurement: "
                     "pass context_bytes= with your own figure")
    return MemoryPrediction(
        device=inputs.device, peak_bytes=peak, reserved_bytes=reserved,
        context_bytes=inputs.context_bytes if cuda else 0,
        by_kind=tuple(KindBytes(k, kinds[k]) for k in KINDS if kinds.get(k)),
        step_by_kind=tuple(KindBytes(k, made[k]) for k in KINDS if made.get(k)),
        activations_by_module=tuple(ModuleBytes(m, b) for m, b in sorted(modules.items(), key=lambda x: -x[1])),
        peak_op=getattr(place, "op", "") or "", peak_module=getattr(place, "module", "") or "",
        peak_phase=getattr(place, "phase", "") or "", state_bytes=state,
        settings={"batch_size": settings.batch_size, "dtype": settings.dtype or "as given",
                  "checkpointing": settings.checkpointing, "optimizer": type(optimizer).__name__ if optimizer is not None
                  else _opt_name(settings, inputs),
                  "accumulation_steps": settings.accumulation_steps, "torch": version},
        notes=tuple(notes), partial=bool(ledger.stand_ins or ledger.uncounted), capacity_bytes=inputs.capacity,
        _inputs=(inputs, settings))


def _opt_name(settings: Settings, inputs: _Inputs) -> str:
    opt = settings.optimizer if settings.optimizer is not None else inputs.optimizer
    if opt is None:
        return "none"
    if isinstance(opt, str):
        return opt
    return opt.__name__ if isinstance(opt, type) else type(opt).__name__


# -- what if ----------------------------------------------------------------------------------------------------

def _batch_size_of(pred: MemoryPrediction) -> int | None:
    inputs, settings = pred._inputs
    if settings.batch_size is not None:
        return int(settings.batch_size)
    tensors = _tensors(inputs.batch) if inputs.batch is not None else []
    first = next((t for t in tensors if t.dim()), None)
    return int(first.shape[0]) if first is not None else None


def repredict(pred: MemoryPrediction, **changes: Any) -> MemoryPrediction:
    """``pred``'s step with some settings changed (``MemoryPrediction.what_if``)."""
    inputs, settings = pred._inputs
    allowed = {f.name for f in dataclasses.fields(Settings)}
    unknown = sorted(set(changes) - allowed)
    if unknown:
        raise TypeError(f"what_if got {', '.join(unknown)}; expected some of {', '.join(sorted(allowed))}")
    if "dtype" in changes:
        changes["dtype"] = autocast_dtype(changes["dtype"])
    return _predict(inputs, dataclasses.replace(settings, **changes))


#: the largest batch size ``largest_batch`` searches
MAX_BATCH = 1 << 16


def largest_batch(pred: MemoryPrediction, budget: int) -> int:
    """The largest batch size (at most ``MAX_BATCH``) whose step's ``total_bytes`` fits ``budget``, searched from
    two predictions (the peak grows about linearly with the batch) and checked by predicting around the estimate."""
    base = _batch_size_of(pred)
    if base is None:
        raise ValueError("largest_batch needs a batch with a leading batch dimension")

    cache: dict[int, int] = {}

    def need(b: int) -> int:
        if b not in cache:
            cache[b] = repredict(pred, batch_size=b).total_bytes
        return cache[b]

    one, two = need(1), need(2)
    if one > budget:
        return 0
    slope = max(1, two - one)
    lo, hi = 1, 0  # lo fits; hi (once found) does not
    b = min(MAX_BATCH, max(2, int((budget - one) // slope) + 1))
    if b == MAX_BATCH and need(b) <= budget:
        return MAX_BATCH
    while not hi:  # the linear guess, then up until one does not fit
        if need(b) <= budget:
            lo, b = b, min(MAX_BATCH, b + max(1, b // 8))
            if lo == MAX_BATCH:
                return lo
        else:
            hi = b
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if need(mid) <= budget else (lo, mid)
    return lo


def predicted_fixes(pred: MemoryPrediction) -> tuple[MemoryFix, ...]:
    """The usual fixes for an out-of-memory step, each predicted, best (lowest peak) first."""
    inputs, settings = pred._inputs
    base = pred.total_bytes
    candidates: list[tuple[str, str, dict[str, Any]]] = []
    size = _batch_size_of(pred)
    if size and size >= 2:
        half = size // 2
        steps = settings.accumulation_steps * 2
        candidates.append((f"batch {half} with {steps} accumulation steps (same effective batch)",
                           f"# micro-batches of {half}; loss = loss / {steps}; optimizer.step() every {steps} "
                           "backward calls", {"batch_size": half, "accumulation_steps": steps}))
    if settings.dtype is None:
        candidates.append(("bf16 autocast", "with torch.autocast('cuda', dtype=torch.bfloat16):\n"
                           "    loss = loss_fn(model(x), y)", {"dtype": "bfloat16"}))
    if not settings.checkpointing:
        candidates.append(("activation checkpointing of every block",
                           "torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)",
                           {"checkpointing": True}))
    current = _opt_name(settings, inputs).lower()
    if current in ("adam", "adamw"):
        candidates.append(("an optimizer with less state (Adafactor)",
                           "optimizer = torch.optim.Adafactor(model.parameters(), lr=1e-3)",
                           {"optimizer": "adafactor"}))
    fixes = []
    for title, code, change in candidates:
        try:
            alt = repredict(pred, **change)
        except (StepError, ValueError):  # a fix this step cannot take: left out of the table
            continue
        fits = None if pred.capacity_bytes is None else alt.total_bytes <= pred.capacity_bytes
        fixes.append(MemoryFix(title, code, alt.total_bytes, base - alt.total_bytes, fits))
    return tuple(sorted(fixes, key=lambda f: f.peak_bytes))
