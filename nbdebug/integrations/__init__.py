"""GradMonitor and the NaN sentinel inside the training loops people run: Hugging Face ``Trainer``, Lightning
``Trainer.fit`` and ``accelerate``.

None of these frameworks is a dependency of nbdebug: each is imported inside the function that builds its
callback, so importing this module imports none of them.

- ``hf_callback(...)``: a ``transformers.TrainerCallback``; ``Trainer(..., callbacks=[hf_callback()])``.
- ``lightning_callback(...)``: a ``lightning.pytorch.Callback``; ``Trainer(callbacks=[lightning_callback()])``.
- ``accelerate_watch(accelerator, model, ...)``: a context manager around an accelerate loop; the loss given to
  ``accelerator.backward(loss)`` is logged for you.
- ``watch_trainer(trainer, ...)``: a context manager for either Trainer that adds the callback and takes every hook off
  however ``train()``/``fit()`` ends (a Hugging Face callback has no "on exception" event).

Each attaches a ``GradMonitor`` (with the live panel under the running cell when ``live=True`` in a notebook) and,
with ``nan_sentinel=True``, a NaN/Inf sentinel that stops training at the first non-finite value with
``nbdebug.NonFiniteError`` (module, step, phase).  The loss is captured without ``log_loss``.  After training,
``callback.history`` is the ``GradHistory``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from nbdebug.errors import InvalidArgumentError

__all__ = ["hf_callback", "lightning_callback", "accelerate_watch", "watch_trainer", "TrainerWatch"]


class TrainerWatch:
    """What every integration attaches to a model: a GradMonitor and/or a NaN sentinel, and how to stop them."""

    def __init__(self, *, grad_monitor: bool = True, nan_sentinel: bool = False, live: bool = True, every: int = 1,
                 num_classes: int | None = None, replay: bool = False) -> None:
        if not grad_monitor and not nan_sentinel:
            raise InvalidArgumentError("nbdebug.integrations: grad_monitor and nan_sentinel are both False; expected "
                                       "at least one of them")
        if not isinstance(every, int) or isinstance(every, bool) or every < 1:
            raise InvalidArgumentError(f"nbdebug.integrations: every must be an int >= 1, got {every!r}")
        self.grad_monitor, self.nan_sentinel = bool(grad_monitor), bool(nan_sentinel)
        self.live, self.every, self.num_classes, self.replay = bool(live), every, num_classes, bool(replay)
        self.monitor: Any = None
        self.sentinel: Any = None
        self.model: Any = None
        self._history: Any = None

    def start(self, model: Any, *, clip_norm: float | None = None, framework_steps: bool = False) -> None:
        """Attach to ``model`` (a module, or anything ``nbdebug.core.training.grads.model_of`` finds one in).

        The norms are read at the end of the last backward pass before each optimizer step, so before the loop
        clips them (``clip_norm``: the max_norm it clips to, shown with the history).  ``framework_steps``: the
        framework calls ``step()`` after the backward pass and before the optimizer (Lightning's
        ``on_before_optimizer_step``), so no optimizer hook is needed and nothing lags a step.
        """
        from nbdebug.core.training.grads import model_of

        self.stop()
        inner = model_of(model)
        if inner is None:
            raise InvalidArgumentError(f"nbdebug.integrations: found no torch.nn.Module in {type(model).__name__}")
        self.model = inner
        try:
            if self.grad_monitor:
                from nbdebug.core.training.grads import GradMonitor

                live = self.live and _in_notebook()
                if live:
                    from nbdebug.ipython import _live  # noqa: F401 - registers the live panel with GradMonitor
                self.monitor = GradMonitor(inner, every=self.every, num_classes=self.num_classes, live=live,
                                           record_at="manual" if framework_steps else "backward",
                                           clip_norm=clip_norm)
                self.monitor.start()
            if self.nan_sentinel:
                from nbdebug.core.training.nan import NanSentinel

                self.sentinel = NanSentinel(inner, replay=self.replay, step_hook=not framework_steps).start()
        except BaseException:
            self.stop()
            raise

    def step(self) -> None:
        """The gradients of this step are complete and the optimizer has not applied them: record the norms
        (before clipping) and check for NaN/Inf (raising before ``optimizer.step()``)."""
        if self.monitor is not None:
            self.monitor.step()
        if self.sentinel is not None:
            self.sentinel.step()

    def log_loss(self, loss: Any, *, last_step: bool = False) -> None:
        """Give the monitor this step's loss (a tensor stays on the device); ``last_step``: the loss of the step
        just recorded (it comes after ``step()``)."""
        if self.monitor is not None and loss is not None:
            step = self.monitor.steps_seen - 1 if last_step and self.monitor.steps_seen else None
            self.monitor.log_loss(loss, step=step)

    @property
    def active(self) -> bool:
        """Hooks are on."""
        return self.monitor is not None or self.sentinel is not None

    def stop(self, *, check: bool = True) -> None:
        """Take every hook off (safe to call twice); with ``check`` the sentinel first checks what the last step
        left pending (False while another error is on its way: it must not be hidden)."""
        monitor, sentinel = self.monitor, self.sentinel
        self.monitor = self.sentinel = None
        try:
            if sentinel is not None:
                try:
                    if check:
                        sentinel.check()
                finally:
                    sentinel.detach()
        finally:
            if monitor is not None:
                monitor.stop()
                self._history = monitor.history

    @property
    def history(self) -> Any:
        """The ``GradHistory`` so far (None before training started or without a GradMonitor)."""
        if self.monitor is not None:
            return self.monitor.history
        return self._history

    def __repr__(self) -> str:
        state = "watching " + type(self.model).__name__ if self.active else "idle"
        return f"<nbdebug {type(self).__name__}: {state}>"


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover
        return False
    return get_ipython() is not None


def _loss_of(outputs: Any) -> Any:
    if isinstance(outputs, dict):
        return outputs.get("loss")
    return getattr(outputs, "loss", outputs if hasattr(outputs, "detach") else None)


# -- Hugging Face ---------------------------------------------------------------------------------------------
def hf_callback(*, grad_monitor: bool = True, nan_sentinel: bool = False, live: bool = True, every: int = 1,
                num_classes: int | None = None, replay: bool = False) -> Any:
    """A ``transformers.TrainerCallback`` that watches the Trainer's model from ``on_train_begin`` to
    ``on_train_end``, logging the loss the Trainer logs.

    Examples
    --------
    >>> trainer = Trainer(model, args, train_dataset=ds, callbacks=[nbdebug.integrations.hf_callback()])  # doctest: +SKIP
    >>> trainer.train()                                                   # doctest: +SKIP
    """
    try:
        from transformers import TrainerCallback
    except ImportError as e:
        raise InvalidArgumentError("nbdebug.integrations.hf_callback needs transformers; pip install transformers") from e
    watch_ = TrainerWatch(grad_monitor=grad_monitor, nan_sentinel=nan_sentinel, live=live, every=every,
                   num_classes=num_classes, replay=replay)

    class NbdebugCallback(TrainerCallback):  # type: ignore[misc,valid-type]
        """GradMonitor / NaN sentinel on the Trainer's model (``.history`` after training)."""

        watch = watch_

        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            clip = getattr(args, "max_grad_norm", None)
            self.watch.start(model, clip_norm=clip if isinstance(clip, (int, float)) and clip > 0 else None)

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if logs and "loss" in logs:  # the mean over the logging window, as the Trainer prints it
                self.watch.log_loss(float(logs["loss"]))

        def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.watch.stop()

        @property
        def history(self) -> Any:
            return self.watch.history

        def __repr__(self) -> str:
            return repr(self.watch)

    return NbdebugCallback()


# -- Lightning ------------------------------------------------------------------------------------------------
def lightning_callback(*, grad_monitor: bool = True, nan_sentinel: bool = False, live: bool = True, every: int = 1,
                       num_classes: int | None = None, replay: bool = False) -> Any:
    """A Lightning ``Callback`` that watches the LightningModule during ``fit``; the loss is what
    ``training_step`` returns.  Hooks come off at the end of fit and on an exception.

    Examples
    --------
    >>> trainer = lightning.Trainer(max_epochs=1, callbacks=[nbdebug.integrations.lightning_callback()])  # doctest: +SKIP
    """
    try:
        from lightning.pytorch import Callback
    except ImportError:
        try:
            from pytorch_lightning import Callback  # type: ignore[assignment]
        except ImportError as e:
            raise InvalidArgumentError("nbdebug.integrations.lightning_callback needs lightning; pip install "
                                       "lightning") from e
    watch_ = TrainerWatch(grad_monitor=grad_monitor, nan_sentinel=nan_sentinel, live=live, every=every,
                   num_classes=num_classes, replay=replay)

    class NbdebugLightningCallback(Callback):  # type: ignore[misc,valid-type]
        """GradMonitor / NaN sentinel on the LightningModule (``.history`` after fit)."""

        watch = watch_

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            clip = getattr(trainer, "gradient_clip_val", None)
            self.watch.start(pl_module, clip_norm=clip if isinstance(clip, (int, float)) and clip > 0 else None,
                             framework_steps=bool(getattr(pl_module, "automatic_optimization", True)))

        def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
            # inside Lightning's closure: after backward, before clipping and before optimizer.step() applies it
            if getattr(pl_module, "automatic_optimization", True):
                self.watch.step()

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.watch.log_loss(_loss_of(outputs), last_step=getattr(pl_module, "automatic_optimization", True))

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            self.watch.stop()

        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            self.watch.stop(check=False)

        @property
        def history(self) -> Any:
            return self.watch.history

        def __repr__(self) -> str:
            return repr(self.watch)

    return NbdebugLightningCallback()


# -- accelerate -----------------------------------------------------------------------------------------------
@contextlib.contextmanager
def accelerate_watch(accelerator: Any, model: Any, *, grad_monitor: bool = True, nan_sentinel: bool = False,
                     live: bool = True, every: int = 1, num_classes: int | None = None,
                     replay: bool = False) -> Iterator[TrainerWatch]:
    """Watch a model trained with ``accelerate``: the loss passed to ``accelerator.backward(loss)`` is logged.

    Examples
    --------
    >>> model, opt, loader = accelerator.prepare(model, opt, loader)          # doctest: +SKIP
    >>> with nbdebug.integrations.accelerate_watch(accelerator, model) as w:  # doctest: +SKIP
    ...     for x, y in loader:
    ...         loss = F.cross_entropy(model(x), y); accelerator.backward(loss); opt.step(); opt.zero_grad()
    >>> w.history                                                             # doctest: +SKIP
    """
    if not callable(getattr(accelerator, "backward", None)):
        raise InvalidArgumentError(f"accelerate_watch: expected an accelerate.Accelerator, got "
                                   f"{type(accelerator).__name__}")
    w = TrainerWatch(grad_monitor=grad_monitor, nan_sentinel=nan_sentinel, live=live, every=every,
              num_classes=num_classes, replay=replay)
    w.start(model)
    original = accelerator.backward

    def backward(loss: Any, **kwargs: Any) -> Any:
        w.log_loss(loss)
        return original(loss, **kwargs)

    accelerator.backward = backward
    ok = False
    try:
        yield w
        ok = True
    finally:
        try:
            del accelerator.backward  # the instance attribute shadowing the method
        except AttributeError:  # pragma: no cover
            accelerator.backward = original
        w.stop(check=ok)


# -- either Trainer -------------------------------------------------------------------------------------------
@contextlib.contextmanager
def watch_trainer(trainer: Any, *, grad_monitor: bool = True, nan_sentinel: bool = False, live: bool = True,
                  every: int = 1, num_classes: int | None = None, replay: bool = False) -> Iterator[Any]:
    """Add the matching callback to a Hugging Face or Lightning ``Trainer`` for the ``with`` block, and take every
    hook off however it ends.  Yields the callback (``.history`` after training).

    Examples
    --------
    >>> with nbdebug.integrations.watch_trainer(trainer, nan_sentinel=True) as cb:   # doctest: +SKIP
    ...     trainer.train()
    """
    kw = dict(grad_monitor=grad_monitor, nan_sentinel=nan_sentinel, live=live, every=every,
              num_classes=num_classes, replay=replay)
    if callable(getattr(trainer, "add_callback", None)) and callable(getattr(trainer, "remove_callback", None)):
        cb = hf_callback(**kw)  # type: ignore[arg-type]
        trainer.add_callback(cb)
        ok = False
        try:
            yield cb
            ok = True
        finally:
            trainer.remove_callback(cb)
            cb.watch.stop(check=ok)
        return
    if isinstance(getattr(trainer, "callbacks", None), list) and hasattr(trainer, "fit"):
        cb = lightning_callback(**kw)  # type: ignore[arg-type]
        trainer.callbacks.append(cb)
        ok = False
        try:
            yield cb
            ok = True
        finally:
            if cb in trainer.callbacks:
                trainer.callbacks.remove(cb)
            cb.watch.stop(check=ok)
        return
    raise InvalidArgumentError(f"nbdebug.integrations.watch_trainer: expected a transformers.Trainer or a lightning Trainer, "
                               f"got {type(trainer).__name__}")
