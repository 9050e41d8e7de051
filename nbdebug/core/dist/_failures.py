"""Which rank's failure is the cause and which ranks are victims.

torchrun's "Root Cause (first observed failure)" is the first process to *exit*, which is usually a victim: a
rank whose peer died sees ``Connection closed by peer`` and exits at about the same second as the culprit.  Here
every rank's error is classified with the table below (messages taken from real runs, see the sources); the
primary failure is the earliest *cause*, ordered by the sub-second time the rank reported when its exception
was raised (torch's error-file timestamp has one-second resolution only).
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

__all__ = ["ErrorPattern", "PATTERNS", "classify", "signal_name", "explain_detail_mismatch"]


@dataclass(frozen=True)
class ErrorPattern:
    """One known error text.

    ``kind`` is ``"victim"`` (a consequence of another rank failing or stalling) or ``"cause"``.  A victim
    pattern may name the culprit rank in a ``culprit`` group.
    """

    name: str
    regex: str
    kind: str
    meaning: str
    source: str


PATTERNS: tuple[ErrorPattern, ...] = (
    ErrorPattern(
        "peer_closed", r"Connection closed by peer", "victim",
        "another rank's process ended while this rank was talking to it (gloo)",
        "gloo transport/tcp/pair.cc; shared/notes/distributed.md §1.4 (torch 2.9.1 and 2.13 runs)",
    ),
    ErrorPattern(
        "peer_reset", r"Connection reset by peer|Broken pipe", "victim",
        "the connection to another rank was dropped (that rank crashed or was killed)",
        "shared/notes/distributed.md §0.4 (gloo SIGABRT on the peer)",
    ),
    ErrorPattern(
        "gloo_timeout", r"Timed out waiting \d+ ?ms for (recv|send) operation", "victim",
        "this rank waited in a collective that another rank never joined, until the process-group timeout",
        "gloo transport/tcp/unbound_buffer.cc:78/129; shared/notes/distributed.md §0.1",
    ),
    ErrorPattern(
        "monitored_barrier", r"Ranks? (?P<culprit>\d+)(?:, \d+)* failed to pass monitoredBarrier", "victim",
        "rank 0's monitored barrier timed out and names the rank(s) that never arrived",
        "ProcessGroupGloo.cpp:2661; shared/notes/distributed.md §1.3",
    ),
    ErrorPattern(
        "check_rank0", r"Please check rank \d+ logs for faulty rank", "victim",
        "this rank reached the barrier but rank 0 reported an error; the faulty rank is named in rank 0's error",
        "shared/notes/distributed.md §1.3",
    ),
    ErrorPattern(
        "nccl_watchdog", r"Watchdog caught collective operation timeout|NCCL communicator was aborted", "victim",
        "NCCL's watchdog gave up on a collective that another rank never joined",
        "pytorch/pytorch#152623 log; gpu-tpu-common-errors.md 'NCCL Timeout'",
    ),
    ErrorPattern(
        "nccl_remote", r"remote process exit|ncclRemoteError", "victim",
        "NCCL lost a peer: another rank exited or the network failed",
        "NCCL ncclRemoteError text (nccl.h)",
    ),
    ErrorPattern(
        "store_timeout", r"DistStoreError|Socket Timeout|wait timeout after \d+ms", "victim",
        "waiting for other ranks at the rendezvous store timed out (a rank never started or crashed early)",
        "shared/notes/distributed.md §0.8",
    ),
    ErrorPattern(
        "collective_mismatch", r"Detected mismatch between collectives on ranks", "cause",
        "TORCH_DISTRIBUTED_DEBUG=DETAIL found ranks calling different collectives (op, shape or dtype)",
        "shared/notes/distributed.md §1.2",
    ),
    ErrorPattern(
        "gloo_size_mismatch", r"Received data size doesn't match expected size|op\.preamble\.length <= op\.nbytes",
        "cause", "ranks passed tensors of different sizes to the same collective (gloo aborted the process)",
        "gloo EnforceNotMet text; shared/notes/distributed.md §0.4",
    ),
    ErrorPattern(
        "address_in_use", r"Address already in use|EADDRINUSE", "cause",
        "a port was already taken, usually by a stale run",
        "gpu-tpu-common-errors.md 'Address Already in Use'",
    ),
    ErrorPattern(
        "cuda_oom", r"CUDA out of memory|OutOfMemoryError", "cause",
        "this rank ran out of GPU memory",
        "gpu-tpu-common-errors.md",
    ),
)

_COMPILED = tuple((p, re.compile(p.regex)) for p in PATTERNS)


def classify(text: str) -> tuple[str, ErrorPattern | None, int | None]:
    """Return ``(kind, pattern, culprit_rank)`` for an error text; unknown errors are causes."""
    for pattern, rx in _COMPILED:
        m = rx.search(text)
        if m:
            culprit = m.groupdict().get("culprit")
            return pattern.kind, pattern, int(culprit) if culprit is not None else None
    return "cause", None, None


def signal_name(exitcode: int | None) -> str:
    """``-9`` -> ``SIGKILL``; empty for normal exit codes."""
    if exitcode is None or exitcode >= 0:
        return ""
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return f"signal {-exitcode}"


_FP = re.compile(r"Rank (\d+) is running collective: CollectiveFingerPrint\((.*?)\)\)?,? but Rank (\d+) is running "
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
