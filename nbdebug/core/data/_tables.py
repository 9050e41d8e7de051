"""Checks of a feature table: per-feature scale, constant and NaN columns, a feature that gives the label away
(equal to it, a function of it, a monotone map of a numeric target, or one threshold separating every class on
enough rows), duplicates, conflicts and class balance."""

from __future__ import annotations

from typing import Any

import numpy as np

from nbdebug.core._findings import Finding
from nbdebug.core.data._inputs import TableBatch
from nbdebug.core.data._labels import is_classes, label_checks, row_keys
from nbdebug.core.data._report import ChannelStats, batch_finding, limit

__all__ = ["table_checks"]


def _stats(x: np.ndarray, names: tuple[str, ...]) -> tuple[ChannelStats, ...]:
    finite = np.where(np.isfinite(x), x, np.nan)
    bad = (~np.isfinite(x)).sum(0)
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
            mean, std = np.nanmean(finite, 0), np.nanstd(finite, 0)
            lo, hi = np.nanmin(finite, 0), np.nanmax(finite, 0)
    return tuple(ChannelStats(n, float(mean[i]), float(std[i]), float(lo[i]), float(hi[i]), int(bad[i]))
                 for i, n in enumerate(names))


def table_checks(tb: TableBatch) -> tuple[list[Finding], list[tuple[str, Any]], tuple[ChannelStats, ...]]:
    """The findings of a feature table, its headline numbers and per-column statistics."""
    x, names = tb.x, tb.names
    n, f = x.shape
    cols = _stats(x, names)
    stats: list[tuple[str, Any]] = [("rows x features", f"{n} x {f}")]
    if tb.label_name:
        stats.append(("label column", tb.label_name))
    if tb.columns:
        stats.append(("non-numeric columns (left out)", ", ".join(f"{k} ({v})" for k, v in tb.columns.items())))
    found: list[Finding] = []
    nan_cols = [c for c in cols if c.nan]
    if nan_cols:
        found.append(batch_finding("nan_values", f"{sum(c.nan for c in nan_cols)} NaN/Inf value(s) in "
                                   f"{len(nan_cols)} column(s)", tuple(f"{c.name} ({c.nan})" for c in nan_cols[:8]),
                                   evidence={"values": sum(c.nan for c in nan_cols)}))
    if tb.labels is not None and tb.labels.dtype.kind in "fc" and not np.all(np.isfinite(tb.labels)):
        found.append(batch_finding("nan_values", f"{int((~np.isfinite(tb.labels)).sum())} NaN/Inf label(s)",
                                   (tb.label_name or "label",)))
    constant = [c for c in cols if c.std == 0 and c.nan < n]
    if constant and n >= limit("batch_leak_min_rows"):
        # in a mini-batch a rare one-hot column is constant by chance: a remark there, a warning on a dataset
        found.append(batch_finding("constant_columns", f"{len(constant)} of {f} columns hold one value in all {n} rows",
                                   tuple(f"{c.name} = {c.mean:.4g}" for c in constant[:8]),
                                   evidence={"columns": len(constant)},
                                   severity=None if n >= limit("batch_constant_rows") else "info"))
    spread = [c for c in cols if c.std > 0 and np.isfinite(c.std)]
    if len(spread) >= 2:
        big, small = max(spread, key=lambda c: c.std), min(spread, key=lambda c: c.std)
        if big.std >= limit("batch_scale_ratio") * small.std:
            found.append(batch_finding("unscaled_features", f"standard deviations run from {small.std:.3g} "
                                       f"({small.name}) to {big.std:.3g} ({big.name}), {big.std / small.std:.3g}x "
                                       "apart", (big.name, small.name),
                                       evidence={"ratio": float(f"{big.std / small.std:.3g}")}))
    if tb.labels is not None and n >= limit("batch_leak_min_rows"):
        found += _leaks(x, names, tb.labels)
    # no numeric feature: nothing to compare rows by, only the classes
    found += label_checks(tb.labels, row_keys(x), skip=None if f else np.ones(n, bool))
    if tb.labels is not None and n:
        stats.append(("label", f"{len(np.unique(tb.labels.astype(str)))} distinct value(s)"))
    if tb.labels_note:
        stats.append(("labels", tb.labels_note))
    return found, stats, cols


def _ranks(a: np.ndarray) -> np.ndarray:
    order = np.argsort(a, kind="stable")
    r = np.empty(len(a))
    r[order] = np.arange(len(a))
    # ties share their mean rank
    _, inv, counts = np.unique(a, return_inverse=True, return_counts=True)
    sums = np.bincount(inv, weights=r)
    return (sums / counts)[inv]


def _leaks(x: np.ndarray, names: tuple[str, ...], labels: np.ndarray) -> list[Finding]:
    classes = is_classes(labels)
    y = labels.astype(str) if labels.dtype.kind in "OUSb" else labels
    out = []
    codes = np.unique(y, return_inverse=True)[1] if classes else None
    for j, name in enumerate(names):
        col = x[:, j]
        ok = np.isfinite(col)
        if ok.sum() < limit("batch_leak_min_rows") or np.all(col[ok] == col[ok][0]):
            continue
        why = ""
        if classes:
            assert codes is not None
            c, v = codes[ok], col[ok]
            k = int(c.max()) + 1
            lo = np.full(k, np.inf)
            hi = np.full(k, -np.inf)
            np.minimum.at(lo, c, v)
            np.maximum.at(hi, c, v)
            if labels.dtype.kind in "iuf" and np.array_equal(v, labels[ok].astype(np.float64)):
                why = "equals the label"
            elif np.all(lo == hi):
                why = "takes one value per class (a function of the label)"
            elif ok.sum() >= limit("batch_separation_min_rows") and k > 1:
                order = np.argsort(lo)
                if np.all(hi[order][:-1] < lo[order][1:]):
                    why = f"separates all {k} classes with thresholds (no overlap on {int(ok.sum())} rows)"
        else:
            target = labels.astype(np.float64)[ok]
            if np.all(np.isfinite(target)) and np.std(target) > 0:
                rho = float(np.corrcoef(_ranks(col[ok]), _ranks(target))[0, 1])
                if abs(rho) >= 0.9999:
                    why = "equals the target" if np.allclose(col[ok], target) else \
                        f"is a monotone function of the target (rank correlation {rho:.4f})"
        if why:
            out.append(batch_finding("feature_is_label", f"feature {name} {why}: the model can read the answer",
                                     (name,), evidence={"feature": name}))
    return out
