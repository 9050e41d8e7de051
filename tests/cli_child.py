"""Running ``python -m nbdebug ARGS`` as a child the test cannot lose: bounded in time (killed, with its whole
process group, if it overruns) and, when asked, in address space (a limit set in the child only)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_LIMITED = ("import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_AS, ({0}, {0})); "
            "sys.argv = ['nbdebug', *sys.argv[1:]]; runpy.run_module('nbdebug', run_name='__main__')")


def run_nbdebug(args: list[str], *, stdin: int | None = subprocess.DEVNULL, timeout: float = 30,
                address_space: int | None = None,
                during: Callable[[threading.Event], None] | None = None) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``python -m nbdebug ARGS``; ``during(stop)`` runs in a thread meanwhile."""
    head = ["-m", "nbdebug"] if address_space is None else ["-c", _LIMITED.format(address_space)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, *head, *args], stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=REPO, start_new_session=True)
    stop = threading.Event()
    helper = threading.Thread(target=during, args=(stop,)) if during is not None else None
    if helper is not None:
        helper.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"nbdebug {' '.join(args)} did not end within {timeout} s")
    finally:
        stop.set()
        if helper is not None:
            helper.join(timeout=10)
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
