"""The project's own promises: the README's two commands, CI's entry point, Binder's files."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import REPO


def test_readme_starts_with_the_two_commands():
    text = (REPO / "README.md").read_text()
    first_code = re.search(r"```(?:bash|sh)?\n(.*?)```", text, re.S)
    assert first_code, "README has no command block"
    commands = [line.split("#")[0].strip() for line in first_code.group(1).splitlines() if line.strip()]
    assert commands[:2] == ["make lab", "make test"]


def test_ci_runs_make_test_with_ci_true():
    script = (REPO / ".ci" / "run").read_text()
    assert "make test" in script and "CI=true" in script


def test_make_targets_exist():
    out = subprocess.run(["make", "-n", "test", "lab", "bench"], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_binder_installs_cpu_torch_and_the_package():
    reqs = (REPO / "binder" / "requirements.txt").read_text()
    assert re.search(r"^torch==[\d.]+(\+cpu)?$", reqs, re.M) and "/whl/cpu" in reqs
    assert "pip install" in (REPO / "binder" / "postBuild").read_text()


def test_cli_help_lists_verbs():
    out = subprocess.run([sys.executable, "-m", "nbdebug", "--help"], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0
    for verb in ("explain", "snapshot", "xla", "torchrun"):
        assert verb in out.stdout
    bad = subprocess.run([sys.executable, "-m", "nbdebug", "frob"], cwd=REPO, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown verb 'frob'" in bad.stderr
