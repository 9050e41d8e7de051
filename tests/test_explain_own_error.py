"""The family answer for a library's own error (``library_own_error``): its own class, or its frames alone.

Hand-written texts in the shape of those threads (a one-line error with a package-qualified class; a traceback whose
frames are one library's, none of the user's), and the texts where it gives way to unknown: another family's words,
torch's or the standard library's classes, the user's own frame raising.
"""

from __future__ import annotations

import importlib.metadata as md

import pytest

from nbdebug.core.explain import explain
from nbdebug.core.explain._own_error import library_own_error
from nbdebug.core.explain._structure import read

_SITE = "/opt/conda/lib/python3.10/site-packages"


def _library_only(package: str, exc_line: str) -> str:
    return ("Traceback (most recent call last):\n"
            f'  File "{_SITE}/{package}/cli.py", line 40, in main\n    run(args)\n'
            f'  File "{_SITE}/{package}/engine/run.py", line 212, in run\n    out = combine(parts)\n'
            f'  File "{_SITE}/{package}/engine/ops.py", line 77, in combine\n    return merge(parts)\n'
            f"{exc_line}\n")


@pytest.mark.parametrize(("text", "package"), [
    # a one-line error: the package-qualified class names the library, no frame at all
    ("graphkit._ffi.base.GraphKitError: Node type name must be given when the graph has more than one node type.",
     "graphkit"),
    ("allenkit.common.checks.ConfigurationError: 'encoder_type' is not among the registered choices: lstm, gru",
     "allenkit"),
    # a traceback whose frames are all one library's (its own command line), with no frame of the user's
    (_library_only("fooflow", "RuntimeError: stack expects a non-empty list of parts"), "fooflow"),
    (_library_only("fooflow", "KeyError: 0"), "fooflow"),
])
def test_a_library_own_error_is_answered_with_its_release_first(text, package):
    d = explain(text)
    assert d.kind == "library_own_error" and d.evidence["package"] == package
    step = d.first_step
    assert step.startswith(f"Read {package}'s message") and f"pip show {package}" in step
    assert step.index("installed release") < step.index("issue tracker") < step.index("values")
    assert any(f"md.version('{package}')" in f.code for f in d.fixes)


def test_the_frame_that_raised_is_named():
    d = explain(_library_only("fooflow", "RuntimeError: stack expects a non-empty list of parts"))
    assert d.evidence["where"] == "ops.py, line 77, in combine"


def test_a_live_session_names_the_installed_release():
    text = "packaging.version.SpecError: the spec 'abc' is not one this release understands"
    placed = library_own_error(read(text), text, live=True)
    assert placed is not None and placed[0] == "library_own_error"
    assert f"(this session has packaging {md.version('packaging')})" in placed[1]["first_step_detail"]
    assert "this session has" not in library_own_error(read(text), text)[1]["first_step_detail"]  # type: ignore[index]


@pytest.mark.parametrize("text", [
    # another family's words in the message: sizes, devices, files, checkpoints, the network, memory, distributed
    "graphkit._ffi.base.GraphKitError: Expect number of features to match number of nodes. Got 195 and 196 instead.",
    "graphkit._ffi.base.GraphKitError: Check failed: fs: Filename is invalid",
    "graphkit._ffi.base.GraphKitError: Check failed: magicNum == kSerializeMagic (2336 vs. 1593)",
    "lightkit.utilities.exceptions.MisconfigurationException: You requested GPUs: [1]\nBut your machine only has: []",
    "graphkit.errors.GraphKitError: features must be float32, got int64",
    "hubkit.errors.HubKitError: Connection to the server timed out",
    "graphkit.errors.GraphKitError: not enough memory to build the index",
    "graphkit.errors.GraphKitError: wrong counts per part: [16, 4]",
    "graphkit.errors.GraphKitError: this feature needs the optional extra: pip install graphkit[full]",
    # classes of torch, the standard library, and libraries whose errors are about the data or config they were given
    "torch.foo.BarError: the operator is not supported here",
    "subprocess.CalledProcessError: Command '['python', 'train.py']' returned non-zero exit status 1.",
    "omegaconf.errors.ConfigAttributeError: Key 'lr' is not in struct",
    "numpy.linalg.LinAlgError: Singular matrix",
    # a class of its own family (an import), whoever raised it
    _library_only("fooflow", "ImportError: cannot import name 'merge' from partially initialized module 'fooflow'"),
    # frames of two libraries (one calling the other), or with the user's own frame among them
    _library_only("fooflow", "RuntimeError: stack expects a non-empty list of parts").replace(
        f"{_SITE}/fooflow/engine/ops.py", f"{_SITE}/barlib/ops.py"),
    _library_only("fooflow", "RuntimeError: stack expects a non-empty list of parts").replace(
        f"{_SITE}/fooflow/cli.py", "/home/me/project/train.py"),
])
def test_it_gives_way_to_unknown_on_other_evidence(text):
    assert explain(text).kind != "library_own_error"


def test_a_cut_traceback_is_not_placed():
    cut = _library_only("fooflow", "").rstrip("\n")
    assert explain(cut).kind != "library_own_error"


def test_a_live_class_of_no_installed_library_is_not_placed():
    text = "myproject_checks.errors.SpecError: the spec 'abc' is not one this release understands"
    assert library_own_error(read(text), text) is not None  # a pasted text cannot tell: its class names a package
    assert library_own_error(read(text), text, live=True) is None  # the session can: nothing installed by that name
