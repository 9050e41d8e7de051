"""``%inspect_batch``: look at a batch before it reaches the model (issue 28).

Imported by ``%load_ext nbdebug``: no torch, numpy or pandas at import time.  The magic evaluates its expressions
in the user's namespace, calls ``nbdebug.inspect_batch`` and returns the ``BatchReport``.
"""

from __future__ import annotations

import re
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from nbdebug.ipython._args import parse_args
from nbdebug.ipython._state import ExtensionState


def _eval(shell: Any, expr: str | None, what: str) -> Any:
    if expr is None:
        return None
    try:
        return eval(expr, shell.user_ns)  # noqa: S307 - the user's own expression, in the user's namespace
    except Exception as e:
        raise UsageError(f"%inspect_batch: could not evaluate the {what} {expr!r}: {e!r}") from e


def _floats(text: str | None, flag: str) -> list[float] | None:
    if text is None:
        return None
    try:
        return [float(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise UsageError(f"%inspect_batch: {flag} {text!r}; expected numbers separated by commas (0.485,0.456,0.406)"
                         ) from None


@magics_class
class BatchMagics(Magics):
    """The batch inspector's magic."""

    nbd_state: ExtensionState
    shell: Any

    @magic_arguments()
    @argument("batch", nargs="*", help="expression giving the batch (a tensor, a dict of tensors, an (x, y) tuple, "
              "a DataFrame, a dataset or a DataLoader)")
    @argument("-n", "--batches", type=int, default=4, help="DataLoader batches to look at (default 4)")
    @argument("--tokenizer", metavar="EXPR", help="the Hugging Face tokenizer of the text")
    @argument("--model", metavar="EXPR", help="the model the batch is for (embedding size, label shift, forward "
              "signature)")
    @argument("--other", metavar="EXPR", help="another split: report its rows found in this one")
    @argument("--label", metavar="COLUMN", help="the label column of a table")
    @argument("--mean", metavar="M,M,M", help="the images' normalization mean, RGB order")
    @argument("--std", metavar="S,S,S", help="the images' normalization std, RGB order")
    @argument("--max-length", type=int, default=None, help="the tokenizer's max_length (rows cut at it)")
    @argument("-o", "--output", metavar="NAME", help="also bind the BatchReport to NAME")
    @line_magic
    def inspect_batch(self, line: str) -> Any:
        """Look at a batch and name its silent data bugs (decoded rows, masks, labels, pixels, columns).

        Usage::

            %inspect_batch batch --tokenizer tok --model model
            %inspect_batch next(iter(train_loader)) --mean 0.485,0.456,0.406 --std 0.229,0.224,0.225
            %inspect_batch train_loader -n 2 --other val_loader -o report

        The batch expression is evaluated in your namespace.  Text rows are decoded with special tokens visible,
        label tokens that train marked apart from those masked with -100; images are shown de-normalized in a
        grid with their labels; tables get per-column statistics.  Each finding names its fix, with code.
        Returns a ``BatchReport`` (``-o NAME`` also binds it); the same as ``nbdebug.inspect_batch(...)``.
        """
        # the expression is everything before the first flag, kept as typed (shlex would eat its quotes)
        m = re.search(r"(?:^|\s)--?[A-Za-z]", line)
        expr = (line[: m.start()] if m else line).strip()
        args = parse_args(self.inspect_batch, line[m.start():] if m else "", "%inspect_batch")
        if args.batch:
            raise UsageError(f"%inspect_batch: unexpected {' '.join(args.batch)!r} after the flags; put the batch "
                             "expression first")
        if not expr:
            raise UsageError("%inspect_batch: name the batch: %inspect_batch EXPR [--tokenizer TOK] [--model MODEL]")
        if args.batches < 1:
            raise UsageError(f"%inspect_batch: -n must be >= 1, got {args.batches}")
        from nbdebug.core.data import inspect_batch
        from nbdebug.errors import InvalidArgumentError

        batch = _eval(self.shell, expr, "batch expression")
        try:
            report = inspect_batch(batch, tokenizer=_eval(self.shell, args.tokenizer, "tokenizer"),
                                   model=_eval(self.shell, args.model, "model"),
                                   other=_eval(self.shell, args.other, "other split"), label=args.label,
                                   mean=_floats(args.mean, "--mean"), std=_floats(args.std, "--std"),
                                   max_length=args.max_length, batches=args.batches)
        except InvalidArgumentError as e:
            raise UsageError(f"%inspect_batch {expr}: {e}") from e
        if args.output:
            self.shell.user_ns[args.output] = report
        return report


def register(state: ExtensionState) -> None:
    """Register ``%inspect_batch``."""
    state.register_magics(BatchMagics)
