"""Cross-rank checks that run inside the ranks: weights and buffers, data order, step times and losses.

Each check gathers a small fingerprint from every rank (``all_gather_object``), compares, returns a result
object on every rank, and reports it to the launcher so that the ``DistRun`` lists it too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nbdebug.core._findings import Finding, HasFindings, sort_findings
from nbdebug.core._result import Result
from nbdebug.core.knowledge import finding, threshold
from nbdebug.errors import DistUsageError

__all__ = [
    "ConsistencyReport", "check_consistency", "DataOrderReport", "check_data_order", "log_step", "StepReport",
    "step_report", "check_finding", "CHECK_KINDS",
]

def _dist() -> Any:
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise DistUsageError(
            "this check runs inside the ranks, after init_process_group: call it in a %%torchrun cell or in code "
            "started by nbdebug.dist.run (the process group is not initialised here)"
        )
    return dist


# what each check's result kind is, as a knowledge entry (the kind of its Finding)
CHECK_KINDS: Mapping[str, str] = {
    "structure": "model_structure_differs", "unsynced_init": "unsynced_init", "diverged": "params_diverged",
    "buffers": "buffers_differ", "same_batches": "same_batches", "overlap": "shards_overlap",
    "same_every_epoch": "same_every_epoch",
}


def check_finding(result: str, summary: str, details: str = "") -> Finding | None:
    """The ``Finding`` of a failed check (``result`` is the report's ``kind``); None for ``ok``."""
    slug = CHECK_KINDS.get(result)
    if slug is None:
        return None
    return finding(slug, summary, evidence={"details": details} if details else None)


def _report(kind: str, result: str, ok: bool, summary: str, details: str = "") -> None:
    from nbdebug.core.dist import _bootstrap

    _bootstrap.send("check", kind=kind, result=result, ok=ok, summary=summary, details=details)


# -- weights and buffers ---------------------------------------------------------------------------------------

@dataclass(frozen=True, repr=False)
class ConsistencyReport(HasFindings, Result):
    """Whether every rank holds the same parameters and buffers.

    ``ok`` (no finding) when every rank holds the same tensors.

    Attributes
    ----------
    kind : str
        ``ok``, ``structure`` (names/shapes differ), ``unsynced_init`` (every parameter differs: seeds not
        synchronised), ``diverged`` (some parameters differ) or ``buffers`` (only buffers differ).
    first_difference : str
        The first parameter (or buffer) in model order that differs ('' when ok).
    differing : tuple of str
        All differing names, in model order.
    differing_ranks : tuple of int
        Ranks that differ from rank 0.
    explanation : str
        What it means and what to do.
    """

    kind: str
    nranks: int
    first_difference: str
    differing: tuple[str, ...]
    differing_ranks: tuple[int, ...]
    n_tensors: int
    explanation: str
    max_sum_gap: float = 0.0

    @property
    def findings(self) -> tuple[Finding, ...]:
        """The problem as a ``Finding`` (empty when every rank agrees)."""
        f = check_finding(self.kind, self.explanation, self.details)
        if f is None:
            return ()
        where = self.differing[:20] + tuple(f"rank {r}" for r in self.differing_ranks)
        return (dataclasses.replace(f, where=where),)

    @property
    def summary(self) -> str:
        """One sentence (used by the text renderer)."""
        return self.explanation

    @property
    def details(self) -> str:
        """Differing names ('' when every rank agrees)."""
        if not self.differing:
            return ""
        more = f" (+{len(self.differing) - 20} more)" if len(self.differing) > 20 else ""
        return "differing: " + ", ".join(self.differing[:20]) + more

    def _summary_line(self) -> str:
        return "consistent" if self.ok else f"{self.kind}: first difference {self.first_difference!r}"


def _fingerprint(name: str, kind: str, t: Any) -> tuple[str, str, tuple[int, ...], str, str, float, bool]:
    import torch

    data = t.detach()
    cpu = data.to("cpu").contiguous()
    if cpu.dtype.is_floating_point or cpu.dtype.is_complex:
        total = float(cpu.double().sum()) if cpu.numel() else 0.0
    else:
        total = float(cpu.sum()) if cpu.numel() else 0.0
    digest = hashlib.sha1(cpu.reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest() if cpu.numel() else ""
    flat = cpu.reshape(-1)
    constant = bool(flat.numel() == 0 or bool((flat == flat[0]).all()))
    # (name, param|buffer, shape, dtype, sha1 of the bytes, sum, every element equal)
    return (name, kind, tuple(cpu.shape), str(cpu.dtype), digest, total, constant)


def compare_fingerprints(all_fps: Sequence[Sequence[tuple[Any, ...]]]) -> ConsistencyReport:
    """Compare per-rank fingerprint lists (pure: used by ``check_consistency`` and by the tests)."""
    ref = list(all_fps[0])
    nranks = len(all_fps)
    structure_ranks = [r for r, fps in enumerate(all_fps) if [f[:4] for f in fps] != [f[:4] for f in ref]]
    if structure_ranks:
        r = structure_ranks[0]
        first = next((a[0] for a, b in zip(ref, all_fps[r]) if a[:4] != b[:4]), "(number of tensors)")
        return ConsistencyReport(
            kind="structure", nranks=nranks, first_difference=first, differing=(first,),
            differing_ranks=tuple(structure_ranks), n_tensors=len(ref),
            explanation=(f"rank {r} has a different model structure from rank 0 (first at {first!r}: "
                         "name, shape or dtype differ); every rank must build the same model"),
        )
    differing: list[str] = []
    ranks: set[int] = set()
    gap = 0.0
    for i, fp in enumerate(ref):
        for r in range(1, nranks):
            other = all_fps[r][i]
            if other[4] != fp[4]:
                if fp[0] not in differing:
                    differing.append(fp[0])
                ranks.add(r)
                gap = max(gap, abs(float(other[5]) - float(fp[5])))
    if not differing:
        return ConsistencyReport(kind="ok", nranks=nranks, first_difference="", differing=(),
                                 differing_ranks=(), n_tensors=len(ref),
                                 explanation=f"all {len(ref)} parameters and buffers are identical on {nranks} ranks")
    kinds = {fp[0]: fp[1] for fp in ref}
    params = [fp[0] for fp in ref if fp[1] == "param"]
    # parameters initialised to a constant (BatchNorm/LayerNorm weight=1, bias=0) agree whatever the seed
    random_params = [fp[0] for fp in ref if fp[1] == "param" and not (len(fp) > 6 and fp[6])]
    diff_params = [n for n in differing if kinds[n] == "param"]
    first = differing[0]
    if diff_params and set(random_params) <= set(diff_params):
        kind = "unsynced_init"
        explanation = (f"every parameter differs between ranks (first: {first!r}): the ranks did not start from the "
                       "same weights. Seed identically on every rank before building the model "
                       "(torch.manual_seed(0)), or broadcast rank 0's weights; DDP does that at construction, a "
                       "hand-written all_reduce loop does not")
    elif diff_params:
        kind = "diverged"
        explanation = (f"{len(diff_params)} of {len(params)} parameters differ between ranks (first: {first!r}): "
                       "their gradients were not averaged (a parameter outside DDP, find_unused_parameters, an "
                       "update on one rank only, or a rank that skipped a step)")
    else:
        kind = "buffers"
        explanation = (f"the parameters agree but {len(differing)} buffer(s) differ (first: {first!r}): BatchNorm "
                       "running statistics or other buffers are per-rank; use SyncBatchNorm / broadcast_buffers=True "
                       "or broadcast them before saving or evaluating")
    return ConsistencyReport(kind=kind, nranks=nranks, first_difference=first, differing=tuple(differing),
                             differing_ranks=tuple(sorted(ranks)), n_tensors=len(ref), explanation=explanation,
                             max_sum_gap=gap)


def check_consistency(model: Any, *, group: Any = None, buffers: bool = True) -> ConsistencyReport:
    """Compare every parameter and buffer of ``model`` across ranks (call it in every rank).

    Parameters
    ----------
    model : torch.nn.Module
        The model (a DDP/FSDP wrapper is fine for DDP; FSDP shards differ by design).
    group : ProcessGroup, optional
        The group to compare within (default: the whole world).
    buffers : bool
        Also compare buffers (BatchNorm running statistics, ...).

    Returns
    -------
    ConsistencyReport
        The same report on every rank, naming the first parameter that differs.
    """
    dist = _dist()
    fps = [_fingerprint(n, "param", p) for n, p in model.named_parameters()]
    if buffers:
        fps += [_fingerprint(n, "buffer", b) for n, b in model.named_buffers()]
    gathered: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, fps, group=group)
    report = compare_fingerprints(gathered)
    _report("check_consistency", report.kind, report.ok, report.explanation, report.details)
    return report


# -- data order --------------------------------------------------------------------------------------------------

@dataclass(frozen=True, repr=False)
class DataOrderReport(HasFindings, Result):
    """Whether the ranks' first batches are disjoint (DistributedSampler) and change between epochs (set_epoch);
    ``ok`` (no finding) when they are."""

    kind: str  # ok | same_batches | overlap | same_every_epoch
    epoch: int
    overlap: int
    batch_size: int
    explanation: str
    details: str = ""

    @property
    def findings(self) -> tuple[Finding, ...]:
        """The problem as a ``Finding`` (empty when the batches are fine)."""
        f = check_finding(self.kind, self.explanation, self.details)
        return () if f is None else (f,)

    @property
    def summary(self) -> str:
        """One sentence (used by the text renderer)."""
        return self.explanation

    def _summary_line(self) -> str:
        return self.kind


_FIRST_BATCHES: dict[int, tuple[int, ...]] = {}


def _ids(sample_ids: Any) -> tuple[int, ...]:
    if hasattr(sample_ids, "tolist"):
        sample_ids = sample_ids.tolist()
    try:
        return tuple(int(i) for i in sample_ids)
    except (TypeError, ValueError) as e:
        raise DistUsageError(f"check_data_order: expected the first batch's sample ids (ints), got {sample_ids!r}") from e


def compare_batches(batches: Sequence[Sequence[int]], epoch: int, previous: Sequence[int] | None) -> DataOrderReport:
    """Pure comparison of per-rank first-batch ids (and this rank's first batch of epoch 0)."""
    sets = [set(b) for b in batches]
    n = len(batches[0]) if batches else 0
    if len(batches) > 1 and all(list(b) == list(batches[0]) for b in batches[1:]):
        return DataOrderReport(
            kind="same_batches", epoch=epoch, overlap=n, batch_size=n,
            explanation=("every rank got the same samples in its first batch: the DataLoader has no "
                         "DistributedSampler, so each rank trains on the whole dataset in the same order. Use "
                         "DataLoader(ds, sampler=DistributedSampler(ds), ...) (and no shuffle=True on the loader)"),
            details="first batch ids: " + ", ".join(map(str, list(batches[0])[:16])),
        )
    overlap = 0
    for i in range(len(sets)):
        for j in range(i + 1, len(sets)):
            overlap = max(overlap, len(sets[i] & sets[j]))
    if overlap:
        return DataOrderReport(
            kind="overlap", epoch=epoch, overlap=overlap, batch_size=n,
            explanation=(f"ranks share up to {overlap} of {n} samples in their first batch: the shards overlap "
                         "(a sampler built with the wrong num_replicas/rank, or a hand-made split)"),
        )
    if previous is not None and epoch > 0 and list(previous) == list(batches[_rank_or_zero()]):
        return DataOrderReport(
            kind="same_every_epoch", epoch=epoch, overlap=0, batch_size=n,
            explanation=(f"epoch {epoch} starts with exactly the same batch as epoch 0: DistributedSampler "
                         "shuffles with the epoch as seed, so call sampler.set_epoch(epoch) at the start of every "
                         "epoch"),
        )
    return DataOrderReport(kind="ok", epoch=epoch, overlap=0, batch_size=n,
                           explanation=f"first batches of epoch {epoch} are disjoint across {len(batches)} ranks")


def _rank_or_zero() -> int:
    try:
        import torch.distributed as dist

        return dist.get_rank() if dist.is_initialized() else 0
    except Exception:  # pragma: no cover
        return 0


def check_data_order(sample_ids: Iterable[int] | Any, *, epoch: int = 0, group: Any = None) -> DataOrderReport:
    """Compare the first batch's sample ids across ranks (call it in every rank with the same ``epoch``).

    Catches a missing ``DistributedSampler`` (all ranks see the same samples), overlapping shards, and (when
    called again with ``epoch >= 1``) a missing ``sampler.set_epoch(epoch)`` (the same order every epoch).
    """
    dist = _dist()
    ids = _ids(sample_ids)
    gathered: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, ids, group=group)
    previous = _FIRST_BATCHES.get(0)
    _FIRST_BATCHES.setdefault(epoch, ids)
    report = compare_batches(gathered, epoch, previous)
    _report("check_data_order", report.kind, report.ok, report.explanation, report.details)
    return report


# -- steps ---------------------------------------------------------------------------------------------------------

_LAST_STEP: dict[str, Any] = {"t": None, "n": 0, "fr_seen": 0}


def _fr_times() -> list[tuple[int, int]]:
    """(collective_seq_id, time_created_ns) of collectives recorded since the last call."""
    import os
    import pickle

    if not os.environ.get("TORCH_FR_BUFFER_SIZE"):
        return []
    try:
        import torch

        dump_fr = getattr(torch._C._distributed_c10d, "_dump_fr_trace")  # noqa: B009  (private, torch >= 2.6)
        entries = pickle.loads(dump_fr(True, False, False)).get("entries", [])
    except Exception:
        return []
    out = [(int(e["collective_seq_id"]), int(e["time_created_ns"])) for e in entries
           if not e.get("is_p2p") and e.get("collective_seq_id", 0) > _LAST_STEP["fr_seen"]]
    if out:
        _LAST_STEP["fr_seen"] = max(s for s, _ in out)
    return out


_PENDING: list[dict[str, Any]] = []
_FLUSH_EVERY_S = 0.5


def log_step(loss: float | Any = None, *, step: int | None = None, arrivals_every: int = 50) -> None:
    """Record one training step of this rank (wall time since the previous call, the loss, collective arrivals).

    Call it once per step in every rank; ``DistRun.step_report()`` then names stragglers and odd losses.
    A call takes the time and the loss and keeps them; they go to the launcher in one message every half second
    (and when the rank's code ends, or its stacks are taken), so a call costs microseconds.  The times at which
    this rank reached each collective come from the Flight Recorder, whose read costs about 2 ms with the default
    200-entry buffer: it is read every ``arrivals_every`` calls (0: never) and once more when the rank's code ends,
    so that the default costs well under 1 % of a 100 ms step.  Lower ``arrivals_every`` when a step runs more
    than ``200 / arrivals_every`` collectives and every arrival matters.
    """
    now = time.perf_counter()
    seconds = None if _LAST_STEP["t"] is None else now - _LAST_STEP["t"]
    _LAST_STEP["t"] = now
    n = _LAST_STEP["n"] if step is None else step
    _LAST_STEP["n"] = n + 1
    _LAST_STEP["every"] = arrivals_every
    value = None
    if loss is not None:
        value = float(loss.detach().float().item() if hasattr(loss, "detach") else loss)
    read = arrivals_every > 0 and _LAST_STEP["n"] % arrivals_every == 0
    _PENDING.append({"step": n, "seconds": seconds, "loss": value, "arrivals": _fr_times() if read else []})
    if now - _LAST_STEP.get("sent", 0.0) >= _FLUSH_EVERY_S:
        flush_steps()


def flush_steps() -> None:
    """Send the steps logged since the last message (one message for many steps)."""
    if not _PENDING:
        return
    from nbdebug.core.dist import _bootstrap

    batch = _PENDING[:]
    del _PENDING[:len(batch)]
    _LAST_STEP["sent"] = time.perf_counter()
    _bootstrap.send("steps", steps=batch)


def flush_arrivals() -> None:
    """Send the pending steps and the collective arrivals not read yet (when the user's code ends)."""
    flush_steps()
    if _LAST_STEP["t"] is None or not _LAST_STEP.get("every"):
        return
    from nbdebug.core.dist import _bootstrap

    _bootstrap.send("arrivals", arrivals=_fr_times())


@dataclass(frozen=True, repr=False)
class StepReport(HasFindings, Result):
    """Stragglers and loss dispersion across ranks, from ``log_step`` records.

    ``findings`` are ``Finding`` objects (kinds ``straggler``, ``loss_not_finite``, ``loss_outlier``,
    ``identical_losses``), worst first; the thresholds are in ``nbdebug.core.knowledge.thresholds("dist")``.
    """

    steps: int
    per_rank: tuple[Mapping[str, Any], ...]
    slowest_rank: int | None
    slowdown: float
    loss_spread: float
    loss_rel_spread: float
    findings: tuple[Finding, ...] = field(default_factory=tuple)

    def _summary_line(self) -> str:
        return f"{self.steps} steps, {len(self.findings)} finding(s)"

    def _records(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.per_rank]


def step_report(records: Iterable[Mapping[str, Any]], nranks: int) -> StepReport:
    """Build the straggler / loss report from ``{"rank", "step", "seconds", "loss", "arrivals"}`` records."""
    by_rank: dict[int, list[Mapping[str, Any]]] = {r: [] for r in range(nranks)}
    for rec in records:
        by_rank.setdefault(int(rec["rank"]), []).append(rec)
    findings: list[Finding] = []
    per_rank: list[dict[str, Any]] = []
    medians: dict[int, float] = {}
    for r, recs in sorted(by_rank.items()):
        times = [float(x["seconds"]) for x in recs if x.get("seconds") is not None]
        losses = [x.get("loss") for x in recs]
        med = statistics.median(times) if times else float("nan")
        medians[r] = med
        per_rank.append({"rank": r, "steps": len(recs), "median_s": med,
                         "last_loss": losses[-1] if losses else None, "lateness_ms": 0.0})
    # collective arrivals: who reaches each collective last (the others wait for it)
    arrivals: dict[int, dict[int, int]] = {}
    for rec in records:
        for seq, t in rec.get("arrivals") or ():
            arrivals.setdefault(int(seq), {})[int(rec["rank"])] = int(t)
    lateness: dict[int, list[float]] = {r: [] for r in by_rank}
    for times_by_rank in arrivals.values():
        if len(times_by_rank) == nranks:
            first = min(times_by_rank.values())
            for r, t in times_by_rank.items():
                lateness[r].append((t - first) / 1e6)
    for row in per_rank:
        lat = lateness.get(row["rank"]) or []
        row["lateness_ms"] = statistics.mean(lat) if lat else 0.0
    finite = [m for m in medians.values() if math.isfinite(m)]
    typical = statistics.median(finite) if finite else float("nan")
    slowest: int | None = None
    slowdown = 1.0
    if any(lateness.values()) and math.isfinite(typical) and typical > 0:
        worst = max(per_rank, key=lambda row: float(row["lateness_ms"]))
        slowest = int(worst["rank"])
        late_s = float(worst["lateness_ms"]) / 1e3
        slowdown = 1.0 + late_s / typical
        if late_s > threshold("straggler_lateness") * typical and late_s > threshold("straggler_min_ms") / 1e3:
            findings.append(finding(
                "straggler", f"rank {slowest} is a straggler: it reaches the collectives {late_s * 1e3:.1f} ms after "
                f"the first rank on average ({late_s / typical:.0%} of a {typical * 1e3:.1f} ms step); the other "
                "ranks wait for it", where=(f"rank {slowest}",),
                evidence={"lateness_ms": round(late_s * 1e3, 2), "median_step_ms": round(typical * 1e3, 2)}))
    elif len(finite) > 1 and typical > 0:
        slowest = max(medians, key=lambda r: medians[r] if math.isfinite(medians[r]) else -1.0)
        slowdown = medians[slowest] / typical
        if slowdown > threshold("straggler_step_ratio"):
            findings.append(finding(
                "straggler", f"rank {slowest}'s median step takes {slowdown:.2f}x the median rank's",
                where=(f"rank {slowest}",), evidence={"slowdown": round(slowdown, 3)}))
    # losses at the last step every rank reported
    loss_at: dict[int, dict[int, float]] = {}
    for rec in records:
        if rec.get("loss") is not None:
            loss_at.setdefault(int(rec["step"]), {})[int(rec["rank"])] = float(rec["loss"])
    common = sorted(s for s, v in loss_at.items() if len(v) == nranks)
    spread = rel = 0.0
    if common:
        last = loss_at[common[-1]]
        vals = list(last.values())
        bad = [r for r, v in last.items() if not math.isfinite(v)]
        if bad:
            findings.append(finding("loss_not_finite", f"non-finite loss on rank(s) {bad} at step {common[-1]}",
                                    where=tuple(f"rank {r}" for r in bad), evidence={"step": common[-1]}))
        fin = [v for v in vals if math.isfinite(v)]
        if fin:
            spread = max(fin) - min(fin)
            med = statistics.median(fin)
            rel = spread / abs(med) if med else 0.0
            ratio = threshold("loss_outlier_ratio")
            for r, v in sorted(last.items()):
                if math.isfinite(v) and med and (abs(v) > ratio * abs(med) or abs(v) * ratio < abs(med)):
                    findings.append(finding(
                        "loss_outlier", f"rank {r}'s loss {v:.4g} is far from the median {med:.4g} at step {common[-1]}",
                        where=(f"rank {r}",), evidence={"loss": v, "median": med, "step": common[-1]}))
        identical = [s for s in common if nranks > 1 and len(set(loss_at[s].values())) == 1]
        if len(identical) >= threshold("identical_loss_steps"):
            findings.append(finding(
                "identical_losses", f"losses are identical on every rank at {len(identical)} steps: every rank trains "
                "on the same batches (no DistributedSampler?), unless the loss was all-reduced before log_step (log "
                "the local loss)", evidence={"steps": len(identical)}))
    return StepReport(steps=max((len(v) for v in by_rank.values()), default=0), per_rank=tuple(per_rank),
                      slowest_rank=slowest, slowdown=slowdown, loss_spread=spread, loss_rel_spread=rel,
                      findings=sort_findings(findings))
