"""torch_xla diagnostics (public facade).

``parse_report(text)`` reads any torch_xla metrics report (2019 to 2.9+); ``diagnose(report, debug_log=...,
steps=...)`` says what makes the run slow (recompilation, host syncs, CPU fallbacks, a missing sync) and how to
fix it; ``watch()`` (and the ``%%xlametrics`` cell magic) measures what a block of code did on the XLA device,
through torch_xla's own metrics API.  Nothing here imports torch_xla until it is needed.
"""

from nbdebug.core.xla import *  # noqa: F403 - the facade is exactly core.xla's public names
from nbdebug.core.xla import __all__  # noqa: F401
