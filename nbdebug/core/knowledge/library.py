"""Errors raised by the libraries around PyTorch (transformers, Lightning, accelerate, PEFT, DeepSpeed, diffusers),
with the fixes their documentation gives.
"""

from __future__ import annotations

from nbdebug.core.knowledge._schema import Entry

__all__ = ["ENTRIES"]

ENTRIES: tuple[Entry, ...] = ()
