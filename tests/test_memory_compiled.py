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

from nbdebug.core.memory import _compiled, memtrace  # noqa: E402
from nbdebug.core.memory._cpu_record import (  # noqa: E402
    CpuRecording,
    _walk_compiled,
    _walk_python,
    compare_walks,
    walk_allocations,
)

BUILD_S = 300


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


@pytest.fixture(scope="module")
def walker(cache):
    """The module, built the way a kernel gets it: asked for, built by a child process, then loaded."""
    env = {_compiled.SWITCH: "1", _compiled.CACHE: str(cache)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    module_before, child_before = _compiled._module, _compiled._child
    _compiled._module, _compiled._child = None, None
    try:
        t0 = time.perf_counter()
        assert _compiled.compiled_walker() is None, "the first ask must not wait for a compiler"
        assert time.perf_counter() - t0 < 5, "the first ask only starts the build"
        assert _compiled._child is not None, "the first ask starts a child process"
        assert "being built" in _compiled.status() or "verified" in _compiled.status()
        code = _compiled.wait_for_child(BUILD_S)
        log = (_compiled.build_dir() / "build.log").read_text(errors="replace")
        assert code == 0, f"the build failed:\n{log[-3000:]}"
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


def test_a_build_still_running_at_exit_is_ended_with_its_compiler(fresh, monkeypatch):
    d = fresh / "walk-1111111111111111"
    monkeypatch.setattr(_compiled, "build_dir", lambda: d)
    assert _compiled.compiled_walker() is None
    child = _compiled._child
    assert child is not None and child.poll() is None
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
