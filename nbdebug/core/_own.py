"""nbdebug's own source files, told apart from the user's by their package paths.

A frame, a debug-log line or a recorded stack may name nbdebug's files in several ways: by absolute path wherever
it is installed (a log may come from another machine), or relative to ``sys.path`` (PyTorch's Python tracer).
A folder that is merely named ``nbdebug`` (a clone of this repository, with the user's scripts in it) is not
nbdebug: only its package's subpackages and top-level modules are.
"""

from __future__ import annotations

import re

__all__ = ["OWN_RELATIVE", "OWN_ANYWHERE", "SUBPACKAGES", "MODULES"]

#: the package's subpackages and top-level modules (a test checks them against the package itself)
SUBPACKAGES = ("core", "ipython", "render", "cli", "integrations", "examples")
MODULES = ("__init__", "__main__", "xla", "dist", "errors", "_units", "_files")

_TAIL = (r"nbdebug[/\\](?:(?:" + "|".join(SUBPACKAGES) + r")[/\\]|(?:"
         + "|".join(re.escape(m) for m in MODULES) + r")\.py$)")
#: ``.match`` a path relative to ``sys.path`` ("nbdebug/ipython/_cell.py")
OWN_RELATIVE = re.compile(_TAIL)
#: ``.search`` any path ("/venv/lib/python3.11/site-packages/nbdebug/xla.py")
OWN_ANYWHERE = re.compile(r"[/\\]" + _TAIL)
