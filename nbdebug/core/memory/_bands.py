"""Stacked timeline data: allocated bytes per top site (+ "other"), downsampled to an envelope that stays exact.

A trace of a million events is cut into ``buckets`` time slices; each slice is represented by its event of highest
allocated memory (so no peak is ever smoothed away), with the exact bytes per band at that event, plus the lowest
total in the slice (the envelope's floor).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nbdebug.core.memory._model import ALLOC, FREE_COMPLETED

__all__ = ["Bands", "compute_bands", "event_sites", "peaks_per_slice"]


@dataclass(frozen=True)
class Bands:
    """Downsampled stacked series; ``values[k]`` is band ``k`` (top sites first, then "other")."""

    device: int
    x_unit: str
    x: np.ndarray  # x of each point (time_us or event index)
    index: np.ndarray  # local event index of each point (-1: before the first event)
    total: np.ndarray  # exact allocated bytes at that event
    floor: np.ndarray  # lowest allocated bytes within the slice
    names: tuple[str, ...]
    site_ids: tuple[int, ...]
    values: np.ndarray  # (bands, points)


def peaks_per_slice(x: np.ndarray, total: np.ndarray, slices: int) -> tuple[np.ndarray, np.ndarray]:
    """Split ``x`` (non-decreasing) into ``slices`` equal spans: the index of each span's highest ``total`` (in
    order) and each span's lowest ``total``, so a chart of the points keeps every peak and can shade every dip."""
    span = max(float(x[-1] - x[0]), 1e-9)
    bucket = np.minimum(((x - x[0]) / span * slices).astype(np.int64), slices - 1)
    order = np.lexsort((total, bucket))
    last = np.flatnonzero(np.r_[bucket[order][1:] != bucket[order][:-1], True])
    starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    return np.sort(order[last]), np.minimum.reduceat(total, starts)


def event_sites(snap: object, device: int) -> tuple[np.ndarray, np.ndarray]:
    """Per event, the site that owns its bytes (an alloc's site; a free takes them off its alloc's site), and the
    bytes each site holds before the first event (memory alive before the trace), as (owner, initial_by_site)."""
    m = snap.model  # type: ignore[attr-defined]
    st = snap.state(device)  # type: ignore[attr-defined]
    lo = st.lo
    n_sites = len(m.sites) + 2  # two more slots: no stack, allocated before the trace (freed during it)
    nostack, before = n_sites - 2, n_sites - 1

    def site_of(stacks: np.ndarray) -> np.ndarray:
        if not m.stack_site.size:
            return np.full(stacks.size, nostack, dtype=np.int64)
        return np.where(stacks >= 0, m.stack_site[np.maximum(stacks, 0)], nostack).astype(np.int64)

    own = site_of(m.stack[lo:lo + st.n])
    owner = np.where(st.alloc_of >= 0, own[np.maximum(st.alloc_of, 0)], own)
    act = m.action[lo:lo + st.n]
    owner[st.before_frees] = before
    owner = np.where((act == ALLOC) | (act == FREE_COMPLETED), owner, nostack)
    initial = np.zeros(n_sites, dtype=np.int64)
    initial[before] = int(m.size[lo + st.before_frees].sum())
    np.add.at(initial, site_of(m.block_stack[st.before_blocks]), m.block_size[st.before_blocks])
    return owner, initial


def compute_bands(snap: object, device: int | None = None, *, top: int = 8, buckets: int = 1200) -> Bands:
    """Top ``top`` sites (by bytes alive at the peak) as bands, the rest as "other", over ``buckets`` slices."""
    st = snap.state(device)  # type: ignore[attr-defined]
    owner, initial = event_sites(snap, st.device)
    m = snap.model  # type: ignore[attr-defined]
    n = st.n
    total = np.concatenate([[st.initial_allocated], st.allocated])
    x_all = np.concatenate([[st.x[0] if n else 0.0], st.x]) if st.x_is_time else np.arange(-1, n, dtype=np.float64)
    # choose the points: the max-total event of each slice
    if n + 1 <= buckets:
        pts = np.arange(n + 1)
        floor = total.copy()
    else:
        pts, floor = peaks_per_slice(x_all, total, buckets)
    # bands: the sites with most bytes alive at the peak
    p = int(np.argmax(total))
    ids = []
    if n:
        contrib = initial.copy()
        mask = np.arange(n) <= p - 1
        np.add.at(contrib, owner[mask], st.delta[mask])
        order_sites = [int(s) for s in np.argsort(-contrib, kind="stable") if contrib[s] > 0]
        ids = order_sites[:top]
    else:
        contrib = initial
        ids = [int(s) for s in np.argsort(-initial, kind="stable") if initial[s] > 0][:top]
    values = np.zeros((len(ids) + 1, pts.size), dtype=np.int64)
    for k, s in enumerate(ids):
        series = initial[s] + np.concatenate([[0], np.cumsum(np.where(owner == s, st.delta, 0))])
        values[k] = series[pts]
    values[-1] = total[pts] - values[:-1].sum(axis=0)
    from nbdebug.core.memory._sites import format_frame
    from nbdebug.core.memory._snapshot import BEFORE_TRACE

    names = tuple(format_frame(m.sites[s], cells=getattr(snap, "cells", None)) if s < len(m.sites) else
                  ("<no stack recorded>" if s == len(m.sites) else BEFORE_TRACE) for s in ids) + ("other",)
    return Bands(device=st.device, x_unit="us" if st.x_is_time else "event", x=x_all[pts], index=pts - 1,
                 total=total[pts], floor=floor, names=names, site_ids=tuple(ids), values=values)
