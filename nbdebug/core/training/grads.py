"""``GradMonitor``: gradient norms per parameter, per module and global, cheap enough to leave on.

Every optimizer step (or every ``every``-th) the monitor computes the norm of every gradient with one fused
multi-tensor kernel (``torch._foreach_norm``), stacks them into one device tensor, and keeps it on the device;
rows are copied to the host in batches (one host sync per ``flush_every`` recorded steps), where the spike score,
NaN/Inf detection, trends and per-module aggregation are computed with numpy.

It hooks the optimizer step (``register_optimizer_step_pre_hook``), which fires after gradient accumulation and
after ``GradScaler.unscale_`` (so norms are unscaled), and, given ``scaler=``, notices the steps the scaler skips
because of inf/NaN gradients.  DDP / DataParallel wrappers and ``torch.compile``'d models are unwrapped, so
parameter names are the user's.

A recorder (``nbdebug.core._recorder``): ``with GradMonitor(model) as mon:``, then ``mon.result`` (also
``mon.history``, the same ``GradHistory``; it is the history so far while the monitor records).

Live views belong to the display layer: the monitor calls its listeners (``add_listener``) between steps, at most
``refresh_hz`` times a second, and ``live=`` takes a view factory ``live(monitor)`` that subscribes itself.
``live=True`` uses the factory the display layer registered with ``GradMonitor.set_live_view``: the IPython layer
(``nbdebug.ipython._live``, imported with ``nbdebug.GradMonitor``, by ``%%gradmonitor`` and by
``nbdebug.integrations``) registers its panel
that updates in place.  Core never imports the display layer.
"""

from __future__ import annotations

import dataclasses
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from nbdebug.core._findings import Finding
from nbdebug.core._recorder import Recorder
from nbdebug.core.knowledge import threshold
from nbdebug.core.training._gradhistory import GradHistory, GradSpike, grad_findings
from nbdebug.errors import InvalidArgumentError

__all__ = ["GradMonitor", "GradHistory", "GradSpike", "unwrap_model", "model_of"]

_WRAPPERS = {"DistributedDataParallel", "DataParallel", "OptimizedModule"}
MAX_REFRESH_HZ = 2.0


def unwrap_model(model: Any) -> Any:
    """The user's module inside DDP / DataParallel / ``torch.compile`` wrappers."""
    seen = 0
    while seen < 8:
        seen += 1
        inner = getattr(model, "_orig_mod", None)
        if inner is not None:
            model = inner
            continue
        if type(model).__name__ in _WRAPPERS and hasattr(model, "module"):
            model = model.module
            continue
        break
    return model


def model_of(obj: Any) -> Any:
    """The ``torch.nn.Module`` a training object drives (None when it holds none).

    A Hugging Face ``Trainer`` (``.model``), a Lightning ``Trainer`` (``.lightning_module``), an accelerate-prepared
    or DDP/compiled model, or the module itself.  Duck-typed: no framework is imported.  None when ``obj`` holds no module.
    """
    import torch

    if isinstance(obj, torch.nn.Module):
        return unwrap_model(obj)
    for attr in ("lightning_module", "model", "module"):
        try:
            inner = getattr(obj, attr, None)
        except Exception:  # a property that raises before fit() (Lightning) holds no model yet
            inner = None
        if isinstance(inner, torch.nn.Module):
            return unwrap_model(inner)
    return None


@dataclass
class _Pending:
    steps: list[int] = field(default_factory=list)
    rows: list[Any] = field(default_factory=list)  # device tensors (P,)
    missing: list[tuple[int, ...]] = field(default_factory=list)
    loss_steps: list[int] = field(default_factory=list)
    losses: list[Any] = field(default_factory=list)  # device scalars or floats


class GradMonitor(Recorder):
    """Record gradient norms at every optimizer step, keep them on the device, analyse them in batches.

    Parameters
    ----------
    model : torch.nn.Module
        The model (DDP, DataParallel and ``torch.compile`` wrappers are looked through).
    every : int
        Record every ``every``-th optimizer step (1: all of them).
    spike_threshold : float
        Spike score (norm over its running mean) above which a norm is a spike (50 by default).
    optimizer : torch.optim.Optimizer, optional
        Hook only this optimizer; by default every optimizer that steps any of the model's parameters.
    scaler : torch.amp.GradScaler, optional
        The AMP scaler, so that the steps it skips (inf/NaN gradients) are recorded too.
    num_classes : int, optional
        For classification: a loss plateau at ``-log(1/C)`` is reported as training at chance level.
    flush_every : int
        Recorded steps kept on the device before one batched copy to the host.
    live : bool or callable
        A view factory ``live(monitor)`` called on ``start`` (it subscribes with ``add_listener``); True uses the
        factory registered with ``GradMonitor.set_live_view`` (in a notebook: a panel that updates in place and
        leaves a static picture in the saved notebook).
    refresh_hz : float
        Live refresh rate (at most 2 per second); rendering happens only between steps.
    record_at : {"optimizer", "backward", "manual"}
        When the norms are read: at the optimizer step (after any clipping), at the end of the last backward
        pass before it, before a Trainer clips (the integrations use this), or only when ``step()`` is called
        (a framework's hook between backward and the optimizer, such as Lightning's).
    clip_norm : float, optional
        The ``max_norm`` the loop clips to, so the history can show which steps were clipped.

    Raises
    ------
    InvalidArgumentError
        When ``model`` is not a ``torch.nn.Module`` or has no trainable parameter, or a number is out of range.

    Examples
    --------
    >>> with GradMonitor(model, num_classes=10) as mon:   # doctest: +SKIP
    ...     for x, y in loader:
    ...         loss = F.cross_entropy(model(x), y)
    ...         loss.backward()
    ...         mon.log_loss(loss)
    ...         opt.step(); opt.zero_grad()
    >>> mon.result.to_pandas()                           # doctest: +SKIP
    """

    _label = "GradMonitor"
    # the view factory ``live=True`` uses, ``live_view(monitor)``: registered by the display layer
    # (``set_live_view``); None while none is.  Typed Any: a callable class attribute would be read by type
    # checkers as a method bound to the monitor.
    live_view: ClassVar[Any] = None

    @classmethod
    def set_live_view(cls, factory: Callable[[GradMonitor], Any] | None) -> None:
        """Register the view factory ``live=True`` uses (the display layer's hook; None removes it)."""
        GradMonitor.live_view = factory

    def __init__(
        self,
        model: Any,
        *,
        every: int = 1,
        spike_threshold: float = 50.0,
        optimizer: Any = None,
        scaler: Any = None,
        num_classes: int | None = None,
        flush_every: int = 64,
        live: bool | Callable[[GradMonitor], Any] = False,
        refresh_hz: float = 1.0,
        record_at: str = "optimizer",
        clip_norm: float | None = None,
    ) -> None:
        import torch

        if not isinstance(model, torch.nn.Module):
            raise InvalidArgumentError(f"GradMonitor: expected a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(every, int) or isinstance(every, bool) or every < 1:
            raise InvalidArgumentError(f"GradMonitor: every must be an int >= 1, got {every!r}")
        if not isinstance(spike_threshold, (int, float)) or not spike_threshold > 1:
            raise InvalidArgumentError(f"GradMonitor: spike_threshold must be a number > 1, got {spike_threshold!r}")
        if num_classes is not None and (not isinstance(num_classes, int) or num_classes < 1):
            raise InvalidArgumentError(f"GradMonitor: num_classes must be an int >= 1 or None, got {num_classes!r}")
        if not isinstance(flush_every, int) or flush_every < 1:
            raise InvalidArgumentError(f"GradMonitor: flush_every must be an int >= 1, got {flush_every!r}")
        if not isinstance(refresh_hz, (int, float)) or not refresh_hz > 0:
            raise InvalidArgumentError(f"GradMonitor: refresh_hz must be a number > 0, got {refresh_hz!r}")
        if record_at not in ("optimizer", "backward", "manual"):
            raise InvalidArgumentError(
                f"GradMonitor: record_at must be 'optimizer', 'backward' or 'manual', got {record_at!r}")
        self.record_at = record_at
        self.clip_norm = float(clip_norm) if clip_norm else None
        self._backward_row: Any = None  # norms read at the end of the last backward pass (record_at="backward")
        self._queued = False
        if live is True:
            view = type(self).live_view
            if view is None:
                raise InvalidArgumentError(
                    "GradMonitor: live=True needs a display, and none is registered; use nbdebug.GradMonitor (which "
                    "registers the notebook's live panel) or %%gradmonitor, or pass a view factory "
                    "live=callable(monitor)"
                )
            self._live_view: Callable[[GradMonitor], Any] | None = view
        elif live is False or live is None:
            self._live_view = None
        elif callable(live):
            self._live_view = live
        else:
            raise InvalidArgumentError(f"GradMonitor: live must be a bool or a callable(monitor), got {live!r}")
        self.model = unwrap_model(model)
        self.every = int(every)
        self.spike_threshold = float(spike_threshold)
        self.optimizer = optimizer
        self.scaler = scaler
        self.num_classes = num_classes
        self.flush_every = max(1, int(flush_every))
        self.refresh_interval = 1.0 / min(max(float(refresh_hz), 1e-3), MAX_REFRESH_HZ)
        named = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        if not named:
            raise InvalidArgumentError(
                f"GradMonitor: {type(self.model).__name__} has no trainable parameters; expected a module with at "
                "least one parameter with requires_grad=True"
            )
        self.names: tuple[str, ...] = tuple(n for n, _ in named)
        self._params = [p for _, p in named]
        self._param_ids = {id(p) for p in self._params}
        owners = [n.rsplit(".", 1)[0] if "." in n else "(root)" for n in self.names]
        self.modules: tuple[str, ...] = tuple(dict.fromkeys(owners))
        by_name = dict(self.model.named_modules())
        self.module_kinds = tuple(type(by_name.get("" if m == "(root)" else m, self.model)).__name__
                                  for m in self.modules)
        index = {m: i for i, m in enumerate(self.modules)}
        self._owner_index = [index[o] for o in owners]
        self._devices = sorted({str(p.device) for p in self._params})
        self._step = 0
        self._manual = record_at == "manual"
        self._attached = False
        self._handles: list[Any] = []
        self._relevant: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
        self._pre_fired = False
        self._orig_scaler_step: Callable[..., Any] | None = None
        self._pending = _Pending()
        self._zero = torch.zeros((), device=self._params[0].device)
        # host side
        self._h_steps: list[int] = []
        self._h_rows: list[Any] = []
        self._h_missing_ever: set[int] = set()
        self._h_got_grad: set[int] = set()
        self._h_loss: dict[int, list[float]] = {}
        self._skipped: list[int] = []
        self._spikes: list[GradSpike] = []
        self._nonfinite: list[tuple[int, tuple[str, ...]]] = []
        self._ema: Any = None  # (P+1,) running mean of norms (last column: global)
        self._ema_count: Any = None
        self._listeners: list[Callable[[GradMonitor], None]] = []
        self._last_refresh = 0.0
        self.view: Any = None  # what live(monitor) returned
        self._hist_cache: tuple[Any, GradHistory] | None = None

    # -- attaching -----------------------------------------------------------------------------------------
    def start(self) -> GradMonitor:
        """Start recording (hooks the optimizer step); returns ``self``."""
        if self._attached:
            return self
        if not self._manual:
            self._hook_optimizer()
        if self.scaler is not None:
            self._wrap_scaler()
        self._attached = True
        if self._live_view is not None and self.view is None:
            try:
                self.view = self._live_view(self)
            except BaseException:
                # a view that cannot be shown leaves nothing behind: no optimizer hook outlives the failure
                self.stop()
                raise
        return self

    def stop(self) -> None:
        """Stop recording, remove every hook, and copy what is still on the device to the host."""
        for h in self._handles:
            h.remove()
        self._handles.clear()
        if self._orig_scaler_step is not None and self.scaler is not None:
            try:
                del self.scaler.step  # the instance attribute shadowing the class method
            except AttributeError:
                pass
            self._orig_scaler_step = None
        self._attached = False
        self._flush()
        self._notify(force=True)

    # the names the monitor had before the recorder shape
    attach = start
    detach = stop

    def _hook_optimizer(self) -> None:
        if self.record_at == "backward":
            for p in self._params:
                self._handles.append(p.register_post_accumulate_grad_hook(self._on_grad_ready))
        if self.optimizer is not None:
            self._handles.append(self.optimizer.register_step_pre_hook(self._on_optimizer_step))
        else:
            from torch.optim.optimizer import register_optimizer_step_pre_hook

            self._handles.append(register_optimizer_step_pre_hook(self._on_optimizer_step))

    def _wrap_scaler(self) -> None:
        scaler = self.scaler
        orig = scaler.step
        self._orig_scaler_step = orig

        def step(optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            self._pre_fired = False
            result = orig(optimizer, *args, **kwargs)
            if not self._pre_fired and self._is_relevant(optimizer) and not self._manual:
                # the scaler found inf/NaN and skipped optimizer.step(); the (unscaled) grads tell which
                self._skipped.append(self._step)
                self._record()
            return result

        scaler.step = step

    def _is_relevant(self, optimizer: Any) -> bool:
        try:
            return self._relevant[optimizer]
        except (KeyError, TypeError):
            pass
        ids = self._param_ids
        hit = any(id(p) in ids for g in optimizer.param_groups for p in g["params"])
        try:
            self._relevant[optimizer] = hit
        except TypeError:
            pass
        return hit

    def _on_grad_ready(self, p: Any) -> None:
        """A parameter's gradient is accumulated: read every norm once, when this backward pass ends."""
        if not self._queued:
            import torch

            self._queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._on_backward_end)

    def _on_backward_end(self) -> None:
        self._queued = False
        self._backward_row = self._norms()

    def _on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._pre_fired = True
        if self._manual or not self._is_relevant(optimizer):
            return
        self._record()

    # -- recording -----------------------------------------------------------------------------------------
    def step(self) -> None:
        """Record the current gradients now (for loops without a torch optimizer).

        Calling it switches the monitor to manual mode: the optimizer hook is removed so steps are not counted
        twice.  Given ``scaler=``, gradients not yet unscaled (no ``scaler.unscale_`` this step) are divided by
        the scaler's current scale (a device tensor: no sync), so norms are always unscaled.
        """
        if not self._manual:
            self._manual = True
            for h in self._handles:
                h.remove()
            self._handles.clear()
        self._record(divide_by=self._pending_scale())

    def _pending_scale(self) -> Any:
        """The GradScaler's scale when the gradients are still scaled, else None."""
        scaler = self.scaler
        if scaler is None or not scaler.is_enabled():
            return None
        try:  # private but stable since torch 1.6: per-optimizer stage READY / UNSCALED / STEPPED
            from torch.amp.grad_scaler import OptState

            stages = [st.get("stage") for st in scaler._per_optimizer_states.values()]
            if any(stage is OptState.UNSCALED for stage in stages):
                return None
            return scaler._scale
        except (AttributeError, ImportError):
            return None

    def _record(self, divide_by: Any = None) -> None:
        step = self._step
        self._step += 1
        row, self._backward_row = self._backward_row, None
        if step % self.every:
            return
        if row is None:
            row = self._norms()
        if divide_by is not None:
            row = (row[0] / divide_by.to(row[0].device), row[1])
        pend = self._pending
        pend.steps.append(step)
        pend.rows.append(row[0])
        pend.missing.append(row[1])
        if len(pend.rows) >= self.flush_every:
            self._flush()
        if self._listeners:
            self._notify()

    def _norms(self) -> tuple[Any, tuple[int, ...]]:
        """The norm of every gradient now, as one device tensor (P,), and the parameters without a gradient."""
        import torch

        grads = []
        missing: list[int] = []
        zero = self._zero
        for i, p in enumerate(self._params):
            g = p.grad
            if g is None:
                missing.append(i)
                grads.append(zero)
            elif g.layout is not torch.strided:  # sparse gradients (Embedding(sparse=True)): the norm of the values
                grads.append(g.coalesce().values() if g.layout is torch.sparse_coo else g.values())
            else:
                grads.append(g)
        if len(self._devices) == 1:
            norms = torch._foreach_norm(grads, 2, dtype=torch.float32)
            row = torch.stack(norms)  # (P,)
        else:  # one fused kernel per device; the row lives on the first parameter's device
            dev0 = self._zero.device
            row = torch.stack([torch.linalg.vector_norm(g, dtype=torch.float32).to(dev0) for g in grads])
        return row, tuple(missing)

    def log_loss(self, loss: Any, step: int | None = None) -> None:
        """Log the loss of the current step (a tensor stays on the device; call it before ``optimizer.step()``).

        ``step``: the optimizer step (from 0) the loss belongs to, when it comes after that step was recorded.
        """
        if hasattr(loss, "detach"):
            loss = loss.detach().float().reshape(-1).mean()
        else:
            loss = float(loss)
        self._pending.loss_steps.append(self._step if step is None else int(step))
        self._pending.losses.append(loss)

    # -- host side -----------------------------------------------------------------------------------------
    def _flush(self) -> None:
        import numpy as np
        import torch

        pend = self._pending
        self._pending = _Pending()
        if pend.losses:
            tensors = [v for v in pend.losses if not isinstance(v, float)]
            host = iter(torch.stack(tensors).cpu().tolist()) if tensors else iter(())
            for s, v in zip(pend.loss_steps, pend.losses):
                value = v if isinstance(v, float) else next(host)
                self._h_loss.setdefault(s, []).append(value)
        if not pend.rows:
            return
        block = torch.stack(pend.rows).cpu().numpy().astype(np.float64)  # (S, P): the one host sync
        n_params = len(self.names)
        for k, miss in enumerate(pend.missing):
            self._h_missing_ever.update(miss)
            got = set(range(n_params)).difference(miss) if miss else None
            if got is None:
                if len(self._h_got_grad) < n_params:
                    self._h_got_grad.update(range(n_params))
            else:
                self._h_got_grad.update(got)
            if miss:
                block[k, list(miss)] = 0.0
        glob = np.sqrt(np.sum(block**2, axis=1))
        self._analyse_rows(pend.steps, block, glob)
        for s, row in zip(pend.steps, block):
            self._h_steps.append(s)
            self._h_rows.append(row)

    def _analyse_rows(self, steps: list[int], block: Any, glob: Any) -> None:
        import numpy as np

        cols = np.concatenate([block, glob[:, None]], axis=1)  # (S, P+1)
        if self._ema is None:
            self._ema = np.zeros(cols.shape[1])
            self._ema_count = np.zeros(cols.shape[1])
        decay = threshold("spike_ema")
        warm = threshold("spike_warmup")
        names = (*self.names, "(global)")
        for s, row in zip(steps, cols):
            finite = np.isfinite(row)
            if not finite.all():
                bad = tuple(names[j] for j in np.flatnonzero(~finite[:-1]))
                self._nonfinite.append((s, bad))
            ema, count = self._ema, self._ema_count
            ready = (count >= warm) & (ema > 0) & finite
            with np.errstate(divide="ignore", invalid="ignore"):
                score = np.where(ready, row / np.where(ema > 0, ema, 1.0), 0.0)
            for j in np.flatnonzero(score > self.spike_threshold):
                self._spikes.append(GradSpike(step=s, name=names[j], norm=float(row[j]), score=float(score[j])))
            upd = finite & (row > 0)
            first = upd & (count == 0)
            ema[first] = row[first]
            rest = upd & ~first
            ema[rest] = decay * ema[rest] + (1 - decay) * row[rest]
            count[upd] += 1

    def _notify(self, force: bool = False) -> None:
        if not self._listeners:
            return
        now = time.monotonic()
        if not force and now - self._last_refresh < self.refresh_interval:
            return
        self._last_refresh = now
        self._flush()
        for fn in list(self._listeners):
            fn(self)
        # rendering time must not count against the next interval's budget
        self._last_refresh = time.monotonic()

    def add_listener(self, fn: Callable[[GradMonitor], None]) -> None:
        """Call ``fn(monitor)`` between steps, at most every ``1/refresh_hz`` seconds (live displays)."""
        self._listeners.append(fn)

    def remove_listener(self, fn: Callable[[GradMonitor], None]) -> None:
        """Stop calling ``fn``."""
        if fn in self._listeners:
            self._listeners.remove(fn)

    @property
    def attached(self) -> bool:
        """True between ``start`` and ``stop`` (while recording)."""
        return self._attached

    @property
    def steps_seen(self) -> int:
        """Optimizer steps seen so far (recorded or not)."""
        return self._step

    @property
    def result(self) -> GradHistory:
        """The ``GradHistory``: everything recorded so far (the same as ``history``)."""
        return self.history

    @property
    def history(self) -> GradHistory:
        """A snapshot of everything recorded so far (copies pending rows to the host first).

        The monitor keeps recording into its own buffers; each snapshot is immutable (read-only arrays).
        """
        import numpy as np

        self._flush()
        key = (len(self._h_steps), sum(len(v) for v in self._h_loss.values()), len(self._skipped), self._step)
        if self._hist_cache is not None and self._hist_cache[0] == key:
            return self._hist_cache[1]
        P = len(self.names)
        norms = np.asarray(self._h_rows, dtype=np.float64).reshape(-1, P)
        glob = np.sqrt(np.sum(norms**2, axis=1)) if len(norms) else np.zeros(0)
        mod = np.zeros((norms.shape[0], len(self.modules)))
        np.add.at(mod.T, np.asarray(self._owner_index), (norms**2).T)
        mod = np.sqrt(mod)
        for arr in (norms, glob, mod):
            arr.setflags(write=False)
        loss_steps = tuple(sorted(self._h_loss))
        losses = tuple(float(np.mean(self._h_loss[s])) for s in loss_steps)
        no_grad = tuple(self.names[i] for i in range(P) if i not in self._h_got_grad) if self._h_steps else ()
        hist = GradHistory(
            steps=tuple(self._h_steps),
            names=self.names,
            norms=norms,
            global_norms=glob,
            modules=self.modules,
            module_norms=mod,
            loss_steps=loss_steps,
            losses=losses,
            skipped_steps=tuple(self._skipped),
            spikes=tuple(self._spikes),
            nonfinite=tuple(self._nonfinite),
            no_grad=no_grad,
            spike_threshold=self.spike_threshold,
            num_classes=self.num_classes,
            steps_seen=self._step,
            clip_norm=self.clip_norm,
            module_kinds=self.module_kinds,
        )
        hist = dataclasses.replace(hist, findings=tuple(grad_findings(hist)))
        self._hist_cache = (key, hist)
        return hist

    def findings(self) -> list[Finding]:
        """The findings of ``history`` (spikes, NaN/Inf, trends, loss)."""
        return list(self.history.findings)

    def plot(self, ax: Any = None) -> Any:
        """Shortcut for ``history.plot()``."""
        return self.history.plot(ax=ax)

    def __repr__(self) -> str:
        state = "attached" if self._attached else "detached"
        return f"<GradMonitor {state}: {len(self.names)} parameters, {self._step} steps seen>"
