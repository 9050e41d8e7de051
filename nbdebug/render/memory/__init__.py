"""Text and HTML for the memory results (pure functions: result -> str)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nbdebug.core._findings import Finding
from nbdebug.core.memory._results import (
    Annotations,
    DiffRow,
    Fragmentation,
    MemoryPeak,
    MemoryTimeline,
    NeverFreed,
    SiteBytes,
    SnapshotDiff,
    SnapshotSummary,
    TopSites,
)
from nbdebug.core.memory._snapshot import MemorySnapshot
from nbdebug.core.memory._trace import MemTrace
from nbdebug.render._html import esc, fmt_bytes, kv_table, panel, picture, table
from nbdebug.render._registry import renders
from nbdebug.render.findings import findings_html, findings_text, panel_kind
from nbdebug.render.memory.plot import svg_diverging, svg_sparkline, svg_two_timelines

__all__ = [
    "summary_text", "summary_html", "snapshot_text", "timeline_text", "timeline_html", "peak_text", "peak_html",
    "sites_text", "sites_html", "fragmentation_text", "fragmentation_html", "never_freed_text", "never_freed_html",
    "diff_text", "diff_html", "annotations_text", "annotations_html", "memtrace_text", "memtrace_html",
    "sites_table_text", "sites_table_html", "sparkline",
]


def _when(time_us: float | None, index: int) -> str:
    if index < 0:
        return "before the first recorded event"
    if time_us is None:
        return f"event {index}"
    import datetime

    stamp = datetime.datetime.fromtimestamp(time_us / 1e6, tz=datetime.timezone.utc)
    return f"event {index} ({stamp:%Y-%m-%d %H:%M:%S.%f} UTC)"


def sites_table_text(sites: Sequence[SiteBytes], *, limit: int = 10, indent: str = "  ",
                     kinds: Mapping[str, str] | None = None) -> str:
    """Aligned ``bytes  count  site`` lines (with ``[kind]`` after a site that ``kinds`` names)."""
    kinds = kinds or {}
    lines = [f"{indent}{fmt_bytes(s.bytes):>11}  {s.count:>7}x  {s.site}"
             + (f"  [{kinds[s.site]}]" if kinds.get(s.site) else "") for s in list(sites)[:limit]]
    if len(sites) > limit:
        rest = sum(s.bytes for s in list(sites)[limit:])
        lines.append(f"{indent}{fmt_bytes(rest):>11}  {'':>8}  ({len(sites) - limit} more sites)")
    return "\n".join(lines) if lines else f"{indent}(none)"


def sites_table_html(sites: Sequence[SiteBytes], *, limit: int = 20, count: str = "blocks",
                     kinds: Mapping[str, str] | None = None) -> str:
    """An HTML table of ``site, bytes, count``; the sites past ``limit`` summed in one last row.

    With ``kinds`` (site -> what its memory is), a "kept as" column comes after the site.
    """
    shown = list(sites)
    rows: list[tuple[object, ...]] = [(s.site, fmt_bytes(s.bytes), s.count) for s in shown[:limit]]
    if len(shown) > limit:
        rest = shown[limit:]
        rows.append((f"({len(rest)} more sites)", fmt_bytes(sum(s.bytes for s in rest)), sum(s.count for s in rest)))
    if not rows:
        return '<div class="nbd-muted">(none)</div>'
    if kinds:
        return table(["site", "kept as", "bytes", count], [(r[0], kinds.get(str(r[0]), ""), *r[1:]) for r in rows],
                     numeric=(2, 3))
    return table(["site", "bytes", count], rows, numeric=(1, 2))


def sparkline(values: Sequence[float], width: int = 48) -> str:
    """A one-line block-character chart of ``values`` (max of each bucket)."""
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    if not v.size:
        return ""
    if v.size > width:  # the maximum of each of `width` buckets
        v = np.maximum.reduceat(v, np.arange(width, dtype=np.int64) * v.size // width)
    lo, hi = float(v.min()), float(v.max())
    blocks = " ▁▂▃▄▅▆▇█"
    if hi <= lo:
        return blocks[4] * v.size
    return "".join(map(blocks.__getitem__, (1 + ((v - lo) / (hi - lo) * 7.999).astype(np.int64)).tolist()))


@renders(SnapshotSummary, "text")
def summary_text(s: SnapshotSummary) -> str:
    """Plain-text summary of a ``SnapshotSummary``."""
    lines = [
        f"Memory snapshot {s.source}",
        f"  devices {list(s.devices)}; showing device {s.device}; {s.events} trace events; {s.segments} segments",
        f"  peak allocated   {fmt_bytes(s.peak_allocated_bytes)} at {_when(s.peak_time_us, s.peak_event_index)}",
        f"  final allocated  {fmt_bytes(s.final_allocated_bytes)}",
        f"  peak reserved    {fmt_bytes(s.peak_reserved_bytes)}",
    ]
    for o in s.ooms:
        free = fmt_bytes(o["device_free_bytes"]) if o["device_free_bytes"] is not None else "?"
        lines.append(f"  OOM on device {o['device']}: requested {fmt_bytes(o['requested_bytes'])}, CUDA had {free} free")
    lines.append("  top allocation sites:")
    lines.append(sites_table_text(s.top_sites, indent="    "))
    lines.extend(f"  note: {n}" for n in s.notes)
    return "\n".join(lines)


@renders(SnapshotSummary, "html")
def summary_html(s: SnapshotSummary) -> str:
    """HTML panel of a ``SnapshotSummary``."""
    facts = [("devices", ", ".join(map(str, s.devices))), ("device shown", s.device), ("trace events", s.events),
             ("peak allocated", f"{fmt_bytes(s.peak_allocated_bytes)} at {_when(s.peak_time_us, s.peak_event_index)}"),
             ("final allocated", fmt_bytes(s.final_allocated_bytes)),
             ("peak reserved", fmt_bytes(s.peak_reserved_bytes)), ("segments", s.segments)]
    for o in s.ooms:
        free = fmt_bytes(o["device_free_bytes"]) if o["device_free_bytes"] is not None else "?"
        facts.append((f"OOM on device {o['device']}", f"requested {fmt_bytes(o['requested_bytes'])}, CUDA had {free} "
                                                       "free"))
    body = kv_table(facts) + "<h4>Top allocation sites</h4>" + sites_table_html(s.top_sites, count="count")
    body += "".join(f'<div class="nbd-muted">note: {esc(n)}</div>' for n in s.notes)
    return panel(f"Memory snapshot {s.source}", body)


@renders(MemorySnapshot, "text")
def snapshot_text(snap: MemorySnapshot) -> str:
    """The terminal view of a ``MemorySnapshot``: summary, a sparkline timeline, fragmentation."""
    s = snap.summary()
    parts = [summary_text(s)]
    if snap.events:
        tl = snap.timeline(s.device)
        parts.append(f"  allocated over {'time' if tl.x_unit == 'us' else 'events'}: "
                     f"{sparkline(tl.allocated.tolist(), 60)}")
    fr = snap.fragmentation(s.device)
    for o in fr.ooms:
        verdict = ("the request is larger than any free block" if o.requested_bytes > o.largest_free_block
                   else "a free block could hold the request")
        parts.append(f"  at the OOM: largest free block {fmt_bytes(o.largest_free_block)} ({verdict}), reserved but "
                     f"free {fmt_bytes(o.cached_free_bytes)}, failing site {o.site}")
    parts.append(f"  reserved but free {fmt_bytes(fr.free_bytes)}; largest free block "
                 f"{fmt_bytes(fr.largest_free_block)} across {len(fr.segments)} segments")
    return "\n".join(parts)


@renders(MemoryTimeline, "text")
def timeline_text(t: MemoryTimeline) -> str:
    """Plain text of a ``MemoryTimeline``."""
    peak = int(t.allocated.max()) if t.allocated.size else 0
    return (f"Allocated memory on device {t.device} ({t.x.size} points, x in {t.x_unit}): peak {fmt_bytes(peak)}\n"
            f"  {sparkline(t.allocated.tolist(), 60)}")


@renders(MemoryTimeline, "html")
def timeline_html(t: MemoryTimeline) -> str:
    """HTML of a ``MemoryTimeline``: the peak, the final level and a small chart of allocated memory."""
    peak = int(t.allocated.max()) if t.allocated.size else 0
    final = int(t.allocated[-1]) if t.allocated.size else 0
    reserved = int(t.reserved.max()) if t.reserved.size else 0
    values = t.allocated.tolist()
    if len(values) > 400:  # the chart keeps each slice's highest point
        step = len(values) / 400
        values = [max(values[int(i * step):max(int((i + 1) * step), int(i * step) + 1)]) for i in range(400)]
    body = (kv_table([("points", t.x.size), ("x", "time (us)" if t.x_unit == "us" else "event index"),
                      ("peak allocated", fmt_bytes(peak)), ("final allocated", fmt_bytes(final)),
                      ("peak reserved", fmt_bytes(reserved))])
            + svg_sparkline(values, width=600, height=80))
    return panel(f"Allocated memory on device {t.device}: peak {fmt_bytes(peak)}", body)


@renders(MemoryPeak, "text")
def peak_text(p: MemoryPeak) -> str:
    """Plain text of a ``MemoryPeak`` (also used for ``alive_at``)."""
    lines = [f"{fmt_bytes(p.bytes)} allocated on device {p.device} at {_when(p.time_us, p.event_index)}",
             "  alive, by site:", sites_table_text(p.by_site, indent="    ")]
    if p.by_category:
        lines.append("  by category: " + ", ".join(f"{c} {fmt_bytes(b)}" for c, b in p.by_category))
    return "\n".join(lines)


@renders(MemoryPeak, "html")
def peak_html(p: MemoryPeak) -> str:
    """HTML of a ``MemoryPeak``."""
    body = sites_table_html(p.by_site)
    if p.blocks:
        rows: list[tuple[object, ...]] = [(fmt_bytes(b.bytes), b.site, b.since, " <- ".join(b.stack[:4]))
                                          for b in p.blocks[:20]]
        if len(p.blocks) > 20:
            rest = p.blocks[20:]
            rows.append((fmt_bytes(sum(b.bytes for b in rest)), f"+{len(rest)} more blocks", "", ""))
        body += "<h4>Largest live blocks</h4>" + table(["bytes", "site", "since", "stack"], rows, numeric=(0,))
    return panel(f"{fmt_bytes(p.bytes)} alive on device {p.device} at {_when(p.time_us, p.event_index)}", body)


@renders(TopSites, "text")
def sites_text(t: TopSites) -> str:
    """Plain text of ``TopSites``."""
    return f"Top allocation sites on device {t.device}:\n" + sites_table_text(t.sites, limit=len(t.sites))


@renders(TopSites, "html")
def sites_html(t: TopSites) -> str:
    """HTML of ``TopSites``."""
    return panel(f"Top allocation sites on device {t.device}",
                 sites_table_html(t.sites, limit=max(len(t.sites), 1), count="allocations"))


def unlisted_note(f: Fragmentation) -> str:
    """Why "largest free block" can be far below "reserved but free" ("" for a complete snapshot).

    A snapshot may list blocks for only part of its segments; a complete one's blocks tile every segment.
    """
    if not f.unlisted_bytes:
        return ""
    n = sum(1 for s in f.segments if s.unlisted_bytes)
    return (f"{fmt_bytes(f.unlisted_bytes)} of the reserved bytes ({f.unlisted_bytes / max(f.reserved_bytes, 1):.0%}, "
            f"in {n} of {len(f.segments)} segments) lie in no block the snapshot lists: they count as reserved but "
            "free, but how they are split into free blocks is not recorded, so the largest free block is that of "
            "the listed blocks only")


@renders(Fragmentation, "text")
def fragmentation_text(f: Fragmentation) -> str:
    """Plain text of ``Fragmentation``."""
    largest = "largest listed free block" if f.unlisted_bytes else "largest free block"
    lines = [f"Device {f.device}: reserved {fmt_bytes(f.reserved_bytes)}, allocated {fmt_bytes(f.allocated_bytes)}, "
             f"reserved but free {fmt_bytes(f.free_bytes)} (fragmentation {f.fragmentation:.0%})",
             f"  {largest} {fmt_bytes(f.largest_free_block)} in {len(f.segments)} segments"]
    if f.unlisted_bytes:
        lines.append("  " + unlisted_note(f))
    for o in f.ooms:
        lines.append(f"  OOM: requested {fmt_bytes(o.requested_bytes)} vs largest free block "
                     f"{fmt_bytes(o.largest_free_block)}; CUDA free {fmt_bytes(o.device_free_bytes)}")
    if f.findings:
        lines.append(findings_text(f.findings))
    return "\n".join(lines)


@renders(Fragmentation, "html")
def fragmentation_html(f: Fragmentation) -> str:
    """HTML of ``Fragmentation``."""
    body = kv_table([("reserved", fmt_bytes(f.reserved_bytes)), ("allocated", fmt_bytes(f.allocated_bytes)),
                     ("reserved but free", fmt_bytes(f.free_bytes)),
                     ("largest listed free block" if f.unlisted_bytes else "largest free block",
                      fmt_bytes(f.largest_free_block))])
    if f.unlisted_bytes:
        body += f'<div class="nbd-muted">{esc(unlisted_note(f))}</div>'
    body += "".join(f'<div class="nbd-first">OOM: requested {esc(fmt_bytes(o.requested_bytes))}, largest free block '
                    f"then {esc(fmt_bytes(o.largest_free_block))}, reserved but free "
                    f"{esc(fmt_bytes(o.cached_free_bytes))}, at {esc(o.site)}</div>" for o in f.ooms)
    if f.findings:
        body += findings_html(f.findings)
    seg_rows: list[tuple[object, ...]] = [
        (hex(s.address), fmt_bytes(s.total_bytes), fmt_bytes(s.allocated_bytes), fmt_bytes(s.free_bytes),
         fmt_bytes(s.largest_free_block), s.blocks) for s in f.segments[:50]]
    if len(f.segments) > 50:
        rest = f.segments[50:]
        seg_rows.append((f"+{len(rest)} more segments", fmt_bytes(sum(s.total_bytes for s in rest)),
                         fmt_bytes(sum(s.allocated_bytes for s in rest)), fmt_bytes(sum(s.free_bytes for s in rest)),
                         "", sum(s.blocks for s in rest)))
    body += table(["segment", "size", "allocated", "free", "largest free", "blocks"], seg_rows, numeric=(1, 2, 3, 4, 5))
    return panel(f"Fragmentation on device {f.device}", body, kind=panel_kind(f.findings, empty="info"))


@renders(NeverFreed, "text")
def never_freed_text(n: NeverFreed) -> str:
    """Plain text of ``NeverFreed``."""
    return (f"{n.count} allocations ({fmt_bytes(n.bytes)}) made between {n.start:g} and {n.end:g} {n.x_unit} "
            f"were never freed:\n" + sites_table_text(n.by_site))


@renders(NeverFreed, "html")
def never_freed_html(n: NeverFreed) -> str:
    """HTML of ``NeverFreed``."""
    body = (f'<div>{n.count} allocations made between {n.start:g} and {n.end:g} {esc(n.x_unit)} were still alive '
            "at the end of the trace, by site:</div>" + sites_table_html(n.by_site))
    return panel(f"Never freed on device {n.device}: {fmt_bytes(n.bytes)}", body,
                 kind="warning" if n.bytes else "ok")


@renders(SnapshotDiff, "text")
def diff_text(d: SnapshotDiff) -> str:
    """Plain text of ``SnapshotDiff``."""
    lines = [f"{d.before} -> {d.after}: {fmt_bytes(d.before_bytes)} -> {fmt_bytes(d.after_bytes)} alive"]
    for r in d.rows[:15]:
        lines.append(f"  {fmt_bytes(r.delta_bytes):>12}  {r.site}")
    if len(d.rows) > 15:
        rest = d.rows[15:]
        lines.append(f"  {fmt_bytes(sum(r.delta_bytes for r in rest)):>12}  (+{len(rest)} more sites)")
    return "\n".join(lines)


def _curve(snap: object, device: int | None, *, by_event: bool = False,
           points: int = 600) -> tuple[str, list[float], list[int], str]:
    """One snapshot's allocated bytes from its first event (seconds, or events), its highest point per slice."""
    import numpy as np

    st = snap.state(device)  # type: ignore[attr-defined]
    total = np.concatenate([[st.initial_allocated], st.allocated]).astype(np.int64)
    if st.x_is_time and st.n and not by_event:
        x = (np.concatenate([[st.x[0]], st.x]) - st.x[0]) / 1e6
        unit = "seconds"
    else:
        x = np.arange(total.size, dtype=np.float64)
        unit = "events"
    if total.size > points:
        edges = np.linspace(0, total.size, points + 1).astype(np.int64)
        pick = [int(a + np.argmax(total[a:b])) for a, b in zip(edges[:-1], edges[1:]) if b > a]
        x, total = x[pick], total[pick]
    return snap.source, x.tolist(), total.tolist(), unit  # type: ignore[attr-defined]


def _diff_rows(rows: Sequence[DiffRow]) -> list[tuple[object, ...]]:
    out: list[tuple[object, ...]] = [(r.site, fmt_bytes(r.before_bytes), fmt_bytes(r.after_bytes),
                                      ("+" if r.delta_bytes > 0 else "") + fmt_bytes(r.delta_bytes)) for r in rows[:30]]
    if len(rows) > 30:
        rest = rows[30:]
        change = sum(r.delta_bytes for r in rest)
        out.append((f"+{len(rest)} more sites", fmt_bytes(sum(r.before_bytes for r in rest)),
                    fmt_bytes(sum(r.after_bytes for r in rest)), ("+" if change > 0 else "") + fmt_bytes(change)))
    return out


@renders(SnapshotDiff, "html")
def diff_html(d: SnapshotDiff) -> str:
    """HTML of ``SnapshotDiff``: both timelines on one axis, what grew or shrank by site at the peak and at the end."""
    body = kv_table([("before", f"{d.before}: {fmt_bytes(d.before_bytes)} alive"),
                     ("after", f"{d.after}: {fmt_bytes(d.after_bytes)} alive")])
    peak_rows = d.peak_rows()
    if d._before is not None and d._after is not None:
        b, a = _curve(d._before, d._device), _curve(d._after, d._device)
        unit = a[3] if a[3] == b[3] else "events"
        if a[3] != b[3]:  # one has times, the other not: both by event
            b, a = _curve(d._before, d._device, by_event=True), _curve(d._after, d._device, by_event=True)
        body += "<h4>allocated over time, both from their first event</h4>"
        body += picture(svg_two_timelines(b[:3], a[:3], x_label=unit), "allocated memory of both snapshots")
    if peak_rows:
        body += "<h4>at the peak: what grew or shrank, by site</h4>"
        body += picture(svg_diverging([(r.site, r.delta_bytes) for r in peak_rows], title="change at the peak"),
                        "change at the peak by site")
        body += table(["site", "before", "after", "change"], _diff_rows(peak_rows), numeric=(1, 2, 3))
    body += "<h4>at the end: what grew or shrank, by site</h4>"
    body += picture(svg_diverging([(r.site, r.delta_bytes) for r in d.rows], title="change at the end"),
                    "change at the end by site")
    body += table(["site", "before", "after", "change"], _diff_rows(d.rows), numeric=(1, 2, 3))
    delta = d.after_bytes - d.before_bytes
    return panel(f"Snapshot diff: {('+' if delta > 0 else '')}{fmt_bytes(delta)} alive", body)


@renders(Annotations, "text")
def annotations_text(a: Annotations) -> str:
    """Plain text of ``Annotations``."""
    lines = [f"{len(a.rows)} markers"]
    lines += [f"  device {r.device}  {r.stage:<5}  {r.name}" + (f"  (event {r.event_index})" if r.event_index >= 0
                                                                 else "") for r in a.rows[:50]]
    if len(a.rows) > 50:
        lines.append(f"  ({len(a.rows) - 50} more)")
    return "\n".join(lines)


@renders(Annotations, "html")
def annotations_html(a: Annotations) -> str:
    """HTML of ``Annotations``."""
    rows = [(r.name, r.stage, r.device, "" if r.event_index < 0 else r.event_index) for r in a.rows[:200]]
    body = table(["marker", "stage", "device", "first event"], rows, numeric=(2, 3)) if rows else (
        '<div class="nbd-muted">no markers (record_function regions appear here, torch 2.5 and later)</div>')
    if len(a.rows) > 200:
        body += f'<div class="nbd-muted">{len(a.rows) - 200} more markers</div>'
    return panel(f"Snapshot markers: {len(a.rows)}", body)


@renders(MemTrace, "text")
def memtrace_text(t: MemTrace) -> str:
    """The compact report of a ``MemTrace``."""
    lines = [f"memtrace on {t.device_kind}: peak {fmt_bytes(t.peak_bytes)} working memory, retained "
             f"{fmt_bytes(t.retained_bytes)}, delta {fmt_bytes(t.delta_bytes)}"]
    if t.timeline:
        lines.append(f"  {sparkline(t.timeline, 48)}")
    if t.retained_sites:
        lines.append("  retained after the cell, by site:")
        lines.append(sites_table_text(t.retained_sites, limit=5, indent="    ", kinds=t.retained_kinds))
    lines.append("  top sites at the peak:")
    lines.append(sites_table_text(t.top_sites, limit=5, indent="    "))
    if t.findings:
        lines.append(findings_text(_shown(t)))
    return "\n".join(lines)


def _shown(t: MemTrace) -> tuple[Finding, ...]:
    """The findings as the report shows them: without their evidence, whose numbers (retained, delta, device, the
    bytes of each part of training state) the report states above them in words and formatted bytes; the data keeps
    it (``finding.evidence``, ``to_dict()``)."""
    import dataclasses

    return tuple(dataclasses.replace(f, evidence={}) for f in t.findings)


@renders(MemTrace, "html")
def memtrace_html(t: MemTrace) -> str:
    """The compact inline report of a ``MemTrace``: numbers, a small timeline, the sites."""
    facts = kv_table([("peak working memory", fmt_bytes(t.peak_bytes)),
                      ("retained after the cell", fmt_bytes(t.retained_bytes)),
                      ("delta", fmt_bytes(t.delta_bytes)), ("events", t.events), ("recorded on", t.device_kind)])
    body = f'<div style="display:flex;gap:16px;align-items:center;flex-wrap:wrap">{facts}{svg_sparkline(t.timeline)}</div>'
    if t.findings:
        body += findings_html(_shown(t))
    if t.retained_sites:
        body += "<h4>Retained after the cell, by site</h4>" + sites_table_html(t.retained_sites, limit=8,
                                                                               kinds=t.retained_kinds)
    body += "<h4>Alive at the peak, by site</h4>" + sites_table_html(t.top_sites, limit=8)
    return panel(f"memtrace: peak {fmt_bytes(t.peak_bytes)}, retained {fmt_bytes(t.retained_bytes)}", body,
                 kind=panel_kind(t.findings))
