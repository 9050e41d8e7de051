"""A real JupyterLab on 127.0.0.1 and a real headless Chromium (Debian's, driven by playwright).

In CI these tests must run: a missing Chromium is a failure there, a skip elsewhere.
Use ``run_notebook(lab, page, cells, name)``: it writes a notebook, opens it in JupyterLab, runs every cell and
waits for the kernel to go idle, then returns the page for assertions and screenshots.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import IN_CI, REPO

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]
DOCS = REPO / "docs"
# The README's pictures are rewritten only by `make screenshots` (NBDEBUG_SCREENSHOTS=1): a plain `make test`
# takes the same screenshots into a temporary folder and leaves the tracked docs/*.png as they are.
# (NBDEBUG_SHOTS_DIR keeps them in a folder of your choosing, to look at them)
_CHOSEN = DOCS if os.environ.get("NBDEBUG_SCREENSHOTS") == "1" else (
    Path(os.environ["NBDEBUG_SHOTS_DIR"]) if os.environ.get("NBDEBUG_SHOTS_DIR") else None)
_TEMPORARY: list[Path] = []  # the temporary folder, made on the first screenshot (none when no test takes one)


def shot(name: str) -> str:
    """Where a screenshot named ``name`` goes: docs/ under `make screenshots`, a temporary folder otherwise."""
    if _CHOSEN is not None:
        folder = _CHOSEN
    else:
        if not _TEMPORARY:
            # removed when the run ends (atexit: the test modules import this file apart from pytest's own copy of
            # it, so a session fixture here would look at another list)
            import atexit
            import shutil
            import tempfile

            _TEMPORARY.append(Path(tempfile.mkdtemp(prefix="nbdebug-shots-")))
            atexit.register(shutil.rmtree, _TEMPORARY[0], True)
        folder = _TEMPORARY[0]
    folder.mkdir(parents=True, exist_ok=True)
    return str(folder / name)

pytestmark = pytest.mark.browser


def _need(condition: bool, why: str) -> None:
    if not condition:
        if IN_CI:
            pytest.fail(f"browser test cannot run in CI: {why}")
        pytest.skip(why)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Lab:
    url: str
    token: str
    root: Path


@contextlib.contextmanager
def serve(tmp_path_factory, app: str):
    """A Jupyter server (``jupyterlab`` or ``notebook``, 7) on 127.0.0.1 with a fresh root, stopped with its kernels.

    Both start the same way: a token, no "news" pop-up over the screenshots, every cell rendered (no windowing: checks
    and screenshots see cells that are off screen too), its own process group (teardown stops the server and every
    kernel it started).
    """
    _need(os.path.exists(CHROMIUM), f"{CHROMIUM} is missing (apt-get install chromium)")
    root = tmp_path_factory.mktemp(app)
    token = secrets.token_hex(16)
    port = _free_port()
    for ext, name, text in (("apputils-extension", "notification", '{"fetchNews": "false", "checkForUpdates": false}'),
                            ("notebook-extension", "tracker", '{"windowingMode": "none"}')):
        folder = root / ".settings" / "@jupyterlab" / ext
        folder.mkdir(parents=True)
        (folder / f"{name}.jupyterlab-settings").write_text(text)
    app_class = "LabApp" if app == "jupyterlab" else "JupyterNotebookApp"
    extra = ["--LabApp.collaborative=False"] if app == "jupyterlab" else []
    log = open(root / "server.log", "w")  # noqa: SIM115 - closed in teardown
    env = dict(os.environ, JUPYTER_PLATFORM_DIRS="1", PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-m", app, "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", f"--{app_class}.expose_app_in_browser=True",
         "--ServerApp.disable_check_xsrf=True", "--allow-root", f"--{app_class}.user_settings_dir={root / '.settings'}",
         *extra],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    raise RuntimeError(f"{app} did not start:\n" + (root / "server.log").read_text()[-3000:]) from None
                time.sleep(0.5)
        yield Lab(url=url, token=token, root=root)
    finally:
        _stop_lab(proc, url, token)
        log.close()


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    with serve(tmp_path_factory, "jupyterlab") as server:
        yield server


def _start_time(pid: int) -> str | None:
    """A process's start time (field 22 of /proc/PID/stat): with the PID, it names one process, never a reused PID."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _descendants(pid: int) -> list[tuple[int, str | None]]:
    """Every process below ``pid`` (kernels, their children) with its start time, read from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append((c, _start_time(c)))
            todo.append(c)
    return out


def _stop_lab(proc: subprocess.Popen, url: str, token: str) -> None:
    """Shut down every kernel through the server, then the server; kill what is left of what it started."""
    import json
    import signal

    started = _descendants(proc.pid)
    try:
        try:
            with urllib.request.urlopen(f"{url}/api/kernels?token={token}", timeout=5) as r:
                kernels = json.load(r)
            for k in kernels:
                req = urllib.request.Request(f"{url}/api/kernels/{k['id']}?token={token}", method="DELETE")
                urllib.request.urlopen(req, timeout=10).close()
        except Exception:  # noqa: BLE001 - the server is gone or answered oddly: the signals below still stop it
            pass
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=15)
    finally:
        # whatever happened above: the group's last members, then any kernel that left the group (its own
        # session, or re-parented once the server died) but that this server started: we started it
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=15)
        for pid, start in started:
            if start is not None and _start_time(pid) == start:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _need(False, "playwright is not installed (pip install 'nbdebug[dev]')")
    _need(os.path.exists(CHROMIUM), f"{CHROMIUM} is missing (apt-get install chromium)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture()
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    try:
        yield pg
    finally:
        context.close()


def run_notebook(lab: Lab, page, cells: list[str], name: str, *, timeout_s: float = 180):
    """Write a notebook of ``cells``, open it in JupyterLab, run all cells, wait until the kernel is idle."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, lab.root / name)
    # ?reset: do not restore tabs that earlier tests left open in the server's workspace
    page.goto(f"{lab.url}/lab/tree/{name}?reset&token={lab.token}", wait_until="domcontentloaded")
    # keep a handle on this notebook's panel: the focused widget may change while cells run
    page.wait_for_function(
        """(name) => {
            if (!window.jupyterapp) return false;
            const w = [...window.jupyterapp.shell.widgets('main')].find(
                x => x.context && x.context.path === name);
            const status = w && w.sessionContext && w.sessionContext.session
                && w.sessionContext.session.kernel && w.sessionContext.session.kernel.status;
            if (status === 'idle') { window.__nbdPanel = w; return true; }
            return false;
        }""",
        arg=name,
        timeout=90_000,
    )
    page.evaluate("() => { window.jupyterapp.shell.activateById(window.__nbdPanel.id);"
                  " return window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    # every code cell shows an execution count once it ran (errors included), and the kernel is idle again
    page.wait_for_function(
        """(n) => {
            const w = window.__nbdPanel;
            const prompts = [...w.node.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];
            const done = prompts.filter(p => /\\[\\d+\\]/.test(p.textContent));
            const kernel = w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
            return done.length >= n && !!kernel && kernel.status === 'idle';
        }""",
        arg=len(cells),
        timeout=int(timeout_s * 1000),
    )
    return page


def open_notebook(lab: Lab, page, name: str, ready_js: str, timeout_s: float = 90) -> None:
    """Open notebook ``name`` from the lab's folder as it is on disk (no cell run) and wait until ``ready_js`` (an
    expression of ``w``, the notebook's panel) holds; the panel is ``window.__nbdPanel`` afterwards."""
    page.goto(f"{lab.url}/lab/tree/{name}?reset&token={lab.token}", wait_until="domcontentloaded")
    page.wait_for_function(
        """([name, ready]) => {
            if (!window.jupyterapp) return false;
            const w = [...window.jupyterapp.shell.widgets('main')].find(x => x.context && x.context.path === name);
            if (!w || !w.context.isReady) return false;
            window.__nbdPanel = w;
            return eval(ready);
        }""",
        arg=[name, ready_js],
        timeout=int(timeout_s * 1000),
    )
