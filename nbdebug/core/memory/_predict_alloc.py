"""PyTorch's CUDA caching allocator, modelled: what a sequence of tensor allocations costs on a GPU.

The rules are those of ``c10/cuda/CUDACachingAllocator.cpp`` with the default settings (no
``roundup_power2_divisions``, no ``max_split_size``, no expandable segments):

- a request is rounded up to a multiple of 512 bytes (at least 512): that is the block's size, and what
  ``torch.cuda.memory_allocated`` counts;
- requests of at most 1 MiB come from the small pool, whose segments are 2 MiB; larger ones from the large pool,
  whose segments are 20 MiB for requests under 10 MiB and the request rounded up to 2 MiB otherwise;
- a free block of the same pool is reused best-fit (the smallest that holds the request); the rest is split off
  when at least 512 bytes (small pool) or more than 1 MiB (large pool) remain; freed neighbours merge;
- segments are kept (reserved) until ``empty_cache``: the reserved peak is what the GPU must hold.

``tests/test_predict_alloc.py`` checks the rounding and the segment sizes against every block of the real
snapshots.  The CUDA context (the driver's own memory for the context and the loaded kernels) is not allocated
through this allocator; it is a documented estimate (``CUDA_CONTEXT_BYTES``) that the caller can replace.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["MIN_BLOCK", "SMALL_SIZE", "SMALL_SEGMENT", "LARGE_SEGMENT", "MIN_LARGE_ALLOC", "ROUND_LARGE",
           "CUDA_CONTEXT_BYTES", "round_size", "segment_size", "pool_of", "AllocatorPeak", "simulate"]

MIN_BLOCK = 512  # kMinBlockSize
SMALL_SIZE = 1 << 20  # kSmallSize: requests up to 1 MiB use the small pool
SMALL_SEGMENT = 2 << 20  # kSmallBuffer
LARGE_SEGMENT = 20 << 20  # kLargeBuffer
MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc
ROUND_LARGE = 2 << 20  # kRoundLarge

#: An estimate, not a measurement: the CUDA context with PyTorch's kernels loaded lazily
#: (CUDA_MODULE_LOADING=LAZY, the default since CUDA 11.7) typically takes 300-600 MiB per GPU outside the caching
#: allocator (more with cuDNN / NCCL loaded).  Replace it with your own figure: ``context_bytes=``.
CUDA_CONTEXT_BYTES = 512 << 20


def round_size(nbytes: int) -> int:
    """The block size the allocator gives a request of ``nbytes`` (``round_size`` in the allocator)."""
    if nbytes < MIN_BLOCK:
        return MIN_BLOCK
    return MIN_BLOCK * ((nbytes + MIN_BLOCK - 1) // MIN_BLOCK)


def pool_of(block_size: int) -> str:
    """``"small"`` or ``"large"``: the pool a rounded request comes from."""
    return "small" if block_size <= SMALL_SIZE else "large"


def segment_size(block_size: int) -> int:
    """The size of the segment (one cudaMalloc) made for a rounded request no cached block holds."""
    if block_size <= SMALL_SIZE:
        return SMALL_SEGMENT
    if block_size < MIN_LARGE_ALLOC:
        return LARGE_SEGMENT
    return ROUND_LARGE * ((block_size + ROUND_LARGE - 1) // ROUND_LARGE)


@dataclass(frozen=True)
class AllocatorPeak:
    """What the allocator model says about a sequence of allocations."""

    allocated_peak: int  # the largest sum of block sizes (torch.cuda.max_memory_allocated)
    reserved_peak: int  # the largest sum of segment sizes (torch.cuda.max_memory_reserved)
    segments: int  # segments made


class _Pool:
    """Free blocks of one pool, sorted by (size, segment, offset) for best fit."""

    def __init__(self) -> None:
        self.free: list[tuple[int, int, int]] = []

    def take(self, size: int) -> tuple[int, int, int] | None:
        i = bisect.bisect_left(self.free, (size, -1, -1))
        if i == len(self.free):
            return None
        return self.free.pop(i)

    def add(self, block: tuple[int, int, int]) -> None:
        bisect.insort(self.free, block)

    def remove(self, block: tuple[int, int, int]) -> None:
        i = bisect.bisect_left(self.free, block)
        del self.free[i]


def simulate(events: Iterable[tuple[int, int]]) -> AllocatorPeak:
    """Run ``(key, +nbytes)`` allocations and ``(key, -nbytes)`` frees through the allocator model."""
    pools = {"small": _Pool(), "large": _Pool()}
    # free blocks by position, to merge neighbours: (segment, offset) -> size, and (segment, end) -> offset
    free_at: dict[tuple[int, int], int] = {}
    free_end: dict[tuple[int, int], int] = {}
    seg_pool: list[str] = []
    live: dict[int, tuple[int, int, int]] = {}  # key -> (segment, offset, size)
    allocated = reserved = peak_alloc = peak_res = 0

    def release(pool: _Pool, seg: int, off: int, size: int) -> None:
        nxt = free_at.pop((seg, off + size), None)
        if nxt is not None:
            pool.remove((nxt, seg, off + size))
            del free_end[(seg, off + size + nxt)]
            size += nxt
        prev = free_end.pop((seg, off), None)
        if prev is not None:
            psize = free_at.pop((seg, prev))
            pool.remove((psize, seg, prev))
            off, size = prev, size + psize
        free_at[(seg, off)] = size
        free_end[(seg, off + size)] = off
        pool.add((size, seg, off))

    for key, delta in events:
        if delta > 0:
            size = round_size(delta)
            name = pool_of(size)
            pool = pools[name]
            block = pool.take(size)
            if block is None:
                seg_bytes = segment_size(size)
                seg = len(seg_pool)
                seg_pool.append(name)
                reserved += seg_bytes
                peak_res = max(peak_res, reserved)
                block = (seg_bytes, seg, 0)
            else:
                del free_at[(block[1], block[2])]
                del free_end[(block[1], block[2] + block[0])]
            bsize, seg, off = block
            rest = bsize - size
            if (name == "small" and rest >= MIN_BLOCK) or (name == "large" and rest > SMALL_SIZE):
                free_at[(seg, off + size)] = rest
                free_end[(seg, off + bsize)] = off + size
                pool.add((rest, seg, off + size))
                bsize = size
            live[key] = (seg, off, bsize)
            allocated += bsize
            peak_alloc = max(peak_alloc, allocated)
        elif delta < 0:
            placed = live.pop(key, None)
            if placed is None:
                continue
            seg, off, bsize = placed
            allocated -= bsize
            release(pools[seg_pool[seg]], seg, off, bsize)
    return AllocatorPeak(allocated_peak=peak_alloc, reserved_peak=peak_res, segments=len(seg_pool))
