"""One shape for every recorder: ``with X(...) as rec:`` runs the block, then ``rec.result`` is the result object.

memtrace, the NaN sentinel, GradMonitor, the torch.compile capture and the XLA watch are all recorders
(``docs/recorders.md`` has the table):

- a public lowercase function (``memtrace(...)``, ``nan_sentinel(model)``, ``capture_compile()``,
  ``xla.watch()``) or the class itself (``GradMonitor(model)``) builds one; nothing is recorded yet.  The
  function builds the recorder's CapWords class (``NanSentinel``, ``CompileCapture``, ``XlaWatch``, ...);
- ``with rec:`` (or ``rec.start()`` ... ``rec.stop()`` where a block does not fit, e.g. across cells) records;
  hooks, recording and modes always come off in ``stop()``, also when the block raises;
- ``rec.result`` is the result object (data first: ``to_dict()``, ``to_pandas()``, a panel).  Before the
  recorder stopped it is the result so far where one exists at every moment (GradMonitor's history, the NaN
  sentinel's ``NanReport``, whose ``.error`` stays None after a clean run), else None;
- a recorder shows its result in a notebook (``_repr_mimebundle_``), and a one-line ``repr`` otherwise;
- a cell magic runs its cell inside the same recorder (``nbdebug.ipython._cell.run_body``) and returns
  ``rec.result``; ``-o NAME`` binds it.

Older accessors stay as synonyms of the shape (``GradMonitor.history``, ``attach()``/``detach()``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["Recorder"]


class Recorder:
    """Base of every recorder: the context-manager protocol and the display, over ``start``/``stop``/``result``.

    Subclasses implement ``start()`` (returns ``self``), ``stop()`` (idempotent; never raises for the user's
    error) and the ``result`` property.  ``__exit__`` may add the recorder's own verdict after a clean block
    (the NaN sentinel raises what its last check found).
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
        show = getattr(result, "_repr_mimebundle_", None)
        if show is None:
            return {"text/plain": repr(self)}
        bundle: dict[str, str] = show(include, exclude)
        return bundle

    def __repr__(self) -> str:
        state = "finished" if self.result is not None else "not finished"
        return f"<{self._label}: {state}>"
