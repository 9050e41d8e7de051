"""One shape for every recorder: ``with X(...) as rec:`` runs the block, then ``rec.result`` is the result object.

memtrace, nan_sentinel, GradMonitor, the torch.compile capture and the XLA watch are all recorders:

- a public lowercase function (``memtrace(...)``, ``nan_sentinel(model)``, ``capture_compile()``,
  ``xla.watch()``) or the class itself (``GradMonitor(model)``) builds one; nothing is recorded yet;
- ``with rec:`` (or ``rec.start()`` ... ``rec.stop()`` where a block does not fit, e.g. across cells) records;
  hooks, recording and modes always come off in ``stop()``, also when the block raises;
- ``rec.result`` is the result object (data first: ``to_dict()``, ``to_pandas()``, a panel); before the
  recorder stopped it is ``None`` for a recorder whose result exists only at the end, or the result so far;
- a recorder shows its result in a notebook (``_repr_mimebundle_``), and a one-line ``repr`` otherwise.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Recorder"]


class Recorder:
    """Base of every recorder: the context-manager protocol and the display, over ``start``/``stop``/``result``.

    Subclasses implement ``start()`` (returns ``self``), ``stop()`` (idempotent; never raises for the user's
    error) and the ``result`` property.
    """

    #: how the recorder names itself in its repr
    _label = "recorder"

    def start(self) -> Any:  # pragma: no cover - every subclass implements it
        raise NotImplementedError

    def stop(self) -> None:  # pragma: no cover - every subclass implements it
        raise NotImplementedError

    @property
    def result(self) -> Any:  # pragma: no cover - every subclass implements it
        raise NotImplementedError

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        result = self.result
        if result is None:
            return {"text/plain": repr(self)}
        bundle: dict[str, str] = result._repr_mimebundle_(include, exclude)
        return bundle

    def __repr__(self) -> str:
        state = "finished" if self.result is not None else "not finished"
        return f"<{self._label}: {state}>"
