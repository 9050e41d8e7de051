"""Checks of an image batch: per-channel statistics, raw 0-255 input, pixels scaled twice, BGR against RGB
(only with the normalization's mean, and only on strong evidence), blank and identical images, labels; and the
de-normalized pictures of the grid."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nbdebug.core._findings import Finding
from nbdebug.core.data._inputs import ImageBatch
from nbdebug.core.data._labels import label_checks, row_keys
from nbdebug.core.data._report import ChannelStats, batch_finding, limit
from nbdebug.errors import InvalidArgumentError

__all__ = ["image_checks", "grid_of"]

_NAMES = {1: ("gray",), 3: ("R", "G", "B"), 4: ("R", "G", "B", "A")}


def _per_channel(values: Sequence[float] | None, channels: int, name: str) -> np.ndarray | None:
    if values is None:
        return None
    a = np.asarray(values, dtype=np.float64).reshape(-1)
    if len(a) == 1:
        a = np.repeat(a, channels)
    if len(a) != channels:
        raise InvalidArgumentError(f"{name}={list(a)} has {len(a)} values; the images have {channels} channel(s)")
    return a


def _raw(ib: ImageBatch, mean: np.ndarray | None, std: np.ndarray | None) -> np.ndarray:
    """The images before normalization (x * std + mean, per channel), as far as the given numbers say."""
    x = ib.x
    if std is not None:
        x = x * std[None, :, None, None]
    if mean is not None:
        x = x + mean[None, :, None, None]
    return x


def image_checks(ib: ImageBatch, *, mean: Sequence[float] | None = None, std: Sequence[float] | None = None
                 ) -> tuple[list[Finding], list[tuple[str, Any]], tuple[ChannelStats, ...]]:
    """The findings of an image batch, its headline numbers and per-channel statistics (of what the model sees)."""
    n, c = ib.x.shape[:2]
    m = _per_channel(mean, c, "mean")
    s = _per_channel(std, c, "std")
    flat = ib.x.transpose(1, 0, 2, 3).reshape(c, -1)
    names = _NAMES.get(c, tuple(f"c{i}" for i in range(c)))
    channels = tuple(ChannelStats(names[i], float(flat[i].mean()), float(flat[i].std()), float(flat[i].min()),
                                  float(flat[i].max())) for i in range(c))
    stats: list[tuple[str, Any]] = [("images", f"{n} x {c} x {ib.x.shape[2]} x {ib.x.shape[3]} ({ib.dtype})"),
                                    ("value range", f"{flat.min():.4g} .. {flat.max():.4g}")]
    found: list[Finding] = []
    hi, lo = float(flat.max()), float(flat.min())
    if ib.dtype in ("uint8", "torch.uint8") or hi > limit("batch_raw_pixel_max"):
        found.append(batch_finding("raw_pixels", f"pixel values run {lo:.4g} .. {hi:.4g} ({ib.dtype}): the images "
                                   "were never scaled to [0, 1] (or normalized after scaling)",
                                   evidence={"min": lo, "max": hi}))
    elif lo >= 0 and 0 < hi < limit("batch_twice_scaled_max"):
        found.append(batch_finding("pixels_scaled_twice", f"every pixel is in 0 .. {hi:.3g}: divided by 255 twice",
                                   evidence={"max": hi}))
    if c == 3 and m is not None and n >= 8:
        found += _channel_order(_raw(ib, m, s), m)
    per_image = ib.x.reshape(n, -1)
    blank = per_image.max(1) == per_image.min(1)
    if blank.any():
        found.append(batch_finding("blank_images", f"{int(blank.sum())} of {n} images have a single value everywhere "
                                   f"({per_image[blank][0, 0]:.4g})", tuple(f"image {i}" for i in
                                                                            np.flatnonzero(blank)[:8]),
                                   evidence={"images": int(blank.sum())}))
    found += label_checks(ib.labels, row_keys(ib.x), what="image", skip=blank)
    if ib.labels_note:
        stats.append(("labels", ib.labels_note))
    return found, stats, channels


def _channel_order(raw: np.ndarray, mean: np.ndarray) -> list[Finding]:
    means = raw.mean(axis=(0, 2, 3))
    scale = 255.0 if means.max() > 2 and mean.max() <= 1 else 1.0
    got = means / scale
    gap = limit("batch_bgr_min_gap")
    d_got, d_given = got[0] - got[2], mean[0] - mean[2]
    straight = float(np.abs(got - mean).sum())
    swapped = float(np.abs(got[::-1] - mean).sum())
    if abs(d_got) >= gap and abs(d_given) >= gap and d_got * d_given < 0 and swapped < 0.5 * straight:
        return [batch_finding("channel_order", f"channel means {np.round(got, 3).tolist()} match the given mean "
                              f"{np.round(mean, 3).tolist()} reversed (distance {swapped:.3f}) far better than as "
                              f"given ({straight:.3f}): the images look BGR", evidence={
                                  "batch_means": np.round(got, 4).tolist(), "given_mean": mean.tolist()})]
    return []


def grid_of(ib: ImageBatch, *, mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
            count: int = 16) -> np.ndarray:
    """Up to ``count`` images, de-normalized, as ``(k, H, W, C)`` uint8 for a picture."""
    c = ib.x.shape[1]
    raw = _raw(ImageBatch(ib.x[:count], ib.dtype), _per_channel(mean, c, "mean"),
               _per_channel(std, c, "std"))
    lo, hi = float(raw.min()), float(raw.max())
    if lo >= -0.01 and hi <= 1.01:
        img = raw * 255.0
    elif lo >= 0 and 20 < hi <= 255:
        img = raw
    else:  # no known scale: stretch the batch's range
        img = (raw - lo) / (hi - lo or 1.0) * 255.0
    img = np.clip(np.round(img), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(img[:, :3].transpose(0, 2, 3, 1))
