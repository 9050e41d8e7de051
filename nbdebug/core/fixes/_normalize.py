"""Clean real log text before matching, and convert the values parsed out of messages.

Logs pasted from clusters carry noise that hides the message from anchored patterns: ANSI colours,
``[rank0]:`` / ``[default3]:`` prefixes added by torchrun, ``[12345]`` pid prefixes, rich / loguru box-drawn
tracebacks (``│ ╭ ╰ ❱``), pytest's ``E   `` prefix.  ``normalize`` removes them line by line and keeps the
line structure, so a match can still be mapped back to "the line that was recognised".
"""

from __future__ import annotations

import re

__all__ = ["normalize", "to_bytes", "parse_shape", "fmt_bytes", "last_exception_line"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Prefixes that launchers and loggers put in front of every line; several may be stacked.
_PREFIX = re.compile(
    r"^(?:[ \t]*\[\d+\][ \t]+"  # [80746] pid of the writing process
    r"|[ \t]*\[(?:rank|default)\d+\]:[ \t]?"  # torchrun --tee / log prefixes: [rank0]: [default3]:
    r"|[ \t]*E {3,}"  # pytest's failure marker
    r"|[ \t]*[│┃|][ \t]?(?=\S))+",  # left border of a boxed traceback
    re.MULTILINE,
)
_PREFIX_HINT = ("[", "E   ", "│", "┃", "|")
_BOX = re.compile(r"[│┃╭╮╰╯─━❱╷╵┆]+")
_BOX_HINT = ("│", "┃", "╭", "╰", "❱", "─", "━")
_SPACES = re.compile(r"[ \t]{2,}")
_EDGES = re.compile(r"^[ \t]+|[ \t]+$", re.MULTILINE)
# A Python traceback frame, its source line (indented deeper than the frame) and an optional caret line.
# Frames never hold the error message, and in long logs they are most of the text.
_FRAME = re.compile(
    r'^(?P<ind>[ \t]*)File "[^"\n]*", line \d+, in [^\n]*\n(?:(?P=ind)[ \t]+[^\n]*\n)?(?:[ \t]*[~^]+[ \t]*\n)?',
    re.MULTILINE,
)

_UNITS = {
    "b": 1, "byte": 1, "bytes": 1,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
}
_SIZE = re.compile(r"^\s*([\d.,]+)\s*([KMGT]i?B|bytes?|B)\s*$", re.IGNORECASE)


def normalize(text: str) -> str:
    """Return ``text`` without traceback frames, colour codes, launcher prefixes and box drawing."""
    if 'File "' in text:
        text = _FRAME.sub("", text)
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if any(h in text for h in _PREFIX_HINT):
        text = _PREFIX.sub("", text)
    if any(h in text for h in _BOX_HINT):
        text = _BOX.sub(" ", text)
    return _EDGES.sub("", _SPACES.sub(" ", text))


def to_bytes(value: str) -> int:
    """``"20.00 MiB"`` -> 20971520; ``"0 bytes"`` -> 0; ``"1.5 GB"`` -> 1500000000 (binary for KiB/MiB/GiB)."""
    m = _SIZE.match(value)
    if m is None:
        raise ValueError(f"not a size: {value!r}; expected a number and a unit such as '20.00 MiB'")
    number = float(m.group(1).replace(",", ""))
    return int(round(number * _UNITS[m.group(2).lower()]))


def parse_shape(value: str) -> tuple[int, ...]:
    """``"4x10"``, ``"[4, 10]"``, ``"torch.Size([4, 10])"``, ``"(4, 10)"`` -> ``(4, 10)``."""
    return tuple(int(v) for v in re.findall(r"-?\d+", value.replace("torch.Size", "")))


def fmt_bytes(n: float) -> str:
    """Bytes in the unit PyTorch's messages use (``1.95 GiB``)."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"  # pragma: no cover - loop always returns


_EXC_LINE = re.compile(
    r"^(?:\S+:\d+: )?(?P<type>(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Failed|Exceeded|Hit|Unsupported|Warning|Interrupt|Exit))"
    r"(?::\s*(?P<msg>.*))?$"
)


def last_exception_line(text: str) -> tuple[str, str]:
    """The last ``SomeError: message`` line of a traceback text as ``(type, message)``; ``("", "")`` if none."""
    for line in reversed(text.split("\n")):
        m = _EXC_LINE.match(line.strip())
        if m:
            return m.group("type"), (m.group("msg") or "").strip()
    return "", ""
