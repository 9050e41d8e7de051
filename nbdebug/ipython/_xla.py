"""``%%xlametrics`` (what a cell did on the XLA device) and ``%%compilecheck`` (torch.compile breaks/recompiles).

Glue only: argument parsing and running the cell inside a recorder (``nbdebug.xla.watch()``, ``capture_compile()``)
through ``nbdebug.ipython._cell.run_body``, which returns the recorder's ``result``; the work is in
``nbdebug.core.xla`` and ``nbdebug.core.compile``.  Nothing heavy is imported until a magic runs.
"""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from nbdebug.ipython._args import parse_args
from nbdebug.ipython._state import ExtensionState


@magics_class
class XlaMagics(Magics):
    """Compilation diagnostics for torch_xla and torch.compile."""

    nbd_state: ExtensionState

    @magic_arguments()
    @argument("--steps", type=int, default=None, help="training steps the cell runs (default: torch_xla.sync() calls)")
    @argument("--no-debug", action="store_true", help="do not capture torch_xla's debug analysis")
    @argument("-o", "--output", metavar="NAME", help="also store the result in this variable")
    @cell_magic
    def xlametrics(self, line: str, cell: str) -> Any:
        """Show what this cell did on the XLA device, and what makes it slow.

        Usage::

            %%xlametrics [--steps N] [--no-debug] [-o NAME]
            for batch in loader:
                train_step(batch)
                torch_xla.sync()

        Reports the difference the cell made, read through torch_xla's metrics API: compiles, cache hits,
        executions, device->host transfers, CPU fallback ops, compile time, one row per torch_xla.sync() when
        the cell loops; then the diagnosis (recompilation, host_sync, cpu_fallback, missing_sync) with fixes.
        With debug analysis on, each cause is mapped to your source line. torch_xla reads PT_XLA_DEBUG_LEVEL
        once, at its first execution: if nothing has run on the XLA device yet, the magic switches it on for
        the rest of the session; otherwise set `%env PT_XLA_DEBUG_LEVEL=2` right after a kernel restart.

        Returns an ``XlaCellReport`` (``.diagnosis``, ``.report``, ``.per_step``, ``.to_pandas()``). When the
        cell raises, the report of what it did up to the error is shown, then the error is raised again.
        """
        args = parse_args(self.xlametrics, line, "%%xlametrics")
        if args.steps is not None and args.steps < 0:
            raise UsageError(f"%%xlametrics: --steps {args.steps}: expected a number of steps >= 0")
        from nbdebug.core.xla import live

        if not live.available():
            raise UsageError("%%xlametrics needs torch_xla, which is not installed: pip install 'nbdebug[xla]' "
                             "(to diagnose a saved report instead: nbdebug.xla.diagnose(text))")
        from nbdebug.ipython._cell import run_body

        w = live.watch(steps=args.steps, debug=not args.no_debug)
        return run_body(self.shell, cell, magic="xlametrics", context=w, report=lambda error: w.result,
                        output=args.output)

    @magic_arguments()
    @argument("--show-torch-logs", action="store_true", help="also let torch print its own log lines")
    @argument("-o", "--output", metavar="NAME", help="also store the result in this variable")
    @cell_magic
    def compilecheck(self, line: str, cell: str) -> Any:
        """Find torch.compile graph breaks, recompilations and recompile-limit hits in this cell.

        Usage::

            %%compilecheck [-o NAME]
            model = torch.compile(model)
            for x in batches:
                model(x)

        Listens to torch's own `graph_breaks` and `recompiles` logs while the cell runs and reports each graph
        break with its reason and your source line, each recompilation with the guard that failed, and any
        function that hit torch._dynamo.config.recompile_limit (it then runs eagerly), with fixes.

        Returns a ``CompileReport`` (``.breaks``, ``.recompiles``, ``.limit_hits``, ``.findings``). Your own
        torch logging settings (``TORCH_LOGS``, ``torch._logging.set_logs``) are back in effect afterwards. When the
        cell raises, the report of what it compiled up to the error is shown, then the error is raised again.
        """
        args = parse_args(self.compilecheck, line, "%%compilecheck")
        from nbdebug.core.compile import capture_compile
        from nbdebug.ipython._cell import run_body

        cap = capture_compile(quiet=not args.show_torch_logs)
        return run_body(self.shell, cell, magic="compilecheck", context=cap, report=lambda error: cap.result,
                        output=args.output)


def register(state: ExtensionState) -> None:
    """Register ``%%xlametrics`` and ``%%compilecheck``."""
    state.register_magics(XlaMagics)
