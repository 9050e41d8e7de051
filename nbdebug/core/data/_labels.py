"""Checks shared by images and tables: the label histogram, one-class batches, imbalance, and inputs that repeat
(with the same label: a duplicate; with another: a conflict)."""

from __future__ import annotations

from typing import Any

import numpy as np

from nbdebug.core._findings import Finding, Severity
from nbdebug.core.data._report import batch_finding, limit

__all__ = ["is_classes", "label_counts", "label_checks", "row_keys"]


def is_classes(labels: np.ndarray | None) -> bool:
    """Labels that name classes (integers, strings or booleans; few distinct values), not regression targets."""
    if labels is None or labels.ndim != 1 or not len(labels):
        return False
    if labels.dtype.kind in "OUSb":
        return True
    if labels.dtype.kind == "f":
        finite = labels[np.isfinite(labels)]
        if not len(finite) or not np.all(finite == np.round(finite)):
            return False
    return len(np.unique(labels)) <= max(20, len(labels) // 2)


def label_counts(labels: np.ndarray | None) -> tuple[tuple[str, int], ...]:
    """Examples per class, in the order of the classes (empty for regression targets)."""
    if not is_classes(labels):
        return ()
    assert labels is not None
    values, counts = np.unique(labels.astype(str) if labels.dtype.kind == "O" else labels, return_counts=True)
    return tuple((_name(v), int(c)) for v, c in zip(values, counts))


def _name(v: Any) -> str:
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))
    return str(v)


def row_keys(x: np.ndarray) -> list[bytes]:
    """One exact key per row (its bytes, NaNs equal to each other)."""
    flat = np.ascontiguousarray(np.nan_to_num(x.reshape(len(x), -1), nan=np.inf))
    return [r.tobytes() for r in flat]


def label_checks(labels: np.ndarray | None, keys: list[bytes], *, what: str = "row",
                 skip: np.ndarray | None = None) -> list[Finding]:
    """Repeats and conflicts among rows (``keys``), and the class balance of ``labels``."""
    out: list[Finding] = []
    groups: dict[bytes, list[int]] = {}
    for i, k in enumerate(keys):
        if skip is None or not skip[i]:
            groups.setdefault(k, []).append(i)
    repeats = [g for g in groups.values() if len(g) > 1]
    conflicts = [g for g in repeats if labels is not None and len({_name(labels[i]) for i in g}) > 1]
    same = [g for g in repeats if g not in conflicts]
    if conflicts:
        shown = tuple(f"{what}s {', '.join(map(str, g[:4]))}: labels "
                      f"{', '.join(_name(labels[i]) for i in g[:4])}" for g in conflicts[:6])  # type: ignore[index]
        out.append(batch_finding("conflicting_labels", f"{len(conflicts)} {what}(s) appear with two or more different "
                                 "labels", shown, evidence={"groups": len(conflicts)}))
    if same:
        extra = sum(len(g) - 1 for g in same)
        kind = "identical_images" if what == "image" else "duplicate_rows"
        # a few exact repeats with the same label are common in low-precision tables (iris has one): a remark
        few = kind == "duplicate_rows" and extra <= limit("batch_duplicate_share") * len(keys)
        out.append(batch_finding(kind, f"{extra} {what}(s) repeat an earlier one in the batch of {len(keys)}",
                                 tuple(f"{what}s {', '.join(map(str, g[:6]))}" for g in same[:6]),
                                 evidence={"duplicates": extra}, severity=Severity.INFO if few else None))
    counts = label_counts(labels)
    if counts and len(keys) >= 8:
        if len(counts) == 1:
            out.append(batch_finding("single_class_batch", f"all {len(keys)} examples have the label {counts[0][0]}",
                                     evidence={"label": counts[0][0]}))
        else:
            hi = max(counts, key=lambda c: c[1])
            lo = min(counts, key=lambda c: c[1])
            if hi[1] >= limit("batch_imbalance_ratio") * lo[1]:
                out.append(batch_finding("class_imbalance", f"class {hi[0]} has {hi[1]} examples, class {lo[0]} "
                                         f"{lo[1]} ({hi[1] / lo[1]:.0f}x)", evidence={"ratio": round(hi[1] / lo[1], 1)}))
    return out
