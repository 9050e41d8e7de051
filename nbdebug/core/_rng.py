"""Every random state the user's process has (python, numpy, torch, CUDA), saved and put back.

The doctor trains a copy and the batch inspector draws a DataLoader's batches: neither may change what the user's
next draw, epoch order or initialisation would have been.
"""

from __future__ import annotations

import random
from typing import Any

__all__ = ["RngGuard"]


class RngGuard:
    """Save every RNG state on entry and put it back on exit."""

    def __enter__(self) -> RngGuard:
        import torch

        self.py = random.getstate()
        self.torch = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
        try:
            import numpy as np

            self.np: Any = np.random.get_state()
        except ImportError:  # pragma: no cover
            self.np = None
        return self

    def __exit__(self, *exc: Any) -> None:
        import torch

        random.setstate(self.py)
        torch.set_rng_state(self.torch)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        if self.np is not None:
            import numpy as np

            np.random.set_state(self.np)
