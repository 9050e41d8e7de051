"""Clean real log text before matching, and read shapes and exception lines out of it.

Logs pasted from clusters carry noise that hides the message from anchored patterns: ANSI colours,
``[rank0]:`` / ``[default3]:`` prefixes added by torchrun, ``[12345]`` pid prefixes, rich / loguru box-drawn
tracebacks (``│ ╭ ╰ ❱``), pytest's ``E   `` prefix.  ``normalize`` removes them line by line and keeps the
line structure, so a match can still be mapped back to "the line that was recognised".
"""

from __future__ import annotations

import re

__all__ = ["unwrap", "normalize", "strip_decorations", "parse_shape", "last_exception_line", "last_exception_start",
           "EXC_LINE"]

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
# trailing blanks are tried only from the start of a run of blanks (linear on a long run)
_EDGES = re.compile(r"^[ \t]+|(?<![ \t])[ \t]+$", re.MULTILINE)
# A Python traceback frame, its source line (indented deeper than the frame) and an optional caret line.
# Frames never hold the error message, and in long logs they are most of the text.
_FRAME = re.compile(
    r'^(?P<ind>[ \t]*)File "[^"\n]*", line \d+, in [^\n]*\n(?:(?P=ind)[ \t][^\n]*\n)?(?:[ \t]*[~^]+[ \t]*\n)?',
    re.MULTILINE,
)


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


# a line break a terminal or an editor put inside a sentence: after a long line that does not end a clause, before a
# word ("... were compiled with different\nCUDA versions."); not before an indented line (a frame's source, a list) or
# a new message ("RuntimeError: ...")
_CONTINUES = re.compile(r"[A-Za-z(][\w.()='\"-]{0,40}(?:[ ,.]|$)")
_NEW_MESSAGE = re.compile(r"[A-Z]\w{0,60}(?:Error|Exception|Warning)\b|File [\"~/]|Cell In ?\[|Traceback")


def unwrap(text: str) -> str:
    """``text`` with the line breaks that wrapped one sentence over several lines replaced by spaces: only in the last
    exception's message (its line and the lines after it), or the whole text when it names no exception; log lines
    before it (pip's, a launcher's) stay lines of their own."""
    if "\n" not in text:
        return text
    last = last_exception_start(text)
    if last > 0:
        return text[:last] + unwrap(text[last:])
    lines = text.split("\n")
    out = [lines[0]]
    for line in lines[1:]:
        before = out[-1].rstrip()
        if (len(before) >= 60 and before[-1] not in ":.!?" and _CONTINUES.match(line)
                and not _NEW_MESSAGE.match(line)):
            out[-1] = before + " " + line
        else:
            out.append(line)
    return "\n".join(out)


def strip_decorations(text: str) -> str:
    """``text`` without colour codes and launcher / logger prefixes, frames kept (for reading the frames)."""
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if any(h in text for h in _PREFIX_HINT):
        text = _PREFIX.sub("", text)
    return text


def parse_shape(value: str) -> tuple[int, ...]:
    """``"4x10"``, ``"[4, 10]"``, ``"torch.Size([4, 10])"``, ``"(4, 10)"`` -> ``(4, 10)``."""
    return tuple(int(v) for v in re.findall(r"-?[0-9]{1,18}", value.replace("torch.Size", "")))


# an exception's (or a warning's) line, ``SomeError: message``; multiline, so that it finds such lines in a whole text
EXC_LINE = re.compile(
    r"^(?:\S+:\d+: )?(?P<type>(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception|Failed|Exceeded|Hit|Unsupported|Warning|Interrupt|Exit)"
    r"|Exception))"
    r"(?::[ \t]*(?P<msg>[^\n]*))?$", re.MULTILINE)


def last_exception_start(text: str) -> int:
    """Where the last ``SomeError: message`` line of a text starts; -1 if it has none."""
    start = -1
    for m in EXC_LINE.finditer(text):
        start = m.start()
    return start


def last_exception_line(text: str) -> tuple[str, str]:
    """The last ``SomeError: message`` line of a traceback text as ``(type, message)``; ``("", "")`` if none."""
    for line in reversed(text.split("\n")):
        m = EXC_LINE.match(line.strip())
        if m:
            return m.group("type"), (m.group("msg") or "").strip()
    return "", ""
