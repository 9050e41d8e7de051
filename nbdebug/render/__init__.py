"""Pure functions: result object -> text / HTML / static picture, found through one registry by result type.

Importing this package imports every render module, so that each registers its renderers (``@renders``).
Nothing here imports torch, pandas or matplotlib at import time.
"""

from __future__ import annotations

import importlib

from nbdebug.render._registry import KINDS, mimebundle, renderer, renders, to_figure, to_html, to_png, to_text

__all__ = ["renders", "renderer", "to_text", "to_html", "to_png", "to_figure", "mimebundle", "KINDS", "MODULES"]

# every module that registers renderers; a new capability's render module is added here
MODULES = (
    "nbdebug.render.findings",
    "nbdebug.render.diagnosis",
    "nbdebug.render.status",
    "nbdebug.render.memory",
    "nbdebug.render.memory.viewer",
    "nbdebug.render.memory.plot",
    "nbdebug.render.memory.widget",
    "nbdebug.render.training",
    "nbdebug.render.xla",
    "nbdebug.render.compile",
    "nbdebug.render.dist",
    "nbdebug.render.batch",
    "nbdebug.render.predict",
)

for _name in MODULES:
    importlib.import_module(_name)
