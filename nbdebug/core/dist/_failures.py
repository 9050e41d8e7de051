"""Which rank's failure is the cause and which ranks are victims.

torchrun's "Root Cause (first observed failure)" is the first process to *exit*, which is usually a victim: a
rank whose peer died sees ``Connection closed by peer`` and exits at about the same second as the culprit.  Here
every rank's error is classified with the knowledge entries read by ``rank_failure`` (``core/knowledge/dist.py``,
messages taken from real runs, see their sources); the primary failure is the earliest *cause*, ordered by the
sub-second time the rank reported when its exception was raised (torch's error-file timestamp has one-second resolution only).
"""

from __future__ import annotations

import re
import signal
from functools import cache

from nbdebug.core.knowledge import Entry, entries

__all__ = ["classify", "meaning", "signal_name", "explain_detail_mismatch"]


@cache
def _compiled() -> tuple[tuple[Entry, tuple[re.Pattern[str], ...]], ...]:
    # causes first: their messages are specific, while a victim's (an NCCL error) can be as broad as DistBackendError
    chosen = sorted(entries("rank_failure"), key=lambda e: e.role != "cause")
    return tuple((e, tuple(re.compile(p) for p in e.patterns)) for e in chosen)


def classify(text: str) -> tuple[str, Entry | None, int | None]:
    """Return ``(role, entry, culprit_rank)`` for a rank's error text; an unknown error is a ``"cause"``.

    ``role`` is ``"cause"`` or ``"victim"`` (the rank failed because another one failed or stalled); ``entry`` is
    the knowledge entry (``nbdebug.core.knowledge``, context ``rank_failure``) whose pattern matched; a victim's
    message may name the culprit rank (``monitoredBarrier``).
    """
    for e, rxs in _compiled():
        for rx in rxs:
            m = rx.search(text)
            if m:
                culprit = m.groupdict().get("culprit")
                return e.role, e, int(culprit) if culprit is not None else None
    return "cause", None, None


def meaning(entry: Entry) -> str:
    """What an entry's message means, in one sentence without the explainer's fact slots (``[[ ... {x}]]``)."""
    text = re.sub(r"\[\[.*?\]\]", "", entry.summary)
    first = re.split(r"(?<=[.!?])\s+", text.strip(), maxsplit=1)[0]
    return first.rstrip(".") or entry.title


def signal_name(exitcode: int | None) -> str:
    """``-9`` -> ``SIGKILL``; empty for normal exit codes."""
    if exitcode is None or exitcode >= 0:
        return ""
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return f"signal {-exitcode}"


_FP = re.compile(r"Rank ([0-9]{1,9}) is running collective: CollectiveFingerPrint\((.*?)\)\)?,? but Rank ([0-9]{1,9}) is running "
                 r"collective: CollectiveFingerPrint\((.*?)\)\)?\.\s*Collectives differ in the following aspects:\s*(.*)",
                 re.S)
_FIELD = re.compile(r"(SequenceNumber|OpType|TensorShape|TensorDtypes)=(\[[^\]]*\]|[^,]*)")


def _fingerprint(text: str) -> dict[str, str]:
    return {k: v.strip() for k, v in _FIELD.findall(text)}


def explain_detail_mismatch(message: str) -> str:
    """Turn DETAIL's ``Detected mismatch between collectives`` message into one plain sentence ('' if not one)."""
    m = _FP.search(message)
    if not m:
        return ""
    ra, fa, rb, fb, aspects = m.group(1), _fingerprint(m.group(2)), m.group(3), _fingerprint(m.group(4)), m.group(5)
    if int(ra) > int(rb):  # each rank reports itself first; say it the same way whichever rank raised
        ra, fa, rb, fb = rb, fb, ra, fa
    what = []
    if fa.get("OpType") != fb.get("OpType"):
        what.append(f"different collectives ({fa.get('OpType')} on rank {ra}, {fb.get('OpType')} on rank {rb})")
    if fa.get("TensorShape") != fb.get("TensorShape"):
        what.append(f"different tensor shapes ({fa.get('TensorShape')} on rank {ra}, {fb.get('TensorShape')} on rank {rb})")
    if fa.get("TensorDtypes") != fb.get("TensorDtypes"):
        what.append(f"different dtypes ({fa.get('TensorDtypes')} on rank {ra}, {fb.get('TensorDtypes')} on rank {rb})")
    if not what:
        what.append("collectives that differ in: " + " ".join(aspects.split())[:200])
    seq = fa.get("SequenceNumber", "?")
    return (f"At collective #{seq} the ranks called " + " and ".join(what)
            + "; every rank must issue the same collectives, in the same order, with the same shapes and dtypes.")
