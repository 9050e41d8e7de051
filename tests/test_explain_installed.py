"""The installed libraries a live error ran through, checked against each other's declared requirements.

Two small distributions are installed for real into a temporary site-packages (a package folder and its
``.dist-info`` with ``Requires-Dist``), put on ``sys.path``, imported, and made to raise: the check reads the
same metadata ``pip check`` reads.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from nbdebug.core.explain import explain
from nbdebug.core.explain._installed import frame_distributions, install_command, traceback_conflicts
from nbdebug.render.diagnosis import diagnosis_html, diagnosis_text


def _dist(site: Path, name: str, version: str, code: str, requires: tuple[str, ...] = ()) -> None:
    (site / name).mkdir(parents=True)
    (site / name / "__init__.py").write_text(code)
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]
    (info / "METADATA").write_text("\n".join(meta) + "\n")
    (info / "top_level.txt").write_text(name + "\n")


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """``nbdtrainer`` 3.1 (requires ``nbdcore>=2.0``) calling ``nbdcore`` 1.4, which refuses the call."""
    site = tmp_path / "lib" / "site-packages"
    _dist(site, "nbdcore", "1.4", "def step(x, *, fused=False):\n"
                                  "    raise RuntimeError('step() got an unusable state for this step kind')\n")
    _dist(site, "nbdtrainer", "3.1", "import nbdcore\n\ndef train(x):\n    return nbdcore.step(x, fused=True)\n",
          requires=("nbdcore>=2.0", "nbdmissing>=1.0", "nbdcore[extra]>=9; extra == 'speed'"))
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    yield importlib.import_module("nbdtrainer")
    for name in ("nbdtrainer", "nbdcore"):
        sys.modules.pop(name, None)


def _raised(trainer) -> BaseException:
    try:
        trainer.train(1)
    except RuntimeError as error:
        return error
    raise AssertionError("the installed library did not raise")


def test_the_distributions_of_the_frames_are_named_innermost_last(installed):
    assert frame_distributions(_raised(installed).__traceback__) == ["nbdtrainer", "nbdcore"]


def test_a_requirement_the_installed_versions_break_is_found(installed):
    conflicts = traceback_conflicts(_raised(installed))
    # the missing package and the extra's requirement are pip's business, not a mismatch of what is installed
    assert conflicts == ["nbdtrainer 3.1 requires nbdcore>=2.0; installed nbdcore is 1.4"]
    assert install_command(conflicts[0]) == "%pip install 'nbdcore>=2.0'"


def test_an_unknown_error_in_a_library_gets_the_mismatch_as_its_first_step(installed):
    d = explain(_raised(installed))
    assert d.kind in ("unknown", "library_raised")
    assert ("Does not fit", "nbdtrainer 3.1 requires nbdcore>=2.0; installed nbdcore is 1.4") in d.live.facts
    assert d.first_step.startswith("The libraries this error ran through do not fit the versions installed: "
                                   "nbdtrainer 3.1 requires nbdcore>=2.0")
    assert "%pip install 'nbdcore>=2.0'" in d.first_step
    for shown in (diagnosis_text(d), diagnosis_html(d)):  # the panel of an unknown error shows the measured step
        assert "First step:" in shown and "nbdcore&gt;=2.0" in shown.replace(">=", "&gt;=")


def test_libraries_that_fit_add_nothing(tmp_path, monkeypatch):
    site = tmp_path / "lib" / "site-packages"
    _dist(site, "nbdcore", "2.2", "def step(x, *, fused=False):\n    raise RuntimeError('step() refused')\n")
    _dist(site, "nbdtrainer", "3.1", "import nbdcore\n\ndef train(x):\n    return nbdcore.step(x, fused=True)\n",
          requires=("nbdcore>=2.0",))
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    try:
        error = _raised(importlib.import_module("nbdtrainer"))
        assert traceback_conflicts(error) == []
        d = explain(error)
        assert "do not fit" not in d.first_step
        assert not any(k == "Does not fit" for k, _ in (d.live.facts if d.live else ()))
    finally:
        for name in ("nbdtrainer", "nbdcore"):
            sys.modules.pop(name, None)


def test_an_error_in_the_users_own_code_has_no_frames_to_check():
    try:
        {}["missing"]
    except KeyError as error:
        assert frame_distributions(error.__traceback__) == []
        assert traceback_conflicts(error) == []


def test_one_check_for_a_traceback_and_for_given_versions(tmp_path, monkeypatch):
    """The traceback's distributions and torch's companions are checked by one function: a requirement for another
    platform (a marker that does not hold here) is none in either, as an extra's is not."""
    from nbdebug.core.explain._installed import requirement_conflicts
    from nbdebug.core.explain._live import version_conflicts

    site = tmp_path / "lib" / "site-packages"
    _dist(site, "nbdplugin", "0.3", "", requires=("Torch>=9.0; sys_platform == 'nbd-nowhere'", "torch<1.0",
                                                  "numpy>=99; extra == 'fast'"))
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    versions = {"torch": "2.4.0", "numpy": "1.26.4"}
    expected = ["nbdplugin 0.3 requires torch<1.0; installed torch is 2.4.0"]
    assert requirement_conflicts(["nbdplugin"], versions.get) == expected
    assert version_conflicts({**versions, "nbdplugin": "0.3"}) == expected
