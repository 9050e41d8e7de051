"""The result of explaining one error: what happened, the numbers, ranked causes, fixes, the first step."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nbdebug.core._findings import Fix, Severity
from nbdebug.core._result import Result

__all__ = ["Fix", "Section", "Diagnosis", "user_sources", "is_authority", "LIVE_TITLE"]

#: the title of the section that holds the live evidence
LIVE_TITLE = "What the live session shows"


# Pages that can state a fact about PyTorch and its libraries: their documentation, the PyTorch forum, the
# libraries' own issue trackers, and the references of the system underneath (CUDA, NCCL, Python, Linux,
# Windows).  A user project's issue thread shows that an error happened, not why; it is provenance, never a source.
_AUTHORITIES = (
    "pytorch.org", "docs.pytorch.org", "discuss.pytorch.org", "dev-discuss.pytorch.org", "github.com/pytorch/",
    "huggingface.co", "github.com/huggingface/", "lightning.ai", "github.com/Lightning-AI/",
    "github.com/microsoft/DeepSpeed", "github.com/deepspeedai/DeepSpeed", "deepspeed.readthedocs.io", "github.com/NVIDIA/nccl", "docs.nvidia.com",
    "developer.nvidia.com", "docs.python.org", "numpy.org", "github.com/numpy/", "cloud.google.com/tpu",
    "github.com/ipython/", "ipython.readthedocs.io", "github.com/jupyter/", "docs.jupyter.org", "man7.org",
    "docs.kernel.org", "www.kernel.org/doc", "learn.microsoft.com", "pypi.org", "packaging.python.org",
    "wiki.python.org",
    # the install and packaging tools' own documentation (issue 23's install families)
    "pip.pypa.io", "docs.conda.io", "docs.docker.com", "protobuf.dev",
    # libraries whose own messages the explainer names: their documentation and their own repository
    "einops.rocks", "github.com/arogozhnikov/einops", "docs.comfy.org", "github.com/comfyanonymous/ComfyUI",
    "github.com/Comfy-Org/", "www.gradio.app", "github.com/gradio-app/", "www.uvicorn.org", "github.com/encode/uvicorn",
    "github.com/fossasia/visdom", "github.com/unslothai/unsloth", "docs.unsloth.ai",
)


def is_authority(url: str) -> bool:
    """Whether ``url`` is a page that can state the fact: documentation, the forum, the library's own tracker."""
    rest = url.split("://", 1)[-1]
    return any(rest.startswith(a) for a in _AUTHORITIES)


def user_sources(sources: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The sources a user can open, in order, without repeats: http(s) pages that state the fact (see
    ``is_authority``).

    Knowledge may carry other provenance (names of internal notes, a user project's issue where the error was
    seen); that never reaches a report.
    """
    return tuple(dict.fromkeys(s for s in sources if s.startswith(("https://", "http://")) and is_authority(s)))


@dataclass(frozen=True)
class Section:
    """An extra block added to a diagnosis by another part of nbdebug (e.g. the memory snapshot at an OOM).

    Data only; the renderer lays it out: ``text`` (a paragraph), ``facts`` (key/value rows), a table
    (``header`` and ``rows``), ``fixes``, ``notes`` and ``preformatted`` text (a traceback), in that order.
    """

    title: str
    text: str = ""
    facts: tuple[tuple[str, Any], ...] = ()
    header: tuple[str, ...] = ()
    rows: tuple[tuple[Any, ...], ...] = ()
    fixes: tuple[Fix, ...] = ()
    notes: tuple[str, ...] = ()
    preformatted: str = ""
    # shown open in the HTML panel (the live evidence); otherwise one click away
    open: bool = False
    # only in the HTML panel (the full traceback: a terminal already printed it above the panel)
    html_only: bool = False
    # the live evidence names tensors, a module or what a check found (not only the line): worth a panel even for
    # an error no category fits
    telling: bool = False


@dataclass(frozen=True, repr=False)
class Diagnosis(Result):
    """What an error means and what to do about it.

    Attributes
    ----------
    kind : str
        Stable slug of the knowledge entry (``cuda_oom``, ``shape_mismatch``, ..., or ``unknown``): the same word
        as ``Finding.kind``.
    title : str
        One line naming the problem.
    summary : str
        What happened, in plain words, with the numbers filled in.
    evidence : Mapping[str, Any]
        Numbers and names parsed out of the message or the exception (sizes, shapes, devices, ...): the same word
        as ``Finding.evidence``.
    causes : tuple of str
        Likely causes, most likely first.
    fixes : tuple of Fix
        Fixes, most effective first, each with short code.
    first_step : str
        The one thing to try first.
    exception_type : str
        The exception's class name, when known.
    message : str
        The line of the error text that was recognised.
    notes : tuple of str
        Context that depends on where the error happened (e.g. the module that raised it).
    sections : tuple of Section
        Extra blocks contributed by other features (e.g. the memory snapshot at an OOM).
    sources : tuple of str
        Public pages the knowledge behind this diagnosis comes from (issue threads, docs): http(s) addresses
        only; anything else given here is dropped.
    severity : Severity
        ``error``, or ``warning`` (the same ``Severity`` as a ``Finding``, equal to those strings) for a warning that signals a bug (``loss_broadcast``, ...): the run went
        on, but it is training the wrong thing, slower, or without gradients somewhere.
    """

    kind: str
    title: str
    summary: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    causes: tuple[str, ...] = ()
    fixes: tuple[Fix, ...] = ()
    first_step: str = ""
    exception_type: str = ""
    message: str = ""
    notes: tuple[str, ...] = ()
    sections: tuple[Section, ...] = ()
    sources: tuple[str, ...] = ()
    severity: Severity = Severity.ERROR

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", user_sources(self.sources))
        if not isinstance(self.severity, Severity):
            object.__setattr__(self, "severity", Severity.parse(self.severity))

    @property
    def live(self) -> Section | None:
        """The live-evidence section (the user's frame, its tensors, the module that raised), if there is one."""
        return next((s for s in self.sections if s.title == LIVE_TITLE), None)

    @property
    def known(self) -> bool:
        """False when the error matched no known knowledge entry."""
        return self.kind != "unknown"

    def _summary_line(self) -> str:
        return f"{self.kind}: {self.title}"

    def _records(self) -> list[dict[str, Any]]:
        return [{"kind": self.kind, "evidence": k, "value": v} for k, v in self.evidence.items()] or [
            {"kind": self.kind, "evidence": None, "value": None}
        ]
