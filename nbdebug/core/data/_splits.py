"""Rows of one split found in another: exact copies and near copies, by 64-bit hashes (bounded memory: eight
bytes per training row, never the rows themselves).

Near copies are rows equal after normalizing: text without special tokens, lower-cased, whitespace collapsed;
images stretched to their own range, shrunk to 8 x 8 and quantized to 8 levels; table rows rounded to 4
significant digits per column.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from nbdebug.core._findings import Finding
from nbdebug.core.data._inputs import ImageBatch, TableBatch, TextBatch
from nbdebug.core.data._report import SplitOverlap, batch_finding
from nbdebug.core.data._text import content_mask, tokenizer_info

__all__ = ["row_hashes", "overlap"]


def _h(b: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(b, digest_size=8).digest(), "little")


def _text_keys(tb: TextBatch, tokenizer: Any) -> tuple[list[bytes], list[bytes]]:
    tok = tokenizer_info(tokenizer)
    content = content_mask(tb, tok)
    special = np.fromiter(tok.special, dtype=np.int64) if tok.special else np.zeros(0, np.int64)
    exact, words = [], []
    for i in range(len(tb.ids)):
        row = tb.ids[i][content[i]]
        exact.append(row.tobytes())
        words.append(row[~np.isin(row, special)])
    if tokenizer is not None:
        texts = tokenizer.batch_decode([w.tolist() for w in words], skip_special_tokens=True)
        near = [" ".join("".join(ch for ch in t.lower() if ch.isalnum() or ch.isspace()).split()).encode()
                for t in texts]
    else:
        near = [w.tobytes() for w in words]
    return exact, near


def _image_keys(ib: ImageBatch) -> tuple[list[bytes], list[bytes]]:
    n, c, h, w = ib.x.shape
    exact = [np.ascontiguousarray(r).tobytes() for r in ib.x]
    gray = ib.x.mean(1)  # (N, H, W)
    lo = gray.reshape(n, -1).min(1)[:, None, None]
    hi = gray.reshape(n, -1).max(1)[:, None, None]
    norm = (gray - lo) / np.where(hi > lo, hi - lo, 1.0)
    rows = np.linspace(0, h, 9).astype(int)
    cols = np.linspace(0, w, 9).astype(int)
    small = np.stack([np.stack([norm[:, rows[a]:max(rows[a + 1], rows[a] + 1), cols[b]:max(cols[b + 1], cols[b] + 1)]
                                .mean(axis=(1, 2)) for b in range(8)], 1) for a in range(8)], 1)
    q = np.minimum((small * 8).astype(np.uint8), 7)
    return exact, [r.tobytes() for r in q]


def _table_keys(tb: TableBatch) -> tuple[list[bytes], list[bytes]]:
    x = np.nan_to_num(tb.x, nan=np.inf)
    exact = [r.tobytes() for r in np.ascontiguousarray(x)]
    with np.errstate(all="ignore"):
        mag = np.floor(np.log10(np.nanmax(np.abs(np.where(np.isfinite(x), x, np.nan)), axis=0)))
    decimals = np.where(np.isfinite(mag), 3 - mag, 0).astype(int)
    rounded = np.stack([np.round(x[:, j], int(d)) for j, d in enumerate(decimals)], 1) if x.shape[1] else x
    return exact, [r.tobytes() for r in np.ascontiguousarray(rounded + 0.0)]


def row_hashes(batch: TextBatch | ImageBatch | TableBatch, tokenizer: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """(exact, near) 64-bit hashes, one per row."""
    if isinstance(batch, TextBatch):
        exact, near = _text_keys(batch, tokenizer)
    elif isinstance(batch, ImageBatch):
        exact, near = _image_keys(batch)
    else:
        exact, near = _table_keys(batch)
    return (np.fromiter((_h(b) for b in exact), dtype=np.uint64, count=len(exact)),
            np.fromiter((_h(b) for b in near), dtype=np.uint64, count=len(near)))


def overlap(train: TextBatch | ImageBatch | TableBatch, val: TextBatch | ImageBatch | TableBatch,
            tokenizer: Any = None) -> tuple[SplitOverlap, list[Finding]]:
    """How many validation rows the training split holds, exactly or nearly, and the findings."""
    if type(train) is not type(val):
        from nbdebug.errors import InvalidArgumentError

        raise InvalidArgumentError(f"the two splits hold different kinds of data ({type(train).__name__[:-5].lower()}"
                                   f" and {type(val).__name__[:-5].lower()}); expected the same kind")
    t_exact, t_near = row_hashes(train, tokenizer)
    v_exact, v_near = row_hashes(val, tokenizer)
    exact = np.isin(v_exact, t_exact)
    near = np.isin(v_near, t_near) & ~exact
    result = SplitOverlap(train_rows=len(t_exact), val_rows=len(v_exact), exact=int(exact.sum()),
                          near=int(near.sum()), examples=tuple(int(i) for i in np.flatnonzero(exact | near)[:8]))
    found = []
    if exact.any():
        found.append(batch_finding("split_overlap", f"{int(exact.sum())} of {len(v_exact)} validation rows "
                                   f"({exact.mean():.1%}) are exact copies of training rows: the validation score "
                                   "is inflated", tuple(f"val row {i}" for i in np.flatnonzero(exact)[:8]),
                                   evidence={"exact": int(exact.sum()), "val_rows": len(v_exact)}))
    if near.any():
        found.append(batch_finding("split_near_duplicates", f"{int(near.sum())} of {len(v_exact)} validation rows "
                                   "equal a training row after normalizing (case, spacing, rounding, resizing)",
                                   tuple(f"val row {i}" for i in np.flatnonzero(near)[:8]),
                                   evidence={"near": int(near.sum()), "val_rows": len(v_exact)}))
    return result, found
