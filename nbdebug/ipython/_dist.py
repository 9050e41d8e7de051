"""``%%torchrun``: run a cell on N local ranks and explain failures and hangs; ``%postmortem``: read a cluster job's
artifacts; a diagnosis section for dist errors."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from nbdebug.errors import describe_exception
from nbdebug.ipython._args import parse_args
from nbdebug.ipython._state import ExtensionState


def _parse_env(items: list[str] | None) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise UsageError(f"%%torchrun --env {item!r}: expected KEY=VALUE, e.g. --env NCCL_DEBUG=INFO")
        env[key] = value
    return env


def _refuse_ipython_syntax(shell: Any, cell: str) -> None:
    """The ranks run plain Python: a ``!cmd`` or ``%magic`` line would be a SyntaxError on every rank."""
    if shell is None:
        return
    try:
        transformed = shell.transform_cell(cell)
    except Exception:  # a cell IPython cannot transform: the ranks will report its SyntaxError
        return
    if transformed.strip() == cell.strip():
        return
    line = next((ln.strip() for ln in cell.splitlines() if ln.strip().startswith(("!", "%"))), "")
    shown = f" ({line!r})" if line else ""
    raise UsageError(
        f"%%torchrun: the cell uses IPython syntax{shown}, but every rank runs it as plain Python; use "
        "subprocess.run([...]) or os.system(...) for shell commands, or run the line in a cell of its own"
    )


@magics_class
class DistMagics(Magics):
    """The ``%%torchrun`` cell magic and the ``%postmortem`` line magic."""

    nbd_state: ExtensionState

    @magic_arguments()
    @argument("-n", "--nprocs", type=int, default=2, help="number of ranks (default 2)")
    @argument("--timeout", type=float, default=60.0,
              help="hang watchdog: seconds without progress on any rank before stacks are taken and ranks killed "
                   "(default 60)")
    @argument("--backend", default="gloo", help="gloo (CPU, default) or nccl (one GPU per rank)")
    @argument("--env", action="append", metavar="K=V", help="environment variable for the ranks (repeatable)")
    @argument("--use", default="", metavar="NAME1,NAME2",
              help="notebook functions, classes, modules or picklable values to ship to the ranks")
    @argument("--detail", action="store_true",
              help="TORCH_DISTRIBUTED_DEBUG=DETAIL: catch collective op/shape/dtype mismatches at once")
    @argument("--no-fr", action="store_true", help="do not switch the Flight Recorder on")
    @argument("-q", "--quiet", action="store_true", help="do not stream the ranks' output (it is kept in the result)")
    @argument("--keep-files", action="store_true", help="keep the run folder (error files, dumps)")
    @argument("-o", "--output", metavar="NAME", help="also bind the DistRun to this variable")
    @cell_magic
    def torchrun(self, line: str, cell: str) -> Any:
        """Run this cell on N local ranks with ``torch.distributed`` initialised, and explain what went wrong.

        Usage::

            %%torchrun -n 2 [--timeout 60] [--backend gloo|nccl] [--env K=V ...] [--use f,Model,cfg] [-o run]
            import torch, torch.distributed as dist        # no init_process_group needed (a call is ignored)
            x = torch.ones(3) * dist.get_rank()
            dist.all_reduce(x)
            print(x)                                       # shown as "[rank 0] tensor(...)", "[rank 1] ..."

        Every rank is a fresh process: names from earlier cells exist there only if passed with ``--use``
        (functions and classes travel as source, modules as imports, other values pickled; lambdas, closures,
        CUDA tensors and open files cannot travel, and are refused with the reason).

        Returns a ``DistRun``: ``.succeeded``, ``.ok``, ``.ranks`` (exit code, stdout, stderr, traceback per rank), ``.primary``
        (the rank whose failure came first and caused the others, not the victims that died of a closed
        connection), ``.hang`` (when no rank made progress for ``--timeout`` seconds: each rank's stack, the
        collective the others wait in, and the rank(s) that never reached it, with file and line).  No rank
        process survives the cell: not after a failure, a hang, or an interrupt.

        Inside the cell, ``nbdebug.dist.check_consistency(model)``, ``check_data_order(batch_ids)`` and
        ``log_step(loss)`` compare the ranks; their results are listed in the returned ``DistRun``.

        What the cell does, whatever happened in the ranks: the body never runs in the kernel, so there is no
        exception of the user's to re-raise here.  The ``DistRun`` is always built, bound to ``-o NAME`` and
        returned, and IPython shows it as the cell's output: a failed run or a hang is a report (``.ok`` is
        False), not an exception in the kernel.  A trailing ``;`` hides it like any output; ``-o`` keeps it.
        Only problems of the magic itself raise: bad options, names ``--use`` cannot ship or an impossible
        request (``UsageError``, one line), and a run that could not be started or collected (``DistRunError``).
        """
        args = parse_args(self.torchrun, line, "%%torchrun")
        if args.nprocs < 1:
            raise UsageError(f"%%torchrun -n {args.nprocs}: expected at least 1 rank")
        if args.timeout <= 0:
            raise UsageError(f"%%torchrun --timeout {args.timeout:g}: expected a positive number of seconds")
        if args.backend.lower() not in ("gloo", "nccl"):
            raise UsageError(f"%%torchrun --backend {args.backend!r}: expected gloo or nccl")
        env = _parse_env(args.env)
        if not cell.strip():
            raise UsageError("%%torchrun: the cell is empty; write the code every rank should run below the magic")
        _refuse_ipython_syntax(self.shell, cell)
        from nbdebug.core.dist import RunInterrupted, run
        from nbdebug.errors import DistUsageError

        user_ns = self.shell.user_ns if self.shell is not None else {}

        try:
            result = run(
                cell, args.nprocs, timeout=args.timeout, backend=args.backend, env=env, use=args.use,
                namespace=user_ns, echo=not args.quiet, flight_recorder=not args.no_fr,
                detail=args.detail, keep_files=args.keep_files,
            )
        except DistUsageError as e:
            raise UsageError(f"%%torchrun: {e}") from e
        except RunInterrupted as stop:  # the ranks are gone: show what was seen, then stop like any interrupt
            if args.output:
                user_ns[args.output] = stop.run
            from IPython.display import display

            display(stop.run)
            raise
        if args.output:
            user_ns[args.output] = result
        from nbdebug.ipython._cell import _silenced

        return None if _silenced(self.shell, cell) else result

    @magic_arguments()
    @argument("paths", nargs="+", metavar="PATH", help="folders, files or globs of a job's per-rank artifacts")
    @argument("-o", "--output", metavar="NAME", help="also bind the PostMortem to this variable")
    @line_magic
    def postmortem(self, line: str) -> Any:
        """Read a distributed job's per-rank artifacts and say what went wrong.

        Usage::

            %postmortem /shared/artifacts/my-job [more paths or globs] [-o pm]

        The same as ``nbdebug.dist.postmortem(paths)``: the primary failure with its diagnosis, the ranks that
        died as a consequence, where a hang diverged (by Flight Recorder sequence id) and who never arrived,
        mismatched collectives, bad nodes, and what to collect next time.  Returns a ``PostMortem``.
        """
        args = parse_args(self.postmortem, line, "%postmortem")
        from nbdebug.core.dist import postmortem
        from nbdebug.errors import DistUsageError

        try:
            result = postmortem(args.paths)
        except DistUsageError as e:
            raise UsageError(f"%postmortem: {e}") from e
        if args.output and self.shell is not None:
            self.shell.user_ns[args.output] = result
        return result


_DIST_TEXT = re.compile(r"torch\.distributed|ProcessGroup|c10d|gloo|NCCL|WorkNCCL|monitoredBarrier|TCPStore|"
                        r"rendezvous|MASTER_(?:ADDR|PORT)|init_process_group")


_DIST_TYPES = frozenset({"DistError", "DistBackendError", "DistStoreError", "DistNetworkError", "DistQueueEmptyError",
                         "ChildFailedError"})


def _is_distributed(exc: BaseException, text: str) -> bool:
    """The error comes from torch.distributed (its type, a frame in it, or a message only it prints)."""
    if type(exc).__module__.startswith("torch.distributed") or type(exc).__name__ in _DIST_TYPES:
        return True
    tb = exc.__traceback__
    while tb is not None:
        if "torch/distributed/" in tb.tb_frame.f_code.co_filename.replace("\\", "/"):
            return True
        tb = tb.tb_next
    return bool(_DIST_TEXT.search(text))


def dist_enricher(exc: BaseException, diagnosis: Any) -> Any:
    """Add a 'Distributed' section to the diagnosis of an error that comes from torch.distributed / NCCL.

    A single-process error (a plain ``BrokenPipeError``, a web server's ``Address already in use``) is left alone.
    """
    text = describe_exception(exc)
    if not _is_distributed(exc, text):
        return diagnosis
    from nbdebug.core.dist._failures import classify, explain_detail_mismatch, meaning

    role, entry, culprit = classify(text)
    lines = []
    fixes: list[Any] = []
    if entry is not None:
        lines.append(f"{meaning(entry)}.")
        if role == "victim":
            lines.append("This process is probably a victim: another rank failed or stalled first. Run the code with "
                         "%%torchrun (or python -m nbdebug torchrun) to see which rank and where.")
        if culprit is not None:
            lines.append(f"The message names rank {culprit}.")
        if getattr(diagnosis, "kind", None) != entry.slug:  # the diagnosis lists this entry's fixes already
            fixes += entry.fixes
    detail = explain_detail_mismatch(text)
    if detail:
        lines.append(detail)
    if "NCCL" in text and ("NCCL WARN" in text or "NCCL INFO" in text or "WorkNCCL" in text):
        from nbdebug.core.dist._nccl import parse_nccl_log

        log = parse_nccl_log(text)
        lines += [f"{p.title}: {p.message}" for p in log.errors()]
    if not lines:
        return diagnosis
    from nbdebug.core.explain import Section

    unique = tuple(dict.fromkeys(fixes))
    section = Section(title="Distributed", text="\n".join(lines), fixes=unique)
    try:
        return dataclasses.replace(diagnosis, sections=(*diagnosis.sections, section))
    except (TypeError, AttributeError):  # a diagnosis type without sections: leave it alone
        return diagnosis


def register(state: ExtensionState) -> None:
    """Register ``%%torchrun``, ``%postmortem`` and the distributed-error diagnosis section."""
    state.register_magics(DistMagics)
    state.add_enricher(dist_enricher)


__all__ = ["DistMagics", "register", "dist_enricher"]
