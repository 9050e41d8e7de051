"""Units, formatted and parsed: bytes, seconds, counts.  The one place every layer takes them from.

``fmt_bytes`` uses the 1024-based units PyTorch prints (``1.50 GiB``); ``parse_bytes`` reads what PyTorch,
the CUDA caching allocator and torch_xla print (``20.00 MiB``, ``0 bytes``, ``1.5 GB``).  Digits are matched
with ``[0-9]`` (never ``\\d``, which also admits other scripts' digits) and their number is bounded, so hostile
input cannot reach Python's int-conversion limits.
"""

from __future__ import annotations

import math
import re

__all__ = ["fmt_bytes", "fmt_seconds", "fmt_count", "parse_bytes", "BYTE_UNITS"]

BYTE_UNITS: dict[str, int] = {
    "b": 1, "byte": 1, "bytes": 1,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
}
_SIZE = re.compile(r"^\s*([0-9][0-9.,]{0,40})\s*([KMGTP]i?B|bytes?|B)\s*$", re.IGNORECASE)
_BINARY = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def fmt_bytes(n: float | int | None) -> str:
    """Human-readable bytes with 1024-based units: ``1536`` -> ``'1.50 KiB'``; None -> ``'?'``."""
    if n is None:
        return "?"
    value = float(n)
    if not math.isfinite(value):
        return f"{value} B"
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit in _BINARY:
        if value < 1024 or unit == _BINARY[-1]:
            return f"{sign}{value:.0f} {unit}" if unit == "B" else f"{sign}{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def fmt_seconds(s: float | None) -> str:
    """Human-readable duration: ``12.3 us``, ``12.3 ms``, ``1.50 s``; None -> ``'?'``."""
    if s is None:
        return "?"
    if not math.isfinite(s):
        return f"{s} s"
    if abs(s) < 1e-3:
        return f"{s * 1e6:.1f} us"
    if abs(s) < 1:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def fmt_count(n: int | float) -> str:
    """A count with thousands separators (``1,000,000``); floats with four significant digits."""
    if isinstance(n, float) and not n.is_integer():
        return f"{n:.4g}"
    return f"{int(n):,}"


def parse_bytes(value: str) -> int:
    """``"20.00 MiB"`` -> 20971520; ``"0 bytes"`` -> 0; ``"1.5 GB"`` -> 1500000000.

    Raises ``ValueError`` naming the text when it is not a number followed by a byte unit.
    """
    m = _SIZE.match(value)
    if m is None:
        raise ValueError(f"not a size: {value[:80]!r}; expected a number and a unit such as '20.00 MiB'")
    try:
        number = float(m.group(1).replace(",", ""))
    except ValueError as e:
        raise ValueError(f"not a size: {value[:80]!r}; expected a number and a unit such as '20.00 MiB'") from e
    return int(round(number * BYTE_UNITS[m.group(2).lower()]))
