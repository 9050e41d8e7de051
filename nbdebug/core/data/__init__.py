"""Look at the batch: ``inspect_batch`` finds the silent data bugs of text, image and table batches.

The room: ``_inputs`` reads what was given into one plain shape; ``_text``, ``_images``, ``_tables`` and
``_labels`` check it; ``_splits`` compares two splits by hashes; ``_report`` holds the ``BatchReport``.  The texts
a person reads (titles, fixes, thresholds, chat markers) live in ``nbdebug.core.knowledge.batch``.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from nbdebug.core._findings import Finding
from nbdebug.core.data._inputs import ImageBatch, Modality, TableBatch, TextBatch, read_batch
from nbdebug.core.data._report import BatchReport, ChannelStats, SplitOverlap, TokenRow, batch_finding
from nbdebug.errors import InvalidArgumentError

__all__ = ["inspect_batch", "compare_splits", "batch_findings", "BatchReport", "TokenRow", "ChannelStats", "SplitOverlap", "Modality"]


def _columns(batch: Any) -> list[str]:
    """The column names a Hugging Face Trainer would see in ``batch`` (a dataset, a dict, a DataFrame)."""
    names = getattr(batch, "column_names", None)
    if isinstance(names, (list, tuple)):
        return [str(c) for c in names]
    if type(batch).__name__ == "DataFrame":
        return [str(c) for c in batch.columns]
    if hasattr(batch, "keys") and not hasattr(batch, "shape"):
        return [str(k) for k in batch.keys()]
    if isinstance(batch, (list, tuple)) and batch and hasattr(batch[0], "keys"):
        return [str(k) for k in batch[0].keys()]
    return []


def _column_checks(columns: list[str], model: Any, holds_text: set[str]) -> list[Finding]:
    """Columns ``Trainer(remove_unused_columns=True)`` drops: those ``model.forward`` does not name."""
    from nbdebug.core.knowledge.batch import TRAINER_KEEPS

    try:
        params = list(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError, AttributeError):
        return []
    dropped = [c for c in columns if c not in params and c not in TRAINER_KEEPS]
    if not dropped:
        return []
    kept = [c for c in columns if c in params and c not in TRAINER_KEEPS]
    shown = ", ".join(params[:8]) + (", ..." if len(params) > 8 else "")
    raw = [c for c in dropped if c in holds_text]
    what = f"; {', '.join(raw)} hold(s) raw text that was never tokenized" if raw else ""
    if not kept:
        msg = (f"none of the columns ({', '.join(columns)}) is an argument of {type(model).__name__}.forward("
               f"{shown}): the Trainer drops them all{what}")
    else:
        msg = (f"the Trainer drops {', '.join(dropped)}: not an argument of {type(model).__name__}.forward({shown})"
               f"{what}")
    return [batch_finding("columns_dropped", msg, tuple(dropped), evidence={"dropped": dropped, "forward": params},
                          severity="error" if not kept else ("warning" if raw else "info"))]


def _text_columns(batch: Any, columns: list[str]) -> set[str]:
    out = set()
    for c in columns:
        try:
            v = batch[c] if not isinstance(batch, (list, tuple)) else [r[c] for r in batch[:2]]
            first = v[0] if hasattr(v, "__getitem__") and not isinstance(v, str) else v
        except Exception:
            continue
        if isinstance(first, str):
            out.add(c)
    return out


def inspect_batch(batch: Any, *, tokenizer: Any = None, model: Any = None, mean: Sequence[float] | None = None,
                  std: Sequence[float] | None = None, label: str | None = None, max_length: int | None = None,
                  response_template: str | None = None, other: Any = None, modality: Modality | str = "auto",
                  batches: int = 4, show: int = 4) -> BatchReport:
    """Look at a batch before it reaches the model, and name the silent data bugs in it, each with its fix.

    Parameters
    ----------
    batch
        A tensor or numpy array, a dict of tensors (a Hugging Face ``BatchEncoding``), an ``(x, y)`` tuple, a list
        of dicts, a pandas DataFrame, a dataset with ``column_names`` (its first 256 rows), or a DataLoader (its
        first ``batches`` batches).
    tokenizer
        The Hugging Face tokenizer of the text: rows are decoded with special tokens visible; pad, BOS and EOS
        ids, the vocabulary size and chat-template markers come from it.
    model
        The model the batch is for: its embedding size bounds the token ids, a Hugging Face causal LM shifts
        labels itself, and its ``forward`` signature says which columns a ``Trainer`` drops.
    mean, std
        The normalization applied to the images (per channel, RGB order): the grid is de-normalized with them,
        and BGR input is recognised against them.
    label
        The label column of a table (default: a column named label, target, y or labels).
    max_length
        The tokenizer's ``max_length``: full rows of this length without EOS were cut.
    response_template
        The text that opens the answer of a chat row (default: the markers of common chat templates).
    other
        Another split (validation): its rows found in ``batch``, exactly or nearly, are reported.
    modality
        ``"auto"``, ``"text"``, ``"image"`` or ``"table"``, for arrays that could be either.
    batches, show
        DataLoader batches to look at; text rows to decode in the report.

    Returns
    -------
    BatchReport
        The findings (worst first, each with the fix as code), headline numbers, decoded rows, per-channel or
        per-column statistics, the label histogram and (images) a de-normalized grid: ``.plot()``.
    """
    mode = Modality.parse(modality)
    if batches < 1 or show < 0:
        raise InvalidArgumentError(f"batches={batches}, show={show}; expected batches >= 1 and show >= 0")
    read, source = read_batch(batch, modality=mode, label=label, batches=batches, tokenizer=tokenizer)
    findings: list[Finding] = []
    fields: dict[str, Any] = {}
    if isinstance(read, TextBatch):
        from nbdebug.core.data._text import text_checks, token_rows

        findings, stats = text_checks(read, tokenizer, model, max_length=max_length,
                                      response_template=response_template)
        fields = {"modality": "text", "shape": tuple(read.ids.shape), "token_rows": token_rows(read, tokenizer,
                                                                                               rows=show)}
    elif isinstance(read, ImageBatch):
        from nbdebug.core.data._images import grid_of, image_checks
        from nbdebug.core.data._labels import label_counts

        findings, stats, channels = image_checks(read, mean=mean, std=std)
        grid = grid_of(read, mean=mean, std=std)
        labels = () if read.labels is None else tuple(str(v) for v in read.labels[: len(grid)].tolist())
        fields = {"modality": "image", "shape": tuple(read.x.shape), "channels": channels, "grid": grid,
                  "grid_labels": labels, "label_counts": label_counts(read.labels)}
    else:
        from nbdebug.core.data._labels import label_counts
        from nbdebug.core.data._tables import table_checks

        findings, stats, channels = table_checks(read)
        fields = {"modality": "table", "shape": tuple(read.x.shape), "channels": channels,
                  "label_counts": label_counts(read.labels)}
    if model is not None and hasattr(model, "config"):  # a Hugging Face model: what its Trainer would drop
        cols = _columns(batch)
        if cols:
            findings += _column_checks(cols, model, _text_columns(batch, cols))
    if other is not None:
        from nbdebug.core.data._splits import overlap

        val, _ = read_batch(other, modality=mode, label=label, batches=batches, tokenizer=tokenizer)
        fields["overlap"], more = overlap(read, val, tokenizer)
        findings += more
    rows = len(read.ids) if isinstance(read, TextBatch) else len(read.x)
    return BatchReport(source=source, rows=rows, findings=tuple(findings), stats=tuple(stats), **fields)


def compare_splits(train: Any, val: Any, *, tokenizer: Any = None, label: str | None = None,
                   modality: Modality | str = "auto", max_rows: int = 1_000_000) -> BatchReport:
    """Validation rows that also appear in training, exactly or nearly (normalized), found by 64-bit hashes.

    ``train`` and ``val`` are anything ``inspect_batch`` takes; DataLoaders are read up to ``max_rows`` rows.
    Memory grows by eight bytes per row, not by the rows.  Returns a ``BatchReport`` whose ``overlap`` holds the
    counts and whose findings are ``split_overlap`` (exact copies) and ``split_near_duplicates``.
    """
    mode = Modality.parse(modality)
    if max_rows < 1:
        raise InvalidArgumentError(f"max_rows={max_rows}; expected >= 1")
    from nbdebug.core.data._splits import overlap

    def read(split: Any) -> tuple[TextBatch | ImageBatch | TableBatch, str]:
        size = getattr(split, "batch_size", None) or 1
        return read_batch(split, modality=mode, label=label, batches=max(1, max_rows // size), tokenizer=tokenizer)

    a, source = read(train)
    b, _ = read(val)
    result, findings = overlap(a, b, tokenizer)
    kind = "text" if isinstance(a, TextBatch) else "image" if isinstance(a, ImageBatch) else "table"
    shape = tuple(a.ids.shape) if isinstance(a, TextBatch) else tuple(a.x.shape)
    assert isinstance(a, (TextBatch, ImageBatch, TableBatch))
    return BatchReport(modality=kind, source=f"{source} against the other split", rows=result.val_rows, shape=shape,
                       findings=tuple(findings), overlap=result,
                       stats=(("training rows", result.train_rows), ("validation rows", result.val_rows),
                              ("exact copies", result.exact), ("near copies", result.near)))


def batch_findings(batch: Any, *, model: Any = None, tokenizer: Any = None) -> tuple[Finding, ...]:
    """The problems ``inspect_batch`` finds in ``batch`` (errors and warnings only, worst first), for another
    check's report (the training doctor's data section).

    A batch in a form the inspector does not read gives no finding, never an error: the caller's own check goes
    on.  Everything else (a failing tokenizer, a bug here) propagates.
    """
    try:
        report = inspect_batch(batch, model=model, tokenizer=tokenizer)
    except InvalidArgumentError:
        return ()
    return tuple(f for f in report.findings if f.severity != "info")
