"""Exact decoding (and re-encoding) of the value strings in torch_xla / LTC metrics reports.

torch_xla formats times with ``MetricFnTime`` (``torch_xla/csrc/runtime/metrics.cc``, copied into PyTorch's
``torch/csrc/lazy/core/metrics.cpp``): each whole part (d, h, m, s, ms) is printed with ``std::fixed`` and
precision 0, i.e. *rounded*, while the remainder carried to the next part subtracts ``floor()``.  A part is
therefore shown one too high whenever the rest is at least half a unit (``02s504ms627.218us`` is 1.503627 s;
``07m60s...`` happens).  The microseconds are exact, so decoding from the least significant part upward
recovers the value exactly.  Bytes use 1024-based units (``MetricFnBytes``), plain values ``%.2f``.
"""

from __future__ import annotations

import math
import re

__all__ = ["TIME_RE", "BYTES_RE", "PLAIN_RE", "shorten", "parse_time_ns", "format_time_ns", "parse_bytes", "format_bytes", "parse_value"]

# ASCII digits only, and few of them: a value from a file must not reach int()/float() as 400 nines (OverflowError)
# or as "²" (a digit to str.isdigit, not to int); torch_xla prints at most 20 digits in any part
_N = "[0-9]{1,20}"
TIME_RE = re.compile(rf"^(?:({_N})d)?(?:({_N})h)?(?:({_N})m(?!s))?(?:({_N})s)?(?:({_N})ms)?({_N}(?:\.[0-9]{{1,9}})?)us$")
BYTES_RE = re.compile(rf"^(-?(?:{_N}(?:\.[0-9]{{0,20}})?|nan|inf))(B|KB|MB|GB|TB|PB)$", re.IGNORECASE)
PLAIN_RE = re.compile(rf"^[-+]?(?:{_N}(?:\.[0-9]{{0,20}})?(?:e[-+]?[0-9]{{1,3}})?|nan|inf)$", re.IGNORECASE)

def shorten(text: str, limit: int = 40) -> str:
    """``text`` cut to ``limit`` characters for an error message (a hostile file may hold megabytes on one line)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


_PARTS = (("d", 86400e9, 2), ("h", 3600e9, 2), ("m", 60e9, 2), ("s", 1e9, 2), ("ms", 1e6, 3))
_BYTE_UNITS = ("B", "KB", "MB", "GB", "TB", "PB")


def parse_time_ns(text: str) -> float:
    """Return the exact value in nanoseconds of a torch_xla time string such as ``02s504ms627.218us``.

    Raises ``ValueError`` when ``text`` is not a time string.
    """
    m = TIME_RE.match(text.strip())
    if not m:
        raise ValueError(f"not a torch_xla time string: {shorten(text)!r}")
    *whole, micros = m.groups()
    tail = float(micros) * 1e3  # the microsecond part is printed exactly (3 decimals = ns)
    for (_, unit, _), digits in reversed(list(zip(_PARTS, whole))):
        if digits is None:
            continue
        shown = int(digits)
        # printed = round(rest / unit); the true whole count is floor(rest / unit): one less when the
        # lower parts add up to half a unit or more
        true_count = shown - 1 if tail >= unit / 2 and shown > 0 else shown
        tail += true_count * unit
    return tail


def format_time_ns(value: float) -> str:
    """Format nanoseconds exactly as torch_xla's ``MetricFnTime`` does (rounding bug included)."""
    out = []
    started = False
    for suffix, unit, width in _PARTS:
        ctime = value / unit
        if ctime >= 1.0 or started:
            out.append(f"{_round_half_even(ctime):0{width}d}{suffix}")
            value -= math.floor(ctime) * unit
            started = True
    out.append(f"{value / 1e3:07.3f}us")
    return "".join(out)


def _round_half_even(x: float) -> int:
    # iostream with precision 0 rounds like printf("%.0f"): half to even
    return int(f"{x:.0f}")


def parse_bytes(text: str) -> float:
    """Return bytes for ``4.00B`` / ``1.50KB`` / ``3.80GB`` (1024-based) or NaN for ``nanB``."""
    m = BYTES_RE.match(text.strip())
    if not m:
        raise ValueError(f"not a torch_xla byte string: {shorten(text)!r}")
    number, unit = m.groups()
    return float(number) * 1024.0 ** _BYTE_UNITS.index(unit.upper())


def format_bytes(value: float) -> str:
    """Format bytes as torch_xla's ``MetricFnBytes`` does (divide by 1024 while >= 1024, 2 decimals)."""
    if math.isnan(value):
        return "nanB"
    i = 0
    while value >= 1024 and i + 1 < len(_BYTE_UNITS):
        value /= 1024
        i += 1
    return f"{value:.2f}{_BYTE_UNITS[i]}"


def parse_value(text: str) -> tuple[str, float]:
    """Decode any metric value string; return ``(kind, number)`` with kind ``time`` (seconds), ``bytes``, ``value``."""
    text = text.strip()
    if text.endswith("us") and TIME_RE.match(text):
        return "time", parse_time_ns(text) / 1e9
    if BYTES_RE.match(text):
        return "bytes", parse_bytes(text)
    if PLAIN_RE.match(text):
        return "value", float(text)
    raise ValueError(f"not a torch_xla metric value: {shorten(text)!r}")
