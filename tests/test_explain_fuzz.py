"""Fuzzing ``explain`` (issue 15): whatever it is given, a ``Diagnosis`` or one documented ``NbdebugError``, fast.

Inputs: mutations of the real error texts of every corpus (cut, spliced with another text, characters inserted,
lines repeated or wrapped, prefixes of launchers and boxed tracebacks added), random text over the characters
logs are made of, exceptions of random types with random messages and causes (including a ``__str__`` that
raises), and captured warnings.  The promise checked for each: the result is a ``Diagnosis`` whose category is a
known slug or ``unknown`` and whose texts are filled (no ``[[`` or ``{field}`` left), or, for an input of the
wrong type only, ``InvalidArgumentError``; and one call stays within a time bound far above the benchmark's
figures (0.3 ms typical) yet far below what a quadratic pattern takes on these sizes (seconds).  The example
budget is fixed and the generation derandomized, so CI runs the same examples every time (a few seconds).
"""

from __future__ import annotations

import re
import time
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbdebug.core.explain import Diagnosis, explain
from nbdebug.core.knowledge import entries
from nbdebug.errors import InvalidArgumentError, NbdebugError

# every explainer category, those placed by where an error was raised (no pattern of their own: collate_failed,
# checkpoint_load_failed, ...) included, with the family-level categories that a traceback's structure places
SLUGS = {e.slug for e in entries() if "explain" in e.contexts} | {"unknown", "user_code_error", "library_raised",
                                                                   "import_failed", "bus_error"}
TEXTS = [p.read_text(errors="replace") for p in sorted((Path(__file__).parent / "data").glob("errors*/*.txt"))]
BOUND_S = 2.0  # one call; texts here are at most ~60k characters
SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
LOG_CHARS = "ab AZ09 .:/_-()[]{}<>`'\"=,;|\\\n\t#*+!?@%&~^$" + "│╭╰❱─é中"
PREFIXES = ["[rank0]: ", "[default3]:", "E       ", "│ ", "[12345] ", "\x1b[31m", ""]
_UNFILLED = re.compile(r"\[\[|\{\w+(?::\w+)?\}")


def _check(result: Diagnosis, seconds: float) -> None:
    assert isinstance(result, Diagnosis)
    assert result.kind in SLUGS, result.kind
    assert result.severity in ("error", "warning")
    assert isinstance(result.summary, str) and not _UNFILLED.search(result.summary), result.summary
    assert all(isinstance(n, str) for n in result.notes)
    str(result)  # the text report renders
    result.to_dict()
    assert seconds < BOUND_S, f"one diagnosis took {seconds:.2f} s"


def _timed(arg, **kw) -> tuple[Diagnosis, float]:
    t0 = time.perf_counter()
    out = explain(arg, **kw)
    return out, time.perf_counter() - t0


@st.composite
def mutated_corpus_text(draw) -> str:
    text = draw(st.sampled_from(TEXTS))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["cut", "splice", "insert", "repeat", "prefix", "wrap", "case"]))
        if kind == "cut" and text:
            a = draw(st.integers(0, len(text)))
            b = draw(st.integers(a, len(text)))
            text = text[a:b] if draw(st.booleans()) else text[:a] + text[b:]
        elif kind == "splice":
            other = draw(st.sampled_from(TEXTS))
            at = draw(st.integers(0, len(text)))
            text = text[:at] + other[draw(st.integers(0, len(other))):] + text[at:]
        elif kind == "insert":
            at = draw(st.integers(0, len(text)))
            text = text[:at] + draw(st.text(alphabet=LOG_CHARS, max_size=200)) + text[at:]
        elif kind == "repeat" and text:
            lines = text.split("\n")
            i = draw(st.integers(0, len(lines) - 1))
            lines[i:i] = [lines[i]] * draw(st.integers(1, 300))
            text = "\n".join(lines)
        elif kind == "prefix":
            prefix = draw(st.sampled_from(PREFIXES))
            text = "\n".join(prefix + line for line in text.split("\n"))
        elif kind == "wrap":
            width = draw(st.integers(20, 120))
            text = "\n".join(text[i:i + width] for i in range(0, len(text), width))
        elif kind == "case":
            text = text.lower() if draw(st.booleans()) else text.upper()
    return text


@SETTINGS
@given(text=mutated_corpus_text())
def test_mutated_real_texts(text):
    _check(*_timed(text))


@SETTINGS
@given(text=st.text(alphabet=LOG_CHARS, max_size=5000) | st.text(max_size=2000),
       repeat=st.integers(1, 20))
def test_random_text(text, repeat):
    _check(*_timed(text * repeat))


_TYPES = [RuntimeError, ValueError, TypeError, IndexError, KeyError, AssertionError, OSError, MemoryError,
          UserWarning, NbdebugError, InvalidArgumentError, type("OutOfMemoryError", (RuntimeError,), {})]


class _BadStr(RuntimeError):
    def __str__(self) -> str:
        raise ValueError("a __str__ that fails")


@SETTINGS
@given(kind=st.sampled_from(_TYPES), message=st.sampled_from(TEXTS) | st.text(max_size=500),
       cause=st.none() | st.sampled_from(_TYPES), bad_cause=st.booleans(), data=st.data())
def test_exception_objects(kind, message, cause, bad_cause, data):
    cut = data.draw(st.integers(0, len(message)))
    try:
        try:
            if bad_cause:
                raise _BadStr()
            if cause is not None:
                raise cause(message[cut:])
        except BaseException as inner:
            raise kind(message[:cut]) from inner
        raise kind(message[:cut])
    except BaseException as exc:  # a real exception with a real traceback and chain
        _check(*_timed(exc, roots={}))


@SETTINGS
@given(message=st.sampled_from(TEXTS) | st.text(max_size=500),
       category=st.sampled_from([UserWarning, RuntimeWarning, DeprecationWarning, FutureWarning, Warning]),
       lineno=st.integers(0, 10**6), filename=st.text(max_size=80))
def test_captured_warnings(message, category, lineno, filename):
    record = warnings.WarningMessage(message, category, filename, lineno)
    _check(*_timed(record))


@SETTINGS
@given(value=st.none() | st.integers() | st.floats(allow_nan=True) | st.binary(max_size=100)
       | st.lists(st.text(max_size=10), max_size=5) | st.dictionaries(st.text(max_size=5), st.integers(), max_size=3))
def test_wrong_input_types_are_one_documented_error(value):
    with pytest.raises(InvalidArgumentError, match="explain\\(\\) takes an exception, a warnings.WarningMessage or a str"):
        explain(value)
