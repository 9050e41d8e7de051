"""The compiled walk behind ``%%memtrace`` on CPU: built in a child process, checked, then the same as Python.

The suite runs with ``NBDEBUG_COMPILE=0`` (conftest); these tests switch it on, in a cache folder of their own.
One real build (a C++ compiler, ninja and torch's headers, about 10 s) serves the module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from nbdebug.core.memory import _compiled, _cpu_record, memtrace  # noqa: E402
from nbdebug.core.memory._cpu_record import (  # noqa: E402
    CpuRecording,
    _walk_compiled,
    _walk_python,
    compare_walks,
    walk_allocations,
)

BUILD_S = 300
IN_CI = os.environ.get("CI") == "true"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("nbdebug-cache")


@pytest.fixture()
def fresh(monkeypatch, cache):
    """The compiled walk switched on, with no module loaded and no child started in this process."""
    monkeypatch.setenv(_compiled.SWITCH, "1")
    monkeypatch.setenv(_compiled.CACHE, str(cache))
    monkeypatch.setattr(_compiled, "_module", None)
    monkeypatch.setattr(_compiled, "_child", None)
    monkeypatch.setattr(_compiled, "_gave_up", False)
    yield cache


def _dead_pid() -> int:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


@pytest.fixture(scope="module")
def walker(cache, shell):
    """The module, built the way a notebook's kernel gets it (IPython is running): asked for, built by a child
    process, then loaded.  A build killed earlier left its locks behind (ours, and torch's extension builder's,
    which torch waits on without a timeout): the new build must take them over."""
    env = {_compiled.SWITCH: "1", _compiled.CACHE: str(cache)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    module_before, child_before = _compiled._module, _compiled._child
    _compiled._module, _compiled._child = None, None
    try:
        d = _compiled.build_dir()
        (d / "build").mkdir(parents=True)
        (d / "building.pid").write_text(str(_dead_pid()))
        (d / "build" / "lock").write_text("")
        assert _compiled._in_ipython(), "the shell fixture is a running IPython"
        t0 = time.perf_counter()
        assert _compiled.compiled_walker() is None, "the first ask must not wait for a compiler"
        assert time.perf_counter() - t0 < 5, "the first ask only starts the build"
        assert _compiled._child is not None, "the first ask starts a child process"
        assert "being built" in _compiled.status() or "verified" in _compiled.status()
        code = _compiled.wait_for_child(BUILD_S)
        log = (d / "build.log").read_text(errors="replace")
        if code != 0 and not IN_CI and ("Ninja is required" in log or "command not found" in log
                                        or "No such file or directory: 'c++'" in log):
            pytest.skip(f"no C++ toolchain here (pip install ninja, and a C++ compiler): {log[-300:]}")
        assert code == 0, f"the build failed:\n{log[-3000:]}"
        assert not (d / "building.pid").exists() and not (d / "build" / "lock").exists()
        module = _compiled.compiled_walker()
        assert module is not None and hasattr(module, "walk")
        assert _compiled.status().startswith("built and verified")
        yield module
    finally:
        _compiled._module, _compiled._child = module_before, child_before
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _record(fn, *, ops=False):
    rec = CpuRecording(ops=ops)
    rec.start()
    try:
        fn()
    finally:
        rec.stop()
    return rec.results


def _mlp_steps(n):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
    opt = torch.optim.Adam(model.parameters())
    x, y = torch.randn(32, 64), torch.randn(32, 1)

    def run():
        for _ in range(n):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    return run


def _transformer_steps():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 2, 64, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(4, 16, 32)

    def run():
        for _ in range(3):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
    return run


def _bert_step():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(cfg)
    ids = torch.randint(0, 200, (4, 16))
    labels = torch.tensor([0, 1, 0, 1])

    def run():
        model(input_ids=ids, labels=labels).loss.backward()
    return run


def _two_threads():
    def other():
        for _ in range(20):
            torch.randn(256, 256) @ torch.randn(256, 256)

    def run():
        t = threading.Thread(target=other)
        t.start()
        for _ in range(20):
            torch.ones(300, 300).sum()
        t.join()
    return run


def _odd_names():
    # a function whose file name is not ASCII, a lambda, a generator and recursion, each allocating
    ns: dict = {}
    exec(compile("import torch\ndef made_in_cafe(n):\n    return torch.zeros(n) + 1\n", "café_ñ.py", "exec"), ns)

    def deep(k):
        return torch.ones(64) if k == 0 else deep(k - 1) * 2

    def run():
        kept = [ns["made_in_cafe"](100), (lambda: torch.empty(7))(), deep(30)]
        kept += list(torch.full((3,), float(i)) for i in range(3))
        return kept
    return run


WORKLOADS = {
    "mlp step": (_mlp_steps(1), False),
    "mlp, 5 steps, with operators recorded": (_mlp_steps(5), True),
    "transformer": (_transformer_steps(), False),
    "two threads": (_two_threads(), False),
    "odd names": (_odd_names(), False),
    "nothing": ((lambda: None), False),
}


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_the_compiled_walk_gives_exactly_what_the_python_walk_gives(walker, name):
    fn, ops = WORKLOADS[name]
    fn()  # warm: optimizer state, lazy modules
    results = _record(fn, ops=ops)
    py, c = _walk_python(results), _walk_compiled(results, walker)
    assert compare_walks(results, walker) == ""
    assert np.array_equal(py.t_ns, c.t_ns) and np.array_equal(py.ptr, c.ptr) and np.array_equal(py.size, c.size)
    assert np.array_equal(py.stack, c.stack) and py.frames == c.frames and py.stacks == c.stacks
    if name != "nothing":
        assert (c.size > 0).any() and c.stacks, "the workload allocated and the walk saw it"
    if name == "odd names":
        assert any(f[0] == "café_ñ.py" for f in c.frames)


def test_the_compiled_walk_reads_devices_like_the_python_walk(walker, monkeypatch):
    # on a machine with an accelerator both walks read each allocation's device; here every one is the CPU's
    monkeypatch.setattr(_cpu_record, "_other_devices_possible", lambda: True)
    fn = _mlp_steps(1)
    fn()
    results = _record(fn)
    assert compare_walks(results, walker) == ""
    assert _walk_compiled(results, walker).t_ns.size > 0


def test_the_compiled_walk_on_a_hugging_face_model(walker):
    fn = _bert_step()
    fn()
    results = _record(fn)
    assert compare_walks(results, walker) == ""
    a = _walk_compiled(results, walker)
    assert any("transformers" in f[0] for f in a.frames), "the library's own frames are there"


def test_walk_allocations_uses_the_compiled_walk_once_it_is_verified(walker, monkeypatch):
    results = _record(_mlp_steps(1))
    calls = []
    real = walker.walk

    class Spy:
        def walk(self, r):
            calls.append(1)
            return real(r)
    monkeypatch.setattr(_compiled, "_module", Spy())
    a = walk_allocations(results)
    assert calls, "walk_allocations went through the compiled walk"
    assert compare_walks(results, walker) == "" and a.t_ns.size == _walk_python(results).t_ns.size
    monkeypatch.setenv(_compiled.SWITCH, "0")
    calls.clear()
    walk_allocations(results)
    assert not calls, "NBDEBUG_COMPILE=0 turns it off even once loaded"


def test_a_walk_that_raises_falls_back_to_python(walker, monkeypatch):
    class Broken:
        def walk(self, r):
            raise TypeError("not a _ProfilerResult")
    monkeypatch.setattr(_compiled, "_module", Broken())
    results = _record(_mlp_steps(1))
    a = walk_allocations(results)
    assert np.array_equal(a.t_ns, _walk_python(results).t_ns)
    with pytest.raises(RuntimeError, match="ProfilerResult"):  # the real module refuses anything else
        walker.walk(object())


def test_memtrace_reports_the_same_with_either_walk(walker, monkeypatch):
    monkeypatch.setattr(_compiled, "_module", walker)
    step = _mlp_steps(1)
    step()
    kept = []
    rec = memtrace("cpu")
    with rec:
        step()
        kept.append(torch.randn(1000))
    compiled = rec.finish().to_dict()
    monkeypatch.setenv(_compiled.SWITCH, "0")
    python = rec.finish().to_dict()
    for d in (compiled, python):
        d.pop("seconds", None)
    assert compiled == python
    assert rec.result.retained_bytes >= 4000


def test_a_failed_build_is_said_once_and_never_retried(fresh, tmp_path, monkeypatch):
    broken = tmp_path / "_walk.cpp"
    broken.write_text("#error broken on purpose\n" + _compiled.SOURCE.read_text())
    monkeypatch.setattr(_compiled, "SOURCE", broken)
    _compiled._tag.cache_clear()
    try:
        d = _compiled.build_dir()
        reason = _compiled.build(d)
        assert reason != "ok" and "Error building extension" in reason
        assert (d / "failed.txt").read_text().strip() == reason
        assert "broken on purpose" in (d / "build.log").read_text(), "the compiler's words are kept in the log"
        assert not (d / "building.pid").exists(), "the lock is given back"
        assert _compiled.compiled_walker() is None and _compiled._child is None, "no second try"
        assert _compiled.status().startswith("not available: ") and "build.log" in _compiled.status()
    finally:
        _compiled._tag.cache_clear()


def test_a_verified_build_that_is_gone_is_not_loaded(fresh):
    d = fresh / "walk-0000000000000000"
    d.mkdir()
    (d / "verified.json").write_text(json.dumps({"module": "nbdebug_walk_0000000000000000", "file": "gone.so"}))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(_compiled, "build_dir", lambda: d)
        assert _compiled.compiled_walker() is None  # no error reaches the walk: it goes on in Python
        assert _compiled._gave_up, "and it is not tried again at every cell"
        results = _record(_mlp_steps(1))
        assert walk_allocations(results).t_ns.size > 0


def test_a_lock_is_fresh_only_while_its_builder_lives(tmp_path):
    lock = tmp_path / "building.pid"
    lock.write_text(str(os.getpid()))
    assert _compiled._lock_is_fresh(lock)
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    lock.write_text(str(done.pid))
    assert not _compiled._lock_is_fresh(lock), "a builder that died leaves a stale lock"
    lock.write_text(str(os.getpid()))
    old = time.time() - _compiled.STALE_LOCK_S - 10
    os.utime(lock, (old, old))
    assert not _compiled._lock_is_fresh(lock), "a lock held too long is stale"
    lock.write_text("not a pid")
    assert not _compiled._lock_is_fresh(lock)


def test_a_build_still_running_at_exit_is_ended_with_its_compiler_and_its_locks(fresh, tmp_path, monkeypatch):
    monkeypatch.setenv(_compiled.CACHE, str(tmp_path / "cache"))
    monkeypatch.setattr(_compiled, "_in_ipython", lambda: True)
    d = _compiled.build_dir()
    assert _compiled.compiled_walker() is None
    child = _compiled._child
    assert child is not None and child.poll() is None
    deadline = time.time() + 120
    while not (d / "build" / "lock").exists():  # wait until torch's builder holds its lock: compiling
        assert child.poll() is None, (d / "build.log").read_text(errors="replace")[-2000:]
        assert time.time() < deadline, "the build never reached the compiler"
        time.sleep(0.1)
    _compiled._stop_child()
    assert child.poll() is not None
    for _ in range(50):  # nothing of its process group is left (ninja, the compiler) once they have exited
        try:
            os.killpg(child.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("a process of the build's group is still running")
    assert not (d / "build" / "lock").exists(), "torch's lock would block every later build"
    assert not (d / "building.pid").exists()
    assert not (d / "failed.txt").exists(), "a stopped build is no failed build"


class _Ended:
    def __init__(self, code):
        self.returncode = code

    def poll(self):
        return self.returncode


@pytest.mark.parametrize("code, failed, again", [
    (1, True, False), (-11, True, False),  # it failed, or crashed (a segfault in the check): never again
    (_compiled.BUSY, False, True), (-15, False, True),  # another process builds it; it was stopped: later again
    (0, False, False),  # done: verified.json is there
])
def test_how_a_finished_build_process_is_read(fresh, tmp_path, monkeypatch, code, failed, again):
    d = tmp_path / "walk-x"
    d.mkdir()
    started = []
    monkeypatch.setattr(_compiled, "_child", _Ended(code))
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a) or _Ended(None))
    _compiled._start_child(d)
    assert (d / "failed.txt").exists() == failed
    if failed:
        assert f"code {code}" in (d / "failed.txt").read_text()
    assert bool(started) == again


def test_a_second_build_of_the_same_thing_says_busy_and_is_no_failure(fresh, tmp_path):
    d = tmp_path / "walk-busy"
    d.mkdir()
    (d / "building.pid").write_text(str(os.getpid()))  # a live builder holds it
    assert _compiled.build(d).startswith("busy")
    env = dict(os.environ, **{_compiled.CACHE: str(tmp_path)})
    out = subprocess.run([sys.executable, "-m", "nbdebug.core.memory._compiled", str(d)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == _compiled.BUSY, out.stdout + out.stderr
    assert not (d / "failed.txt").exists()


def test_a_build_process_with_another_torch_builds_nothing(fresh, tmp_path):
    d = tmp_path / "walk-0123456789abcdef"
    d.mkdir()
    env = dict(os.environ, **{_compiled.CACHE: str(tmp_path)})
    out = subprocess.run([sys.executable, "-m", "nbdebug.core.memory._compiled", str(d), d.name], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert "another torch or Python" in (d / "failed.txt").read_text()
    assert not (d / "build").exists()


def test_outside_ipython_nothing_is_started(tmp_path):
    script = (
        "import os, torch\n"
        "from nbdebug.core.memory import memtrace, _compiled\n"
        "with memtrace('cpu') as rec:\n"
        "    x = torch.ones(1000)\n"
        "assert rec.result.retained_bytes >= 4000\n"
        "print(_compiled._child is None, os.path.exists(_compiled.build_dir()))\n"
    )
    env = dict(os.environ, **{_compiled.SWITCH: "1", _compiled.CACHE: str(tmp_path)})
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False"], "a script starts no build and writes nothing"


def test_a_cache_folder_that_cannot_be_written_is_said(fresh, tmp_path):
    blocker = tmp_path / "a file"
    blocker.write_text("")
    reason = _compiled.build(blocker / "walk-x")
    assert "cannot be written" in reason and _compiled.CACHE in reason and "a file" in reason


def test_the_compile_verb_says_where_it_stands(fresh):
    env = dict(os.environ, **{_compiled.SWITCH: "0"})
    out = subprocess.run([sys.executable, "-m", "nbdebug", "compile", "--status"], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "compiled walk: off (NBDEBUG_COMPILE=0)"
    env[_compiled.SWITCH] = "1"
    env[_compiled.CACHE] = str(Path(fresh) / "elsewhere")
    out = subprocess.run([sys.executable, "-m", "nbdebug", "compile", "--status"], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 0 and "not built yet" in out.stdout and "elsewhere" in out.stdout
