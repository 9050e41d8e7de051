"""The few exception types nbdebug raises.

Every error caused by bad input is one ``NbdebugError`` subclass whose message repeats what was given and says
what was expected; it is chained ``from`` the low-level error that revealed the problem.
"""

from __future__ import annotations

from typing import Any

__all__ = ["describe_exception", "exception_message",
    "NbdebugError",
    "InvalidArgumentError",
    "SnapshotError",
    "ReportParseError",
    "DistError",
    "DistUsageError",
    "DistRunError",
    "MissingDependencyError",
    "NonFiniteError",
]


class NbdebugError(Exception):
    """Base class for errors raised by nbdebug itself."""


class InvalidArgumentError(NbdebugError, ValueError, TypeError):
    """A function was called with an argument it cannot use; the message says what was given and expected.

    It is also a ``ValueError`` and a ``TypeError``, so code that caught those before keeps working.
    """


class SnapshotError(NbdebugError):
    """A memory snapshot could not be read: not a pickle, truncated, not a snapshot, or unsafe."""


class ReportParseError(NbdebugError):
    """A text report or log (torch_xla metrics, NCCL log, ...) is not in any format nbdebug knows."""


class DistError(NbdebugError):
    """Base of the distributed errors: ``DistUsageError`` (bad input) and ``DistRunError`` (the run failed)."""


class DistUsageError(DistError, InvalidArgumentError):
    """A distributed run was asked for with arguments it cannot use (names to ship, sizes, options)."""


class DistRunError(DistError):
    """A distributed run could not be started, or its results could not be collected."""


class MissingDependencyError(NbdebugError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""

    def __init__(self, package: str, extra: str, feature: str) -> None:
        self.package, self.extra, self.feature = package, extra, feature
        super().__init__(
            f"{feature} needs the optional package {package!r}, which is not installed; "
            f"install it with: pip install 'nbdebug[{extra}]'"
        )


class NonFiniteError(NbdebugError, FloatingPointError):
    """A NaN or Inf appeared in a forward output or a gradient.

    Attributes
    ----------
    module : str
        Qualified name of the module (in the model) whose output or gradient was first non-finite.
    step : int
        Index of the training step, counting from 0, in which it first appeared.
    phase : str
        ``"forward"`` or ``"backward"``.
    stats : dict
        Statistics of the offending tensor (shape, dtype, nan/inf counts, finite min/max).
    op : str or None
        With replay: the first op whose output was non-finite while its inputs were finite.
    source : str or None
        With replay: ``file:line in function: code`` of the call of that op.
    anomaly : str or None
        With replay: what ``torch.autograd.detect_anomaly`` reported for the step's backward.
    """

    def __init__(
        self,
        message: str,
        *,
        module: str,
        step: int,
        phase: str,
        stats: dict[str, Any] | None = None,
        op: str | None = None,
        source: str | None = None,
        anomaly: str | None = None,
    ):
        super().__init__(message)
        self.module = module
        self.step = step
        self.phase = phase
        self.stats = dict(stats or {})
        self.op = op
        self.source = source
        self.anomaly = anomaly

    def __reduce__(self) -> Any:  # picklable (multiprocessing, %debug) despite keyword-only arguments
        return (_rebuild_nonfinite, (self.args[0] if self.args else "", self.__dict__.copy()))


def _rebuild_nonfinite(message: str, state: dict[str, Any]) -> NonFiniteError:
    err = NonFiniteError.__new__(NonFiniteError)
    Exception.__init__(err, message)
    err.__dict__.update(state)
    return err


def require(package: str, extra: str, feature: str) -> Any:
    """Import an optional dependency or raise ``MissingDependencyError`` naming the extra to install."""
    import importlib

    try:
        return importlib.import_module(package)
    except ImportError as e:
        raise MissingDependencyError(package, extra, feature) from e


def exception_message(exc: BaseException) -> str:
    """``str(exc)``, never raising: the one place nbdebug reads an exception's message.

    An exception's ``__str__`` is the user's code and may raise anything (even ``KeyboardInterrupt``); then the
    result is a placeholder that says so.
    """
    try:
        return str(exc)
    except BaseException as e:  # noqa: BLE001 - the user's own exception must still reach them, not this one
        return f"<unprintable: its __str__ raised {type(e).__name__}>"


def describe_exception(exc: BaseException) -> str:
    """``"Type: message"`` of any exception, never raising (see ``exception_message``)."""
    return f"{type(exc).__name__}: {exception_message(exc)}"
