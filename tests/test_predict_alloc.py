"""The CUDA caching-allocator model against the real snapshots: every block's size from its requested size, every
segment's size, and the segments a recorded trace made, replayed from its allocations and frees."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pytest

from nbdebug.core.memory._predict_alloc import (
    LARGE_SEGMENT,
    MIN_BLOCK,
    ROUND_LARGE,
    SMALL_SEGMENT,
    SMALL_SIZE,
    pool_of,
    round_size,
    segment_size,
    simulate,
)
from nbdebug.core.memory._unpickle import read_pickle

SNAPSHOTS = Path(__file__).resolve().parents[2] / "shared" / "data" / "snapshots"
FILES = sorted(SNAPSHOTS.rglob("*.pickle")) if SNAPSHOTS.is_dir() else []
needs_snapshots = pytest.mark.skipif(not FILES, reason=f"the real snapshots are not here ({SNAPSHOTS})")


def _segments(data: Any) -> list[dict[str, Any]]:
    return data["segments"] if isinstance(data, dict) else data


def _default_rounding(data: Any) -> bool:
    settings = data.get("allocator_settings", {}) if isinstance(data, dict) else {}
    return not any((settings.get("roundup_power2_divisions") or {}).values())


@pytest.mark.parametrize("nbytes, block", [(0, 512), (1, 512), (512, 512), (513, 1024), (1 << 20, 1 << 20),
                                           ((1 << 20) + 1, (1 << 20) + 512)])
def test_round_size(nbytes: int, block: int) -> None:
    assert round_size(nbytes) == block


@pytest.mark.parametrize("block, segment", [(512, SMALL_SEGMENT), (SMALL_SIZE, SMALL_SEGMENT),
                                            (SMALL_SIZE + 512, LARGE_SEGMENT), ((10 << 20) - 512, LARGE_SEGMENT),
                                            (10 << 20, 10 << 20), ((10 << 20) + 512, 12 << 20)])
def test_segment_size(block: int, segment: int) -> None:
    assert segment_size(block) == segment


def test_simulate_reuses_splits_and_merges() -> None:
    mib = 1 << 20
    # two 4 MiB tensors share one 20 MiB segment; freed, they merge and hold a 9 MiB one without a new segment
    peak = simulate([(1, 4 * mib), (2, 4 * mib), (1, -4 * mib), (2, -4 * mib), (3, 9 * mib), (3, -9 * mib),
                     (4, 100), (5, 600 * 1024)])
    assert peak.reserved_peak == LARGE_SEGMENT + SMALL_SEGMENT
    assert peak.segments == 2
    assert peak.allocated_peak == 9 * mib  # 9 MiB alone, above the 4 + 4 before it
    assert simulate([(1, 11 * mib)]).reserved_peak == 12 * mib


@needs_snapshots
@pytest.mark.parametrize("path", FILES, ids=[p.name[:40] for p in FILES])
def test_every_block_and_segment_of_the_real_snapshots(path: Path) -> None:
    data = read_pickle(path)
    assert _default_rounding(data), "roundup_power2_divisions is set: another rounding than the model's"
    counts: collections.Counter[str] = collections.Counter()
    for seg in _segments(data):
        for b in seg["blocks"]:
            req = b.get("requested_size")
            if b["state"] == "inactive" or req is None:
                continue
            r = round_size(req)
            # a block is the request rounded, or a bit more when the rest was too small to split off
            rest = b["size"] - r
            small = pool_of(r) == "small"
            assert rest == 0 or (0 < rest < MIN_BLOCK if small else 0 < rest <= SMALL_SIZE), (req, b["size"])
            counts["exact" if rest == 0 else "unsplit"] += 1
        if seg.get("is_expandable"):
            continue  # expandable segments grow by pages, not by these rules
        total = seg["total_size"]
        if seg["segment_type"] == "small":
            assert total == SMALL_SEGMENT
        else:
            assert total == LARGE_SEGMENT or (total >= 10 << 20 and total % ROUND_LARGE == 0), total
        counts["segments"] += 1
    assert counts["exact"] + counts["segments"] > 0


@needs_snapshots
def test_replayed_traces_make_the_recorded_segments() -> None:
    """Where a trace saw its segments made and none freed (one stream), replaying its allocations and frees through
    the model makes the same segments (a segment made before the trace may hold a few small blocks: at most that
    much is allowed to differ)."""
    replayed = []
    for path in FILES:
        data = read_pickle(path)
        if not isinstance(data, dict) or not _default_rounding(data):
            continue
        for device, trace in enumerate(data["device_traces"]):
            made = [e["size"] for e in trace if e["action"] == "segment_alloc"]
            final = sum(s["total_size"] for s in data["segments"] if s.get("device", 0) == device)
            actions = {e["action"] for e in trace}
            streams = {e.get("stream", 0) for e in trace}
            if not made or actions & {"segment_free", "segment_map", "oom"} or len(streams) > 1:
                continue
            before = final - sum(made)  # reserved before the trace began
            if before > sum(made) // 4:  # most of the memory predates the trace: nothing to replay
                continue
            events = [(e["addr"], e["size"] if e["action"] == "alloc" else -e["size"]) for e in trace
                      if e["action"] in ("alloc", "free_completed")]
            model = simulate(events)
            assert abs(model.reserved_peak - sum(made)) <= before, (path.name, model, sum(made), before)
            if before == 0:
                assert model.segments == len(made), path.name
            replayed.append(path.name)
    assert len(replayed) >= 3, replayed
