"""What ``%nbdebug`` reports: versions, accelerators and which features are on."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nbdebug.core._result import Result

__all__ = ["Status", "collect_status"]


@dataclass(frozen=True, repr=False)
class Status(Result):
    """Environment and feature status.

    ``features`` holds ``(name, on, description)``; ``modes`` names the state of a feature that has more than
    on and off (``{"explain": "all"}``: unrecognised errors are reported too).
    """

    version: str
    python: str
    torch: str | None
    cuda_available: bool | None
    cuda_devices: tuple[str, ...]
    torch_xla: str | None
    features: tuple[tuple[str, bool, str], ...]  # (name, on, description)
    modes: Mapping[str, str] = field(default_factory=dict)

    def state(self, name: str) -> str:
        """``"on"``, ``"off"``, or the feature's mode when it is on in one (``"all"``)."""
        for feature, on, _ in self.features:
            if feature == name:
                return self.modes.get(name, "on") if on else "off"
        raise KeyError(f"no feature {name!r}; expected one of {', '.join(f for f, _, _ in self.features)}")

    def _summary_line(self) -> str:
        on = ",".join(name if name not in self.modes else f"{name} {self.modes[name]}"
                      for name, is_on, _ in self.features if is_on) or "none"
        return f"nbdebug {self.version}, torch {self.torch or 'missing'}, on: {on}"

    def _records(self) -> list[dict[str, Any]]:
        return [{"feature": n, "on": on, "state": self.state(n), "description": d} for n, on, d in self.features]


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def collect_status(features: tuple[tuple[str, bool, str], ...] = (), modes: Mapping[str, str] | None = None) -> Status:
    """Collect the status; imports torch (the user asked for its CUDA state), never torch_xla."""
    from nbdebug import __version__

    torch_version = None
    cuda_available: bool | None = None
    devices: tuple[str, ...] = ()
    if importlib.util.find_spec("torch") is not None:
        import torch

        torch_version = torch.__version__
        cuda_available = bool(torch.cuda.is_available())
        if cuda_available:
            devices = tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    xla_version = _dist_version("torch_xla") or _dist_version("torch-xla")
    return Status(
        version=__version__,
        python=sys.version.split()[0],
        torch=torch_version,
        cuda_available=cuda_available,
        cuda_devices=devices,
        torch_xla=xla_version,
        features=features,
        modes=dict(modes or {}),
    )
