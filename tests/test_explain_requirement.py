"""A stated version requirement checked in the live session (review 5, item 4): the installed release against the
specifier the message states, so the panel never tells a user to install what the kernel already has.

Every message here is written by hand and raised for real, so the live check reads this session's metadata.
"""

from __future__ import annotations

from importlib import metadata

import packaging
import pytest

from nbdebug.core.explain import explain


def _explained(message: str):
    try:
        raise ValueError(message)
    except ValueError as error:
        return explain(error)


def _text(d) -> str:
    return "\n".join([d.title, d.summary, d.first_step, *(f.title + " " + f.code for f in d.fixes)])


def test_a_requirement_the_installed_package_meets_is_said_not_to_be_the_cause():
    torch_version = metadata.version("torch")
    d = _explained("This exporter requires torch>=1.10, please upgrade torch")
    assert d.kind == "version_required"
    assert f"installed torch {torch_version} meets torch>=1.10" in dict(d.live.facts)["Requirement check"]
    assert "already meets torch>=1.10" in d.first_step and "not the cause" in d.first_step
    text = _text(d) + "\n".join(d.causes)
    assert "pip install" not in text and "do not meet" not in text  # nothing in the panel says otherwise
    assert not any("older (or newer)" in c or "upgraded after it was imported" in c for c in d.causes)


def test_a_requirement_the_installed_package_misses_names_the_install_command():
    d = _explained("This exporter requires torch>=99.0")
    assert "does not meet torch>=99.0" in dict(d.live.facts)["Requirement check"]
    assert "does not meet torch>=99.0" in d.first_step
    assert "%pip install 'torch>=99.0'" in [f.code for f in d.fixes][0]
    assert "PACKAGE" not in _text(d) and "<package>" not in _text(d)


def test_a_bound_on_a_parameter_is_named_as_no_installed_package():
    d = _explained("focal loss requires focal_gamma>=0.0, got -1.0")
    assert d.kind == "version_required"  # the text reads as one; the live check says what it is
    assert "focal_gamma is not an installed package" in dict(d.live.facts)["Requirement check"]
    assert "bound on its value, not a version" in d.first_step
    assert "installed packages do not meet" not in _text(d)


def test_a_module_imported_before_an_upgrade_is_named_as_the_stale_copy(monkeypatch):
    installed = metadata.version("packaging")
    monkeypatch.setattr(packaging, "__version__", "0.1")  # the copy this kernel imported before an upgrade
    d = _explained(f"this tool needs packaging>={installed}")
    assert d.kind == "version_required"
    assert "this kernel imported 0.1" in dict(d.live.facts)["Requirement check"]
    assert "restart the kernel" in d.first_step and "already meets" not in d.first_step
    assert d.causes == ("The package was upgraded after it was imported: the kernel still runs the old copy until it "
                        "restarts.",)


@pytest.mark.parametrize("text", [
    "ValueError: Your setup doesn't support bf16/gpu. You need torch>=1.10, using Ampere GPU with cuda>=11.0",
    "RuntimeError: flash attention needs a GPU of compute capability 8.0 and torch>=2.0",
])
def test_a_requirement_stated_with_the_hardware_it_needs_is_not_the_package_version(text):
    assert explain(text).kind != "version_required"


def test_the_text_only_answer_fills_no_placeholder_that_reads_as_an_operator():
    d = explain("ImportError: This model requires timm>=0.9.2, please upgrade timm")
    assert d.kind == "version_required"
    assert ">>=" not in _text(d) and "do not meet" not in d.summary
