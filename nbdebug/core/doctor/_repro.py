"""Reproducibility: seed everything, and compare two seeded runs step by step."""

from __future__ import annotations

import math
import os
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from nbdebug.core._result import Result
from nbdebug.core._rng import RngGuard
from nbdebug.errors import InvalidArgumentError

__all__ = ["set_reproducible", "check_reproducible", "ReproReport", "RngGuard", "seed_all", "unseeded_generators"]


def seed_all(seed: int) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:  # pragma: no cover
        pass


def set_reproducible(seed: int = 0, *, deterministic: bool = True, warn_only: bool = True) -> None:
    """Seed Python, numpy and torch (all devices) and select deterministic kernels.

    Parameters
    ----------
    seed : int
        The seed for every generator.
    deterministic : bool
        Also set ``torch.use_deterministic_algorithms``, cuDNN deterministic mode (benchmark off) and
        ``CUBLAS_WORKSPACE_CONFIG`` (slower; for debugging).
    warn_only : bool
        Warn instead of raising when an op has no deterministic implementation.
    """
    import torch

    if not isinstance(seed, int) or isinstance(seed, bool):
        raise InvalidArgumentError(f"set_reproducible: seed must be an int, got {seed!r}")
    os.environ["PYTHONHASHSEED"] = str(seed)
    seed_all(seed)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        torch.use_deterministic_algorithms(True, warn_only=warn_only)


@dataclass(frozen=True, repr=False)
class ReproReport(Result):
    """Whether two seeded runs of a function agree, step by step.

    Attributes
    ----------
    reproducible : bool
        True when every step's value agreed (within ``atol``).
    first_divergent_step : int or None
        Index of the first step whose values differ (or where one run stopped early).
    value_a, value_b : object
        The two runs' values at that step.
    steps_compared : int
        Number of steps compared.
    seed, runs : int
        The seed used before each run, and how many runs.
    """

    reproducible: bool
    first_divergent_step: int | None
    value_a: Any
    value_b: Any
    steps_compared: int
    seed: int
    runs: int


    def _summary_line(self) -> str:
        if self.reproducible:
            return f"reproducible over {self.steps_compared} steps"
        return f"diverges at step {self.first_divergent_step}"

    def __bool__(self) -> bool:
        return self.reproducible


def _as_float_list(value: Any) -> list[float]:
    import torch

    if isinstance(value, torch.Tensor):
        return [float(v) for v in value.detach().float().reshape(-1).cpu().tolist()]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _as_float_list(v)]
    if isinstance(value, dict):
        return [x for k in sorted(value) for x in _as_float_list(value[k])]
    if hasattr(value, "tolist"):
        return _as_float_list(value.tolist())
    return [float(value)]


def _short(value: Any) -> Any:
    vals = _as_float_list(value)
    return vals[0] if len(vals) == 1 else vals[:8]


def check_reproducible(fn: Callable[[], Iterable[Any]], *, seed: int = 0, runs: int = 2, atol: float = 0.0) -> ReproReport:
    """Run ``fn`` ``runs`` times, seeding every RNG with ``seed`` before each, and compare step by step.

    Parameters
    ----------
    fn : callable
        Builds and trains whatever it needs and returns (or yields) one value per step: a loss, a tensor, a list
        of tensors.  Build the model inside ``fn`` so that each run starts from the same initialisation.
    seed : int
        Seed for Python, numpy and torch before each run.
    runs : int
        Number of runs (at least 2).
    atol : float
        Absolute tolerance (0: bit-for-bit).

    Returns
    -------
    ReproReport
        ``first_divergent_step`` names the first step where two runs differ.
    """
    if not callable(fn):
        raise InvalidArgumentError(
            f"check_reproducible: expected a callable returning per-step values, got {type(fn).__name__}"
        )
    if not isinstance(runs, int) or runs < 2:
        raise InvalidArgumentError(f"check_reproducible: runs must be an int >= 2, got {runs!r}")
    if not isinstance(seed, int):
        raise InvalidArgumentError(f"check_reproducible: seed must be an int, got {seed!r}")
    results: list[list[list[float]]] = []
    raw: list[list[Any]] = []
    with RngGuard():
        for _ in range(runs):
            seed_all(seed)
            values = list(fn())
            raw.append(values)
            results.append([_as_float_list(v) for v in values])
    ref = results[0]
    for other_i in range(1, runs):
        other = results[other_i]
        for step in range(max(len(ref), len(other))):
            if step >= len(ref) or step >= len(other):
                a = raw[0][step] if step < len(ref) else None
                b = raw[other_i][step] if step < len(other) else None
                return ReproReport(False, step, a if a is None else _short(a), b if b is None else _short(b),
                                   min(len(ref), len(other)), seed, runs)
            x, y = ref[step], other[step]
            same = len(x) == len(y) and all(
                (a == b) or (math.isnan(a) and math.isnan(b)) or abs(a - b) <= atol for a, b in zip(x, y)
            )
            if not same:
                return ReproReport(False, step, _short(raw[0][step]), _short(raw[other_i][step]), len(ref), seed, runs)
    return ReproReport(True, None, None, None, len(ref), seed, runs)


def unseeded_generators(model: Any) -> list[tuple[str, Any]]:
    """(module path.attribute, generator) for each numpy ``Generator`` a module holds that was made without a seed:
    torch's seed does not reach it, and a fresh one draws its seed from the OS (an entropy of 128 bits; a seed a
    person typed is far smaller)."""
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        return []
    found = []
    for name, module in model.named_modules():
        for attr, value in vars(module).items():
            if isinstance(value, np.random.Generator):
                entropy = getattr(value.bit_generator.seed_seq, "entropy", None)
                if isinstance(entropy, int) and entropy >= 2**64:
                    found.append((f"{name}.{attr}" if name else attr, value))
    return found
