"""The doctor's runs beside the overfit run, each on a fresh copy: the zero-input baseline (a model that learns as
well without its input ignores it), two seeded runs (``reproducibility``, and numpy generators torch's seed does
not reach), and the time spent waiting for the DataLoader (``dataloader_wait``).
"""

from __future__ import annotations

import math
import time
from typing import Any

from nbdebug.core._findings import Fix
from nbdebug.core.doctor._input_use import output_uses_input
from nbdebug.core.doctor._inputs import step_optimizer, to_device
from nbdebug.core.doctor._repro import check_reproducible, unseeded_generators
from nbdebug.core.doctor._session import Session, fixes_for
from nbdebug.core.doctor._train_checks import one_step, train
from nbdebug.core.knowledge import threshold

__all__ = ["zero_input_baseline", "reproducibility", "dataloader_wait"]


def zero_input_baseline(s: Session) -> None:
    """Train a copy on zeroed inputs: a model that learns as well without its input ignores it."""
    if not s.losses:
        return
    init = s.initial_loss if s.initial_loss is not None else s.losses[0]
    tail = max(1, len(s.losses) // 10)
    real = min(s.losses[-tail:])
    if not math.isfinite(real):
        s.check("zero-input baseline", "skipped: the real run diverged")
        return
    if real <= s.fit_target():
        # the real input fits the batch; a zero input that also does is memorising through biases only
        s.check("zero-input baseline", "skipped: the real input fits the batch")
        return
    if s.unstable:
        s.check("zero-input baseline", "skipped: the real run is unstable")
        return
    if s.cut_by_budget:
        s.check("zero-input baseline", "skipped: the real run stopped at the time budget")
        return
    if s.has("ignores_input"):
        s.check("zero-input baseline", "skipped: the output does not depend on the input")
        return
    floor = s.label_floor()
    if floor is not None and s.learned_share() >= threshold("overfit_learns_rel"):
        # a zero input can reach the label frequencies' loss at best: the real run is already well below it
        s.check("zero-input baseline", f"skipped: the real input takes the loss to {real:.4g}, well under the "
                f"{floor:.4g} that the label frequencies alone give")
        return
    work, opt = s.fresh()
    zeros = s.loss.zeroed_inputs()
    try:
        s.baseline_losses = train(s, work, opt, zeros, steps=len(s.losses), phase="zero-input baseline",
                                          deadline=s.deadline(0.7))
    except Exception as e:  # a model that cannot take zeros (e.g. an embedding) still gets the other checks
        s.check("zero-input baseline", f"could not run: {e!r}")
        return
    if not s.baseline_losses:
        return
    if len(s.baseline_losses) < len(s.losses):  # cut by the budget: compare at the same step
        real = min(s.losses[max(0, len(s.baseline_losses) - tail): len(s.baseline_losses)])
    zero = min(s.baseline_losses[-tail:])
    s.check("zero-input baseline", f"real input -> {real:.4g}, zero input -> {zero:.4g}")
    if not math.isfinite(zero):
        return
    gap = init - real
    if gap <= 0.01 * abs(init):
        return  # nothing learned at all: cannot_overfit says so
    share = (init - zero) / gap
    # the zero-input run must itself learn that much: a zero input can start lower (e.g. at chance level
    # behind BatchNorm) without learning anything
    zero_gap = s.baseline_losses[0] - zero
    margin = threshold("zero_input_margin")
    # and the real input must not end well under the zero input's loss: a regression's loss falls mostly by learning
    # the targets' mean, which a zero input learns too, and what the input adds is the rest (tiny inputs add slowly)
    if zero <= real + margin * gap and zero_gap >= (1 - margin) * gap and zero - real <= margin * abs(zero):
        # reached only for an output moved by zeroing the inputs, but by under input_use_rel (an input that barely counts)
        if output_uses_input(s, work):
            return
        how = "as low as" if zero <= real else f"{share:.0%} of the way to"
        s.add("ignores_input", f"with all inputs zeroed the model's loss goes from {init:.4g} to {zero:.4g}, "
              f"{how} the {real:.4g} it reaches with the real inputs: it learns the target statistics, not "
              "the input", ("inputs",), evidence={"real": real, "zero": zero, "initial": init})


def reproducibility(s: Session) -> None:
    """Two runs of a few steps with the same seed must give the same losses and parameters."""
    n = min(3, s.options.steps)
    if s.out_of_time("two seeded runs", 2 * n):
        return

    def run() -> list[Any]:
        work, opt = s.fresh()
        vals: list[Any] = [one_step(s, work, opt, s.loss.inputs).detach().float().reshape(-1) for _ in range(n)]
        vals.append([p.detach().float().sum().reshape(-1) for p in work.parameters()])
        return vals

    s.progress("two seeded runs", 0, 2 * n, s.step_time)
    _unseeded_draws(s)
    rep = check_reproducible(run, seed=s.options.seed)
    if rep.reproducible:
        s.check("two seeded runs", f"identical over {n} steps")
    else:
        step = rep.first_divergent_step
        when = f"at step {step}" if step is not None and step < n else "in the final parameters"
        s.add("not_reproducible", f"two runs seeded with {s.options.seed} differ {when} ({rep.value_a} vs "
              f"{rep.value_b}): something draws from an unseeded generator or a non-deterministic kernel")
        s.check("two seeded runs", f"differ {when}")


def _unseeded_draws(s: Session) -> None:
    """A numpy generator made without a seed inside the model and drawn from in a step: two runs of the user's
    script differ although the doctor's two runs (deep copies of one generator) agree."""
    work, opt = s.fresh()
    held = unseeded_generators(work)
    before = [g.bit_generator.state for _, g in held]
    if held:
        one_step(s, work, opt, s.loss.inputs)
    drawn = [path for (path, g), st in zip(held, before) if g.bit_generator.state != st]
    if drawn:
        where = ", ".join(f"{s.options.name}.{p}" for p in drawn)
        s.add("not_reproducible", f"{where}: a numpy Generator made without a seed is drawn from in every training "
              "step; torch.manual_seed does not reach it, so two runs of this code train on different draws",
              (where,), fixes=(Fix("seed that generator where it is made (np.random.default_rng(seed)), or draw "
                                   "with torch under its seed", "rng = np.random.default_rng(0)  # or torch.randn_like(x)"),
                               *fixes_for("not_reproducible")))
    s.check("generators torch's seed does not reach", ", ".join(drawn) if drawn else "none drawn from")


def dataloader_wait(s: Session) -> None:
    """The share of step time spent waiting for the DataLoader."""
    loader = s.options.dataloader
    if s.out_of_time("dataloader wait", 2):  # the first batch (start-up) and one timed
        return
    work, opt = s.fresh()
    wait = comp = 0.0
    n = 0
    it = iter(loader)
    t0 = time.perf_counter()
    try:
        first = next(it)  # worker start-up is not steady-state waiting
    except StopIteration:
        s.check("dataloader", "empty")
        return
    _data_step(s, work, opt, first)
    for i in range(s.options.data_batches):
        t0 = time.perf_counter()
        try:
            b = next(it)
        except StopIteration:
            break
        t1 = time.perf_counter()
        _data_step(s, work, opt, b)
        t2 = time.perf_counter()
        wait += t1 - t0
        comp += t2 - t1
        n += 1
        s.progress("dataloader", i + 1, s.options.data_batches, (wait + comp) / n)
        left = s.time_left()
        if left is not None and left < (wait + comp) / n:
            break  # another batch would run past the time budget
    if n == 0:
        s.check("dataloader", "fewer than 2 batches")
        return
    frac = wait / max(wait + comp, 1e-12)
    s.check("dataloader wait", f"{frac:.0%} of step time over {n} batches")
    # a wait under data_wait_abs (5 ms) per batch is not reported whatever its share of a tiny model's step: an
    # in-memory dataset collated in the main process takes about a millisecond, several on a loaded CPU
    # under it, the wait counts when the dataset's own __getitem__ (the user's per-sample code, timed on its own for
    # one batch's samples) makes most of it: then it is that code, not the collate of an in-memory set
    own = _getitem_time(loader) if frac > threshold("data_wait_fraction") else None
    if frac > threshold("data_wait_fraction") and (wait / n >= threshold("data_wait_abs") or (
            own is not None and own >= 0.5 * wait / n and own >= 1e-3)):
        s.add("dataloader_bottleneck", f"{frac:.0%} of each step is spent waiting for the DataLoader "
              f"({wait / n * 1e3:.1f} ms waiting vs {comp / n * 1e3:.1f} ms computing per batch; "
              f"num_workers={getattr(loader, 'num_workers', '?')})"
              + (f"; the dataset's __getitem__ alone takes {own * 1e3:.1f} ms for one batch's samples"
                 if own is not None else ""), ("dataloader",))


def _getitem_time(loader: Any) -> float | None:
    """Seconds the dataset's ``__getitem__`` takes for one batch's samples (a map-style dataset), or None."""
    ds, size = getattr(loader, "dataset", None), getattr(loader, "batch_size", None)
    if ds is None or not size or not hasattr(ds, "__getitem__") or not hasattr(ds, "__len__") or not len(ds):
        return None
    try:
        t0 = time.perf_counter()
        for i in range(min(int(size), len(ds))):
            ds[i]
        return time.perf_counter() - t0
    except Exception:  # noqa: BLE001 - a dataset that cannot be indexed so: the wait alone decides
        return None


def _data_step(s: Session, work: Any, opt: Any, b: Any) -> None:
    opt.zero_grad(set_to_none=True)
    loss = s.loss.batch_loss(work, to_device(b, s.device))
    loss.backward()
    step_optimizer(opt, lambda: loss)
