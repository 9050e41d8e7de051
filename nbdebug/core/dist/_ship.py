"""Ship names from the notebook to the ranks: functions and classes as source, modules as imports, values pickled.

Ranks are fresh processes (``spawn`` semantics, so a kernel that already initialised CUDA is no problem), so
nothing defined in the notebook exists there unless it is sent.  What cannot be sent is refused up front with a
message that says why and what to do, instead of failing later inside every rank.
"""

from __future__ import annotations

import inspect
import pickle
import textwrap
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nbdebug.errors import DistUsageError

__all__ = ["Shipment", "ship"]


@dataclass(frozen=True)
class Shipment:
    """What goes to the ranks: a preamble (imports and definitions) and pickled values."""

    preamble: str
    values: bytes | None
    shipped: tuple[str, ...]
    notes: tuple[str, ...]


def _is_cuda_tensor(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and getattr(getattr(value, "device", None), "type", "cpu") not in (
        "cpu", "meta")


def _source_of(name: str, obj: Any) -> str:
    try:
        src = textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError) as e:
        raise DistUsageError(
            f"--use {name}: cannot find the source of {type(obj).__name__} {name!r} ({e}); define it in a notebook "
            "cell or a .py file (source is what is shipped to the ranks)"
        ) from e
    return src


def _ship_callable(name: str, obj: Any, notes: list[str]) -> str:
    if isinstance(obj, types.FunctionType):
        if obj.__name__ == "<lambda>":
            raise DistUsageError(
                f"--use {name}: {name!r} is a lambda; lambdas cannot be shipped to the ranks (their source is not a "
                f"definition). Write it as `def {name}(...): ...` in a cell and pass --use {name}"
            )
        if obj.__closure__:
            free = ", ".join(obj.__code__.co_freevars)
            raise DistUsageError(
                f"--use {name}: function {name!r} is a closure over {free}; the captured values cannot be shipped. "
                "Define it at the top level of a cell and pass what it captured as arguments or with --use"
            )
    if obj.__module__ not in ("__main__", "builtins") and not obj.__module__.startswith("<"):
        # importable from a module: import it by name instead of copying its source
        target = obj.__qualname__
        if "." not in target:
            return f"from {obj.__module__} import {target} as {name}" if target != name else \
                f"from {obj.__module__} import {name}"
    src = _source_of(name, obj)
    if obj.__name__ != name:
        src += f"\n{name} = {obj.__name__}\n"
    return src


def ship(names: Iterable[str], namespace: Mapping[str, Any]) -> Shipment:
    """Prepare ``names`` from ``namespace`` (the notebook's globals) for the ranks.

    Modules become ``import`` lines, functions and classes their source (in the order given), anything else is
    pickled.  Refused, with the reason: lambdas, closures, CUDA tensors (ship CPU tensors and move them in the
    rank), open files, sockets, locks, generators and anything else that does not pickle.
    """
    lines: list[str] = []
    values: dict[str, Any] = {}
    notes: list[str] = []
    shipped: list[str] = []
    names = [n.strip() for n in names if n.strip()]
    for name in names:
        if not name.isidentifier():
            raise DistUsageError(f"--use {name!r}: expected a Python name from the notebook, e.g. --use model_fn,Config")
        if name not in namespace:
            raise DistUsageError(f"--use {name}: no variable {name!r} is defined in the notebook (run its cell first?)")
        obj = namespace[name]
        if isinstance(obj, types.ModuleType):
            mod = obj.__name__
            lines.append(f"import {mod}" if mod == name else f"import {mod} as {name}")
        elif isinstance(obj, (types.FunctionType, type)):
            lines.append(_ship_callable(name, obj, notes))
        else:
            if _is_cuda_tensor(obj):
                raise DistUsageError(
                    f"--use {name}: {name!r} is a tensor on {obj.device}; CUDA tensors cannot be shipped (each rank "
                    f"would map it onto the same GPU). Ship `{name}_cpu = {name}.cpu()` and move it in the rank"
                )
            cls = type(obj)
            if cls.__module__ == "__main__" and cls.__name__ not in names and cls.__name__ not in shipped:
                # an instance of a notebook class needs the class in the rank too
                lines.append(_source_of(cls.__name__, cls))
                shipped.append(cls.__name__)
                notes.append(f"shipped class {cls.__name__} too (needed to unpickle {name})")
            try:
                pickle.dumps(obj)
            except Exception as e:
                raise DistUsageError(
                    f"--use {name}: {type(obj).__name__} value {name!r} cannot be pickled ({type(e).__name__}: {e}); "
                    "open files, sockets, locks, generators and CUDA state cannot cross to another process. "
                    "Create it inside the cell instead"
                ) from e
            values[name] = obj
        shipped.append(name)
    # functions that read notebook globals which were not shipped work in the notebook and fail in the ranks
    for name in shipped:
        obj = namespace.get(name)
        if isinstance(obj, types.FunctionType) and obj.__module__ == "__main__":
            missing = sorted(
                g for g in obj.__code__.co_names
                if g in namespace and g not in shipped and not g.startswith("_")
                and not isinstance(namespace[g], types.ModuleType)
            )
            if missing:
                notes.append(f"{name} reads notebook global(s) {', '.join(missing)} that were not shipped; add them "
                             "to --use if the ranks need them")
    return Shipment(
        preamble="\n\n".join(lines) + ("\n" if lines else ""),
        values=pickle.dumps(values) if values else None,
        shipped=tuple(shipped),
        notes=tuple(notes),
    )
