"""``%%memtrace`` and the ``oom`` feature (``%nbdebug oom on|off``).

Light to import: torch and numpy are imported only when a magic runs or a feature is switched on.
"""

from __future__ import annotations

import sys
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from nbdebug.ipython._args import parse_args
from nbdebug.ipython._state import ExtensionState, Feature


@magics_class
class MemoryMagics(Magics):
    """Memory tracing magics."""

    nbd_state: ExtensionState

    @magic_arguments()
    @argument("-o", "--output", metavar="NAME", help="also bind the MemTrace result to this variable")
    @argument("--save", metavar="PATH", help="also write the recording as a snapshot pickle")
    @argument("--device", default=None, help="CUDA device index or 'cpu' (default: current CUDA device, else CPU)")
    @argument("--max-entries", type=int, default=1_000_000, help="CUDA history ring buffer size")
    @argument("--no-stacks", action="store_true", help="CUDA: do not record Python stacks (faster, no sites)")
    @argument("--categories", action="store_true",
              help="CPU: label memory as parameter/activation/gradient/optimizer state/temporary")
    @argument("--predict", action="store_true",
              help="first predict the cell's peak on fake tensors (nothing allocated), then run it and show "
                   "predicted against measured, by kind")
    @line_cell_magic
    def memtrace(self, line: str, cell: str | None = None) -> Any:
        """Record what the cell allocates: the peak, what is still alive after it, and where it came from.

        Usage::

            %%memtrace                      # CUDA when available, else CPU (torch.profiler)
            %%memtrace -o trace --save cell.pickle
            %%memtrace --device cpu --categories
            %%memtrace --predict            # predicted peak first, then measured, by kind

        Shows a compact report (peak working memory, retained bytes, top sites, a small timeline) and returns a
        ``MemTrace``: ``.peak_bytes``, ``.retained_bytes``, ``.delta_bytes``, ``.top_sites``,
        ``.retained_sites``, ``.findings``, ``.snapshot`` (open it in the viewer).  Memory kept alive after the
        cell ("retained") points at the line that allocated it, named like the prompt (``In [12], line 3``), and
        is flagged as a ``memory_retained`` finding with its fixes: the classic leaks are ``losses.append(loss)``
        instead of ``loss.item()`` and inference without ``torch.no_grad()``.  What a training step keeps on
        purpose (the model's parameters, gradients, the optimizer's state) is told apart: a ``training_state``
        remark, not a warning.
        With ``--predict`` the cell first runs on fake copies of the tensors, modules and optimizers it reads
        (nothing allocated, nothing of yours changed), then for real, and the result is a ``PredictionCheck``:
        the predicted peak against the measured one, by kind (``.prediction``, ``.trace``).
        ``!cmd`` and ``%magic`` lines work inside the cell.  Recording always stops at the end of the
        cell, also when it raises or is interrupted; the cell's error is re-raised unchanged.
        """
        if cell is None:  # registered for lines too, so that %memtrace? shows this help
            raise UsageError("%memtrace is a cell magic: put %%memtrace [options] on the first line of the cell "
                             "(%memtrace? for the options)")
        args = parse_args(self.memtrace, line, "%%memtrace")
        device: Any = args.device
        if device is not None and device.isdigit():
            device = int(device)
        if args.save:
            import os

            folder = os.path.dirname(os.path.abspath(os.path.expanduser(args.save)))
            if not os.path.isdir(folder):
                raise UsageError(f"%%memtrace --save {args.save!r}: the folder {folder!r} does not exist; "
                                 "expected a path in an existing folder")
        if args.max_entries <= 0:
            raise UsageError(f"%%memtrace: --max-entries must be positive, got {args.max_entries}")
        from nbdebug.core.memory._trace import memtrace
        from nbdebug.errors import NbdebugError

        prediction = self._predict(cell, device) if args.predict else None
        recorder = memtrace(device, max_entries=args.max_entries, stacks=not args.no_stacks, save=args.save,
                            categories=args.categories or (prediction is not None and prediction.device == "cpu"))
        try:
            recorder.start()
        except NbdebugError as e:
            raise UsageError(f"%%memtrace: {e}") from e

        def report(error: BaseException | None) -> Any:
            namespace = self.shell.user_ns if self.shell is not None else None
            # the body was compiled last, under its own file name (compile_body): the block's code, whole
            compiled = getattr(getattr(self.shell, "compile", None), "_filename_map", None) or {}
            block = (str(next(reversed(compiled))), 0) if compiled else None
            from nbdebug.core._cells import cell_names

            result = recorder.finish(cells=cell_names(), namespace=namespace, block=block)
            if error is not None:
                from nbdebug.core.memory._oom import is_cuda_oom

                capture = getattr(self.nbd_state, "oom_capture", None)
                if capture is not None and is_cuda_oom(error):  # OOM capture is on by default inside %%memtrace
                    capture.snapshot, capture.pending = result.snapshot, True
            if prediction is not None:
                from nbdebug.core.memory._predict_cell import check

                return check(prediction, result)
            return result

        from nbdebug.ipython._cell import run_body

        # recording started above (its errors are usage errors); the context only stops it
        return run_body(self.shell, cell, magic="memtrace", context=_Stopping(recorder), report=report,
                        output=args.output)


    def _predict(self, cell: str, device: Any) -> Any:
        """The cell's predicted peak (``--predict``); a cell that cannot be predicted is a usage error, before
        anything runs."""
        import torch

        from nbdebug.core.memory._predict_cell import predict_cell
        from nbdebug.errors import NbdebugError
        from nbdebug.ipython._cell import compile_body

        on_cpu = device == "cpu" or not torch.cuda.is_available()
        shell: Any = self.shell
        try:
            return predict_cell(compile_body(shell, cell), shell.user_ns, "cpu" if on_cpu else "cuda")
        except NbdebugError as e:
            raise UsageError(f"%%memtrace --predict: {e}") from e


class _Stopping:
    """Context manager that stops a started recorder however the cell ends."""

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder

    def __enter__(self) -> Any:
        return self.recorder

    def __exit__(self, *exc: Any) -> None:
        self.recorder.stop()


class OomCapture:
    """``%nbdebug oom on``: keep CUDA memory history recording and snapshot the allocator when an OOM happens.

    The OOM observer cannot be detached from torch once attached, so one process-wide observer is attached on
    first use and forwards to whichever capture is switched on.
    """

    max_entries = 200_000
    _observer_attached = False
    _active: OomCapture | None = None

    def __init__(self, shell: Any = None) -> None:
        self.shell = shell  # whose namespace the OOM prediction looks for a model and a batch in
        self.on = False
        self.snapshot: Any = None  # MemorySnapshot of the last OOM (or a test's)
        self._raw: Any = None
        self.pending = False  # a %%memtrace cell died of OOM: explain it even with the feature off

    def _cuda(self) -> Any:
        torch: Any = sys.modules.get("torch")
        if torch is None:
            import torch
        return torch if torch.cuda.is_available() else None

    def enable(self) -> None:
        self.on = True
        OomCapture._active = self
        torch = self._cuda()
        if torch is None:
            return  # no CUDA: nothing to record; the enricher still adds the release note
        from nbdebug.core.memory._trace import cuda_recording

        settings = {"enabled": "all", "context": "all", "stacks": "python", "max_entries": self.max_entries}
        torch.cuda.memory._record_memory_history(**settings)
        cuda_recording["keep_on"] = settings
        if not OomCapture._observer_attached:
            torch._C._cuda_attach_out_of_memory_observer(_on_oom)
            OomCapture._observer_attached = True

    def disable(self) -> None:
        self.on = False
        if OomCapture._active is self:
            OomCapture._active = None
        torch: Any = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_available():
            return
        from nbdebug.core.memory._trace import cuda_recording

        cuda_recording["keep_on"] = None
        torch.cuda.memory._record_memory_history(enabled=None)

    def take_snapshot(self) -> Any:
        """The snapshot of the last OOM, loaded (or None)."""
        if self.snapshot is None and self._raw is not None:
            from nbdebug.core.memory import load_snapshot

            self.snapshot = load_snapshot(self._raw, name="snapshot at the OOM")
            self._raw = None
        return self.snapshot

    def enrich(self, exc: BaseException, diagnosis: Any) -> Any:
        from nbdebug.core.memory._oom import enrich_oom, enrich_oom_prediction, is_cuda_oom

        if self.on or self.pending:
            self.pending = False
            if is_cuda_oom(exc, diagnosis):
                diagnosis = enrich_oom(exc, diagnosis, self.take_snapshot())
        # with a model and a batch in scope: the step's predicted need and the fixes, whether capture is on or not
        namespace = getattr(self.shell, "user_ns", None)
        return enrich_oom_prediction(exc, diagnosis, namespace)


def _on_oom(device: int, alloc: int, device_allocated: int, device_free: int) -> None:
    """Called by the CUDA allocator just before it raises OutOfMemoryError: keep the allocator's state."""
    capture = OomCapture._active
    if capture is None or not capture.on:
        return
    import torch

    capture._raw = torch.cuda.memory._snapshot()
    capture.snapshot = None


def register(state: ExtensionState) -> None:
    """Register ``%%memtrace`` and the ``oom`` feature."""
    state.register_magics(MemoryMagics)
    capture = OomCapture(state.shell)
    state.oom_capture = capture  # type: ignore[attr-defined]
    state.add_feature(Feature("oom", "CUDA OOM capture: snapshot the allocator when a cell dies of OOM",
                              capture.enable, capture.disable))
    state.add_enricher(capture.enrich)
