"""nan_sentinel and %%nanhunt: the first non-finite module, step and phase; replay; hooks always come off."""

from __future__ import annotations

import os
import pickle
import weakref

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from IPython.utils.capture import capture_output
from torch.optim.optimizer import _global_optimizer_pre_hooks

import nbdebug
from nbdebug.core.training import nan as nan_mod
from nbdebug.core.training.nan import LOSS, nan_sentinel
from nbdebug.errors import NonFiniteError

COUNTER = {"step": 0}


class LogAfter50(nn.Module):
    """The seeds' exercise: from step 50 on, the second layer takes the log of non-positive numbers."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        x = self.fc(x)
        if COUNTER["step"] > 50:
            x = torch.log(x)  # THE BUG
        return torch.relu(x)


def exercise_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), LogAfter50(), nn.Linear(16, 3))


def batch():
    g = torch.Generator().manual_seed(0)
    return torch.randn(32, 8, generator=g), torch.randint(0, 3, (32,), generator=g)


def run_exercise(sentinel_kwargs=None, steps=80):
    m = exercise_model()
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    x, y = batch()
    with nan_sentinel(m, **(sentinel_kwargs or {})) as s:
        for i in range(steps):
            COUNTER["step"] = i
            loss = F.cross_entropy(m(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return m, s


def hook_counts(model):
    return [
        (len(m._forward_hooks), len(m._forward_pre_hooks), len(m._backward_hooks))
        for m in model.modules()
    ] + [len(p._backward_hooks or {}) for p in model.parameters()] + [len(_global_optimizer_pre_hooks)]


def test_seeds_exercise_found_with_module_step_and_phase():
    with pytest.raises(NonFiniteError) as info:
        run_exercise()
    e = info.value
    assert (e.module, e.step, e.phase) == ("2", 51, "forward")
    assert e.stats["shape"] == (32, 16) and (e.stats.get("nan", 0) > 0 or e.stats.get("contains") == "NaN")
    assert "step 51" in str(e) and "'2'" in str(e)
    assert e.op is None  # no replay asked


def test_replay_names_the_op_and_source_line():
    with pytest.raises(NonFiniteError) as info:
        run_exercise({"replay": True})
    e = info.value
    assert e.op == "torch.log"
    assert "test_nan.py" in e.source and "torch.log(x)" in e.source
    assert e.anomaly and "returned nan values" in e.anomaly
    assert "replay:" in str(e)


def test_optimizer_step_did_not_apply_the_bad_gradients():
    m = exercise_model()
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    x, y = batch()
    with pytest.raises(NonFiniteError):
        with nan_sentinel(m):
            for i in range(60):
                COUNTER["step"] = i
                loss = F.cross_entropy(m(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
    assert all(torch.isfinite(p).all() for p in m.parameters())


def test_one_host_sync_per_step_on_a_clean_run():
    m, s = run_exercise(steps=30)
    assert s.syncs == 30 and s.step_index == 30


class SqrtZero(nn.Module):
    def forward(self, x):
        return x + torch.sqrt(x * 0)  # finite forward; d sqrt at 0 is inf -> NaN gradient


class FunctionalSqrt(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        return y + torch.sqrt(y * 0)  # functional code in this module, after its child


BACKWARD_CASES = [
    ("functional-in-module", lambda: nn.Sequential(nn.Linear(4, 4), FunctionalSqrt(), nn.Linear(4, 1)), lambda out: out.sum(), "1"),
    ("module-backward", lambda: nn.Sequential(nn.Linear(4, 4), SqrtZero(), nn.Linear(4, 1)), lambda out: out.sum(), "1"),
    ("loss-backward", lambda: nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1)), lambda out: torch.sqrt(out * 0).sum(), LOSS),
]


@pytest.mark.parametrize("name,make,loss_of,module", BACKWARD_CASES, ids=[c[0] for c in BACKWARD_CASES])
def test_backward_nan_is_attributed(name, make, loss_of, module):
    torch.manual_seed(0)
    m = make()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with pytest.raises(NonFiniteError) as info:
        with nan_sentinel(m):
            for _ in range(2):
                opt.zero_grad()
                loss_of(m(torch.randn(5, 4))).backward()
                opt.step()
    e = info.value
    assert (e.phase, e.module, e.step) == ("backward", module, 0)


def test_backward_replay_runs_detect_anomaly():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), SqrtZero(), nn.Linear(4, 1))
    with pytest.raises(NonFiniteError) as info:
        with nan_sentinel(m, replay=True) as s:
            m(torch.randn(5, 4)).sum().backward()
            s.step()
    e = info.value
    assert e.phase == "backward" and e.anomaly and "returned nan values" in e.anomaly
    assert "sqrt" in e.anomaly.lower() or "SqrtZero" in e.anomaly or "x * 0" in e.anomaly


def test_hooks_come_off_after_an_exception_and_after_a_clean_exit():
    m = exercise_model()
    before = hook_counts(m)
    with pytest.raises(NonFiniteError):
        opt = torch.optim.SGD(m.parameters(), lr=0.05)
        x, y = batch()
        with nan_sentinel(m, replay=True):
            assert hook_counts(m) != before
            for i in range(60):
                COUNTER["step"] = i
                F.cross_entropy(m(x), y).backward()
                opt.step()
    assert hook_counts(m) == before
    with pytest.raises(KeyError):
        with nan_sentinel(m):
            raise KeyError("user error passes through unchanged")
    assert hook_counts(m) == before
    COUNTER["step"] = 0
    with nan_sentinel(m):
        m(torch.randn(2, 8))
    assert hook_counts(m) == before


def test_no_optimizer_explicit_steps_and_forward_only_loops():
    m = exercise_model()
    x, _ = batch()
    with pytest.raises(NonFiniteError) as info:
        with torch.no_grad(), nan_sentinel(m):
            for i in range(60):  # evaluation loop: each forward is a step
                COUNTER["step"] = i
                m(x)
    assert info.value.step == 51 and info.value.phase == "forward"
    COUNTER["step"] = 99
    with pytest.raises(NonFiniteError, match="step 0"):  # the pending flags are checked when the block ends
        with nan_sentinel(m):
            m(x)
    COUNTER["step"] = 0


def test_tuple_outputs_and_clean_runs():
    torch.manual_seed(0)
    lstm = nn.LSTM(4, 8, batch_first=True)
    opt = torch.optim.SGD(lstm.parameters(), lr=0.1)
    with nan_sentinel(lstm) as s:
        for _ in range(3):
            out, (h, c) = lstm(torch.randn(2, 5, 4))
            out.sum().backward()
            opt.step()
            opt.zero_grad()
    assert s.step_index == 3


def test_nonfinite_error_is_public_and_picklable():
    e = NonFiniteError("boom", module="a.b", step=3, phase="forward", stats={"nan": 1}, op="torch.log", source="f.py:1")
    e2 = pickle.loads(pickle.dumps(e))
    assert (e2.module, e2.step, e2.phase, e2.stats, e2.op, str(e2)) == ("a.b", 3, "forward", {"nan": 1}, "torch.log", "boom")
    assert nbdebug.NonFiniteError is NonFiniteError and issubclass(NonFiniteError, nbdebug.NbdebugError)
    assert nbdebug.nan_sentinel is nan_sentinel


# -- magics ------------------------------------------------------------------------------------------------
def test_nanhunt_magic_raises_and_binds(ip):
    ip.user_ns.update(model=exercise_model(), COUNTER=COUNTER, batch=batch, F=F, torch=torch)
    before = hook_counts(ip.user_ns["model"])
    cell = (
        "opt = torch.optim.SGD(model.parameters(), lr=0.05)\n"
        "x, y = batch()\n"
        "for i in range(80):\n"
        "    COUNTER['step'] = i\n"
        "    loss = F.cross_entropy(model(x), y); opt.zero_grad(); loss.backward(); opt.step()\n"
    )
    with capture_output():
        result = ip.run_cell(f"%%nanhunt model --replay -o err\n{cell}")
    assert isinstance(result.error_in_exec, NonFiniteError)
    err = ip.user_ns["err"].error  # -o binds the NanReport; its error is the NonFiniteError the cell raised
    assert (err.module, err.step, err.phase, err.op) == ("2", 51, "forward", "torch.log")
    assert hook_counts(ip.user_ns["model"]) == before
    COUNTER["step"] = 0
    # the only top-level module is found without naming it; a clean cell returns a report that says so
    for name in [k for k, v in ip.user_ns.items() if isinstance(v, torch.nn.Module) and k != "model"]:
        del ip.user_ns[name]  # modules left by other tests sharing this session's shell
    with capture_output():
        ok = ip.run_cell("%%nanhunt\nmodel(torch.randn(2, 8))")
    assert ok.success and ok.result.error is None and ok.result.ok and ok.result.modules == len(list(ip.user_ns["model"].modules()))
    assert str(ok.result).startswith("NaN/Inf sentinel: no NaN/Inf in")


def test_nanhunt_bad_input_is_a_usage_error(ip):
    from IPython.core.error import UsageError

    ip.user_ns.update(not_a_model=3, torch=torch)
    with pytest.raises(UsageError, match="expected a torch.nn.Module"):
        ip.run_cell_magic("nanhunt", "not_a_model", "pass")
    with pytest.raises(UsageError, match="could not evaluate"):
        ip.run_cell_magic("nanhunt", "no_such_name", "pass")
    ip.user_ns.update(frozen=nn.Linear(2, 2).requires_grad_(False))
    with pytest.raises(UsageError, match="%%gradmonitor: GradMonitor: Linear has no trainable parameters"):
        ip.run_cell_magic("gradmonitor", "frozen --no-live", "pass")
    with pytest.raises(UsageError, match="--every must be >= 1"):
        ip.run_cell_magic("gradmonitor", "frozen --every 0", "pass")


def test_gradmonitor_magic_returns_history_and_live_panel_updates_in_place(ip):
    from nbdebug.core.training.grads import GradHistory
    from nbdebug.ipython._live import LivePanel

    torch.manual_seed(0)
    ip.user_ns.update(net=nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)), batch=batch, F=F, torch=torch)
    cell = (
        "opt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
        "x, y = batch()\n"
        "for i in range(20):\n"
        "    loss = F.cross_entropy(net(x), y); opt.zero_grad(); loss.backward()\n"
        "    _gradmonitor.log_loss(loss); opt.step()\n"
    )
    with capture_output() as cap:
        hist = ip.run_cell_magic("gradmonitor", "net --classes 3 -o hist", cell)
    assert isinstance(hist, GradHistory) and len(hist.steps) == 20 and len(hist.losses) == 20
    assert ip.user_ns["hist"] is hist  # -o binds the result, like %timeit -o
    panel = ip.user_ns["_gradmonitor"].view
    assert isinstance(panel, LivePanel) and panel.updates >= 1 and panel.failed is None
    # one display with an id, then updates of that same display; once done it is emptied, because the history the
    # magic returns is the cell's one panel (not a "(live)" panel and a history with the same charts)
    first, *updates = cap.outputs
    display_id = first.transient["display_id"]
    assert not first.update and "training..." in first.data["text/html"]
    assert updates and all(o.update and o.transient["display_id"] == display_id for o in updates)
    done, final = updates[-2].data, updates[-1].data
    assert "done" in done["text/html"] and "(live)" not in done["text/html"]
    assert final["text/html"] == "" and "live panel ended" in final["text/plain"]  # words where only text renders
    assert all("application/vnd.jupyter.widget-view+json" not in o.data for o in cap.outputs)
    fmt = ip.display_formatter.format(hist)[0]
    assert "text/html" in fmt and "<svg" in fmt["text/html"]


def test_live_monitor_outside_the_magic_ends_as_the_history_panel(ip):
    torch.manual_seed(0)
    ip.user_ns.update(net=nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)), batch=batch, F=F, torch=torch)
    cell = (
        "import nbdebug\n"
        "opt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
        "x, y = batch()\n"
        "with nbdebug.GradMonitor(net, live=True) as mon:\n"
        "    for i in range(5):\n"
        "        loss = F.cross_entropy(net(x), y); opt.zero_grad(); loss.backward(); mon.log_loss(loss); opt.step()\n"
    )
    with capture_output() as cap:
        ip.run_cell(cell)
    ids = {o.transient["display_id"] for o in cap.outputs}
    assert len(ids) == 1  # one panel, updated in place
    final = cap.outputs[-1].data["text/html"]
    assert "GradMonitor done: 5 optimizer steps" in final and "(live)" not in final
    assert final.count("<svg") >= 2  # the history's charts, once


def test_gradmonitor_no_live_displays_nothing_while_running(ip):
    ip.user_ns.update(net=nn.Linear(8, 3), torch=torch)
    with capture_output() as cap:
        hist = ip.run_cell_magic(
            "gradmonitor", "net --no-live",
            "opt = torch.optim.SGD(net.parameters(), lr=0.1)\nnet(torch.randn(2, 8)).sum().backward(); opt.step()")
    assert len(hist.steps) == 1 and not cap.outputs


def test_gradmonitor_cell_that_rebinds_the_model_gets_a_warning_naming_it(ip):
    ip.user_ns.update(model=nn.Linear(8, 3), torch=torch)
    cell = (
        "model = torch.nn.Linear(8, 3)  # a new object: the monitor watches the old one\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for _ in range(3):\n"
        "    model(torch.randn(2, 8)).sum().backward(); opt.step()\n"
    )
    with capture_output():
        hist = ip.run_cell_magic("gradmonitor", "model --no-live", cell)
    f = next(f for f in hist.findings if f.kind == "no_optimizer_steps")
    assert f.severity == "warning" and "rebinds `model`" in f.message and f.where == ("model",)
    html = ip.display_formatter.format(hist)[0]["text/html"]
    assert 'class="nbdebug warning' in html and "no_optimizer_steps" in html


def test_gradmonitor_reports_then_reraises_when_the_cell_fails(ip):
    before = len(_global_optimizer_pre_hooks)
    ip.user_ns.update(net=nn.Linear(8, 3), torch=torch)
    cell = (
        "opt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
        "for i in range(4):\n"
        "    net(torch.randn(2, 8)).sum().backward(); opt.step()\n"
        "raise KeyError('user bug')\n"
    )
    with capture_output() as cap:
        result = ip.run_cell(f"%%gradmonitor net --no-live -o hist\n{cell}")
    assert isinstance(result.error_in_exec, KeyError) and "user bug" in str(result.error_in_exec)
    assert len(ip.user_ns["hist"].steps) == 4
    shown = [o.data.get("text/html", "") for o in cap.outputs]
    assert any("GradMonitor: 4 steps" in h for h in shown)  # the report was displayed before the error
    assert len(_global_optimizer_pre_hooks) == before  # hooks came off


def test_magic_cells_run_shell_syntax(ip):
    ip.user_ns.update(net=nn.Linear(8, 3), torch=torch)
    cell = (
        "out = !echo nbdebug-shell-line\n"
        "%env NBDEBUG_MAGIC_LINE=ran\n"
        "opt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
        "net(torch.randn(2, 8)).sum().backward(); opt.step()\n"
    )
    with capture_output():
        hist = ip.run_cell_magic("gradmonitor", "net --no-live", cell)
    assert len(hist.steps) == 1 and ip.user_ns["out"][0] == "nbdebug-shell-line"
    assert os.environ.pop("NBDEBUG_MAGIC_LINE") == "ran"
    del ip.user_ns["out"]
    with capture_output():
        ok = ip.run_cell("%%nanhunt net\nout = !echo nanhunt-shell-line\nnet(torch.randn(2, 8))")
    assert ok.success and ip.user_ns["out"][0] == "nanhunt-shell-line"


def test_nanhunt_reraises_other_errors_unchanged_and_takes_hooks_off(ip):
    m = exercise_model()
    ip.user_ns.update(m=m, torch=torch)
    before = hook_counts(m)
    with capture_output():
        result = ip.run_cell("%%nanhunt m -o err\nm(torch.randn(2, 8))\nraise ValueError('not a NaN')")
    assert isinstance(result.error_in_exec, ValueError) and str(result.error_in_exec) == "not a NaN"
    assert ip.user_ns["err"].error is None and hook_counts(m) == before


def test_nanhunt_checks_what_the_last_step_left_pending(ip):
    m = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    ip.user_ns.update(m=m, torch=torch)
    with capture_output():
        result = ip.run_cell("%%nanhunt m -o err\nm(torch.full((2, 8), float('nan')))")
    assert isinstance(result.error_in_exec, NonFiniteError)
    assert ip.user_ns["err"].error is result.error_in_exec and ip.user_ns["err"].error.module == "(input)"


def test_error_panel_gets_a_data_only_sentinel_section(ip):
    from nbdebug.core.explain._diagnosis import Section
    from nbdebug.ipython._explainer import diagnose_exception
    from nbdebug.ipython._extension import get_state

    e = NonFiniteError("boom", module="layers.2", step=51, phase="forward", stats={"nan": 3}, op="torch.log",
                       source="cell.py:7 in forward: x = torch.log(x)")
    d = diagnose_exception(get_state(ip), e)
    section = next(s for s in d.sections if s.title == "NaN/Inf sentinel")
    assert isinstance(section, Section) and not hasattr(section, "html")
    facts = dict(section.facts)
    assert facts["module"] == "layers.2" and facts["step (from 0)"] == "51" and "torch.log(x)" in facts["source"]
    assert section.fixes and "layers.2" in section.text
    assert d.known and "layers.2" in d.title and d.fixes
    html = ip.display_formatter.format(d)[0]["text/html"]
    assert "NaN/Inf sentinel" in html and "torch.log(x)" in html


def test_sentinel_section_survives_attributes_that_cannot_be_printed(ip):
    from nbdebug.ipython._explainer import diagnose_exception
    from nbdebug.ipython._extension import get_state

    class Bad:
        def __str__(self):
            raise RuntimeError("no str")

        def __repr__(self):
            raise RuntimeError("no repr")

    e = NonFiniteError("boom", module=Bad(), step=Bad(), phase="backward", stats={"nan": Bad()})
    d = diagnose_exception(get_state(ip), e)
    section = next(s for s in d.sections if s.title == "NaN/Inf sentinel")
    assert "Bad object" in dict(section.facts)["module"]
    assert any("replay=True" in n for n in section.notes)


def test_nan_in_the_batch_is_blamed_on_the_input():
    m = exercise_model()
    x, y = batch()
    x[3, 2] = float("nan")
    with pytest.raises(NonFiniteError) as info:
        with nan_sentinel(m):
            F.cross_entropy(m(x), y).backward()
    assert (info.value.module, info.value.phase) == ("(input)", "forward")


def test_gradient_accumulation_one_sync_per_optimizer_step():
    COUNTER["step"] = 0
    m = exercise_model()
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    x, y = batch()
    with nan_sentinel(m, optimizer=opt) as s:
        for _step in range(5):
            for k in range(4):
                F.cross_entropy(m(x[k * 8 : (k + 1) * 8]), y[k * 8 : (k + 1) * 8]).backward()
            opt.step()
            opt.zero_grad()
    assert s.step_index == 5 and s.syncs == 5
    # a NaN made by the data of one micro-batch: the 3rd of step 2 has identical rows, so the model's batch
    # standardisation divides 0 by a standard deviation of 0 there
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), BatchStandardise(), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    with pytest.raises(NonFiniteError) as info:
        with nan_sentinel(m, optimizer=opt) as s:
            for step in range(5):
                for k in range(4):
                    xb = x[k * 8 : (k + 1) * 8]
                    if (step, k) == (2, 2):
                        xb = xb[:1].expand(8, 8)
                    F.cross_entropy(m(xb), y[k * 8 : (k + 1) * 8]).backward()
                opt.step()
                opt.zero_grad()
    assert (info.value.step, info.value.module, info.value.phase) == (2, "1", "forward")
    assert s.syncs == 3 and all(bool(torch.isfinite(p).all()) for p in m.parameters())


class BatchStandardise(nn.Module):
    def forward(self, x):
        return (x - x.mean(0)) / x.std(0)


def test_a_nan_that_replaying_cannot_make_again_still_stops_the_step_and_says_so():
    """The step's calls are run again to find the module: a forward that depends on state changed since (here a
    global flag set for the 3rd micro-batch only) is finite when run again.  The sentinel still stops that step
    before the optimizer applies it, names the model's call and which micro-batch, and says why no module."""
    m = exercise_model()
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    x, y = batch()
    with pytest.raises(NonFiniteError) as info:
        with nan_sentinel(m, optimizer=opt):
            for step in range(5):
                for k in range(4):
                    COUNTER["step"] = 99 if (step, k) == (2, 2) else 0
                    F.cross_entropy(m(x[k * 8 : (k + 1) * 8]), y[k * 8 : (k + 1) * 8]).backward()
                opt.step()
                opt.zero_grad()
    COUNTER["step"] = 0
    e = info.value
    assert (e.step, e.module, e.phase) == (2, "", "forward")
    assert "call 3 of 4 in this step" in str(e) and "did not make the value again" in str(e)
    assert all(bool(torch.isfinite(p).all()) for p in m.parameters())


def test_sentinel_keeps_no_activation_alive():
    import gc
    import weakref

    COUNTER["step"] = 0
    m = exercise_model()
    x, y = batch()
    with nan_sentinel(m) as s:
        out = m(x)
        ref = weakref.ref(out)
        F.cross_entropy(out, y).backward()
        del out
        gc.collect()
        assert ref() is None
        s.step()


def test_sparse_gradients_do_not_break_the_optimizer_step():
    import torch
    from torch import nn

    import nbdebug

    emb = nn.Embedding(10, 4, sparse=True)
    opt = torch.optim.SGD(emb.parameters(), lr=0.1)
    with nbdebug.nan_sentinel(emb):
        for _ in range(3):
            loss = emb(torch.tensor([1, 2])).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()  # raised NotImplementedError before
    assert torch.isfinite(emb.weight).all()


def test_no_hook_is_left_on_an_output_the_user_keeps():
    import torch
    from torch import nn

    import nbdebug

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    kept = []
    with nbdebug.nan_sentinel(model):
        for _ in range(2):
            out = model(torch.randn(3, 4))
            kept.append(out)
            opt.zero_grad()
            out.sum().backward()
            opt.step()
        last = model(torch.randn(3, 4))  # a forward whose step never ends inside the block
        kept.append(last)
    assert all(not t._backward_hooks for t in kept), [len(t._backward_hooks or {}) for t in kept]


# -- blame that lands on the culprit --------------------------------------------------------------------------
class LogBetween(nn.Module):
    """A NaN made by the parent's own code between fc2 and fc3 (fc3's input is already NaN)."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        h = torch.log(self.fc2(h) - 10.0)  # negative -> NaN, made here, not in fc3
        return self.fc3(h)


class Wrapper(nn.Module):
    """The same bug one level down: the culprit is ``body``'s forward, named by its qualified name."""

    def __init__(self):
        super().__init__()
        self.body = LogBetween()

    def forward(self, x):
        return self.body(x)


def test_nan_made_between_modules_is_blamed_on_the_parents_code():
    torch.manual_seed(0)
    model = LogBetween()
    with pytest.raises(NonFiniteError) as info:
        with nbdebug.nan_sentinel(model):
            model(torch.randn(4, 8))
    e = info.value
    assert e.module == "" and e.phase == "forward"
    assert "between fc2 and fc3 in LogBetween.forward" in str(e)
    assert e.stats["location"] == "between fc2 and fc3 in LogBetween.forward"
    model = Wrapper()
    with pytest.raises(NonFiniteError) as info:
        with nbdebug.nan_sentinel(model):
            model(torch.randn(4, 8))
    assert info.value.module == "body"
    assert "between body.fc2 and body.fc3 in LogBetween.forward" in str(info.value)


def test_doctor_uses_the_same_attribution():
    torch.manual_seed(0)
    x, y = torch.randn(16, 8), torch.randint(0, 4, (16,))
    r = nbdebug.doctor(LogBetween(), (x, y), nn.CrossEntropyLoss(), steps=5, baseline=False, reproducibility=False)
    f = next(f for f in r.findings if f.kind == "nonfinite_forward")
    assert "between fc2 and fc3 in LogBetween.forward" in f.message and f.where == ("model",)


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.head = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


def test_replay_blames_the_loss_code_not_the_last_backward_function():
    torch.manual_seed(0)
    model = Head()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    temperature = 0.0
    with pytest.raises(NonFiniteError) as info:
        with nbdebug.nan_sentinel(model, replay=True):
            logits = model(torch.randn(4, 8))
            loss = F.cross_entropy(logits / temperature, torch.tensor([0, 1, 2, 3]))
            loss.backward()
            opt.step()
    e = info.value
    assert e.phase == "backward" and e.module == nan_mod.LOSS
    assert e.op is None and e.anomaly is None, "the model's backward only carries the loss's NaN on"
    assert "AddmmBackward0" not in str(e) and "the loss code after the model produced it" in str(e)


def test_message_of_a_freed_tensor_says_what_it_contains():
    """A gradient is gone by the time the flags are read (nbdebug keeps none alive): the device-side sum says."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), SqrtZero(), nn.Linear(4, 1))
    with pytest.raises(NonFiniteError) as info:
        with nan_sentinel(m) as s:
            m(torch.randn(5, 4)).sum().backward()
            s.step()
    e = info.value
    assert (e.phase, e.module) == ("backward", "1")
    assert "None" not in str(e) and "[contains NaN; shape (5, 4)]" in str(e), str(e)
    assert e.stats == {"shape": (5, 4), "dtype": "float32", "contains": "NaN"}


def test_error_panel_leads_with_the_forward_op_and_does_not_suggest_replay_again(ip):
    from nbdebug.ipython._explainer import diagnose_exception
    from nbdebug.ipython._extension import get_state

    class Second(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            return torch.relu(torch.log(self.fc(x)))  # log of negative numbers

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), Second(), nn.Linear(8, 3))
    with pytest.raises(NonFiniteError) as info:
        with nbdebug.nan_sentinel(model, replay=True):
            F.cross_entropy(model(torch.randn(16, 4)), torch.zeros(16, dtype=torch.long)).backward()
    e = info.value
    assert e.op == "torch.log" and "torch.log(self.fc(x))" in e.source
    d = diagnose_exception(get_state(ip), e)
    assert d.first_step.startswith("torch.log produced the first non-finite value at ")
    assert "Backward0" not in d.first_step
    section = next(s for s in d.sections if s.title == "NaN/Inf sentinel")
    assert list(dict(section.facts))[:5] == ["module", "step (from 0)", "phase", "op", "source"]
    assert not any("replay" in (f.title + f.code) for f in section.fixes) and not section.notes
    assert not any("detect_anomaly" in (f.title + f.code) for f in d.fixes)


def test_error_panel_names_the_code_between_modules(ip):
    from nbdebug.ipython._explainer import diagnose_exception
    from nbdebug.ipython._extension import get_state

    torch.manual_seed(0)
    model = LogBetween()
    with pytest.raises(NonFiniteError) as info:
        with nbdebug.nan_sentinel(model):
            model(torch.randn(4, 8))
    d = diagnose_exception(get_state(ip), info.value)
    assert "between fc2 and fc3 in LogBetween.forward" in d.first_step
    assert "between fc2 and fc3 in LogBetween.forward" in d.title


def test_replay_that_saw_torch_log_ranks_it_first_and_names_the_place_in_words(ip):
    """26-8: the cause the replay saw comes before "learning rate too high"; the header names model.1, not '1';
    the backward function is said in words."""
    from nbdebug.ipython._explainer import diagnose_exception
    from nbdebug.ipython._extension import get_state

    class Second(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            return torch.relu(torch.log(self.fc(x)))

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), Second(), nn.Linear(8, 3))
    with pytest.raises(NonFiniteError) as info:
        with nbdebug.nan_sentinel(model, replay=True):
            F.cross_entropy(model(torch.randn(16, 4)), torch.zeros(16, dtype=torch.long)).backward()
    d = diagnose_exception(get_state(ip), info.value)
    assert d.causes[0].startswith("torch.log took the log of a number <= 0"), d.causes
    assert all("learning rate" not in c.lower() for c in d.causes[:1])
    assert "in model.1" in d.title and "'1'" not in d.title and "'1'" not in d.summary
    section = next(s for s in d.sections if s.title == "NaN/Inf sentinel")
    assert "in model.1" in section.text
    facts = dict(section.facts)
    anomaly = facts.get("the backward pass (detect_anomaly)", "")
    assert not anomaly or anomaly.startswith("the gradient of ")


# -- cheap on the hot path, exact on the failure path ----------------------------------------------------------
def test_a_clean_step_hooks_only_the_calls_into_the_model():
    """What makes it cheap enough to leave on: during training no module inside the model carries a hook of the
    sentinel, and no activation inside it carries a gradient hook; only the model and its direct children do."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.Sequential(nn.Linear(16, 16), nn.ReLU()), nn.Linear(16, 3))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    seen_hooks = []
    inner = m[1][0]
    probe = inner.register_forward_hook(lambda mod, i, o: seen_hooks.append(len(o._backward_hooks or {})))
    with nan_sentinel(m) as s:
        hooked = {name for name, mod in m.named_modules() if mod._forward_hooks or mod._forward_pre_hooks}
        for _ in range(3):
            F.cross_entropy(m(torch.randn(4, 8)), torch.tensor([0, 1, 2, 0])).backward()
            opt.step()
            opt.zero_grad()
    probe.remove()
    assert hooked == {"", "0", "1", "2", "1.0"}  # "1.0": this test's own probe
    assert len(m[1][0]._forward_hooks) == 0 and seen_hooks == [0, 0, 0]
    assert s.syncs == 3


class LitLike(nn.Module):
    """A LightningModule's shape: the training code calls the children, never the module's own forward."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.encoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), LogBetween2())
        self.head = nn.Linear(4, 3)

    def training_step(self, x, y):
        return F.cross_entropy(self.head(self.encoder(x)), y)


class LogBetween2(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 4)
        self.broken = False

    def forward(self, x):
        h = self.fc(x)
        return torch.sqrt(h) if self.broken else h  # sqrt of negative numbers: NaN


def test_a_model_whose_children_the_loop_calls_is_localised():
    lit = LitLike()
    opt = torch.optim.SGD(lit.parameters(), lr=0.1)
    x, y = torch.randn(6, 8), torch.tensor([0, 1, 2, 0, 1, 2])
    with pytest.raises(NonFiniteError) as info:
        with nan_sentinel(lit, optimizer=opt) as s:
            for step in range(4):
                lit.encoder[2].broken = step == 2
                lit.training_step(x, y).backward()
                opt.step()
                opt.zero_grad()
    e = info.value
    assert (e.step, e.module, e.phase) == (2, "encoder.2", "forward") and s.syncs == 3
    assert "output of module 'encoder.2' (LogBetween2)" in str(e)
    assert all(bool(torch.isfinite(p).all()) for p in lit.parameters())


def test_finding_the_module_leaves_gradients_rng_and_running_statistics_as_they_were():
    """Running the step again happens before the optimizer's step: it must not add to ``.grad``, advance the
    random stream or move BatchNorm's running statistics."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), SqrtZero(), nn.Linear(8, 1))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with nan_sentinel(m, replay=True):
        m(torch.randn(16, 4)).sum().backward()
        grads = [p.grad.clone() for p in m.parameters()]
        stats = (m[1].running_mean.clone(), m[1].running_var.clone(), int(m[1].num_batches_tracked))
        rng = torch.get_rng_state()
        with pytest.raises(NonFiniteError) as info:
            opt.step()
    assert (info.value.phase, info.value.module) == ("backward", "3")
    assert all(torch.equal(p.grad.isnan(), g.isnan()) and torch.equal(p.grad.nan_to_num(), g.nan_to_num())
               for p, g in zip(m.parameters(), grads))
    assert torch.equal(m[1].running_mean, stats[0]) and torch.equal(m[1].running_var, stats[1])
    assert int(m[1].num_batches_tracked) == stats[2] and torch.equal(torch.get_rng_state(), rng)


class DropoutLog(nn.Module):
    """Finite or not depending on the dropout mask: a column kept by the mask of step 1 goes through a log."""

    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def forward(self, x):  # (B, 64)
        h = self.drop(x)
        return torch.where(h[:, :1] != 0, torch.log(-h.abs() - 1), h)  # kept first column -> log of a negative


def test_running_the_step_again_uses_its_random_state():
    """A NaN that depends on the dropout mask is made again: the call's RNG state was recorded with it."""
    m = nn.Sequential(nn.Linear(64, 64), DropoutLog(), nn.Linear(64, 2))
    torch.manual_seed(3)
    x = torch.randn(1, 64)
    with pytest.raises(NonFiniteError) as info:
        with torch.no_grad(), nan_sentinel(m) as s:
            for _ in range(40):
                m(x)
    e = info.value
    assert (e.module, e.phase) == ("1", "forward") and "did not make" not in str(e) and s.step_index == e.step + 1


def test_a_nan_made_under_autocast_is_made_again_under_autocast():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 1))
    with torch.no_grad():
        m[1].weight.fill_(1e3)
    x = torch.full((2, 4), 100.0)
    with pytest.raises(NonFiniteError) as info:
        with nan_sentinel(m), torch.autocast("cpu", dtype=torch.float16):
            m(x.abs() + 10)
    assert (info.value.module, info.value.phase) == ("1", "forward")
    assert "did not make" not in str(info.value)


def test_evaluation_between_optimizer_steps_keeps_few_inputs_alive():
    """With an optimizer seen, calls are kept until its next step; a long evaluation loop in between is checked
    early rather than holding every batch."""
    import gc

    m = nn.Linear(8, 2)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    refs = []
    with nan_sentinel(m) as s:
        m(torch.randn(4, 8)).sum().backward()
        opt.step()
        with torch.no_grad():
            for _ in range(100):
                x = torch.randn(4, 8)
                refs.append(weakref.ref(x))
                m(x)
                del x
        gc.collect()
        alive = sum(r() is not None for r in refs)
    assert 0 < alive <= nan_mod._MAX_CALLS and s.step_index == 1


class LossAndExtra(nn.Module):
    """Returns its loss and an extra output the loop never differentiates (Hugging Face models return the loss
    and the logits): the extra one's backward would make a NaN of its own."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 4), SqrtZero())
        self.extra = SqrtZero()
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        h = self.body(x)
        return self.head(h).sum(), self.extra(h)


def test_the_backward_is_run_again_only_through_the_outputs_it_went_through():
    torch.manual_seed(0)
    m = LossAndExtra()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with pytest.raises(NonFiniteError) as info:
        with nan_sentinel(m):
            loss, _ = m(torch.randn(5, 4))
            loss.backward()
            opt.step()
    assert (info.value.phase, info.value.module) == ("backward", "body.1")


class CausalScores(nn.Module):
    """Attention scores with the future masked by -inf, as a module's own output; the parent softmaxes them."""

    def forward(self, s):  # (B, T, T)
        future = torch.ones(s.shape[-2:], dtype=torch.bool).triu(1)
        return s.masked_fill(future, float("-inf"))


class MaskedAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.scores = nn.Linear(8, 8), nn.Linear(8, 8), CausalScores()

    def forward(self, x):  # (B, T, 8)
        return torch.softmax(self.scores(self.q(x) @ self.k(x).transpose(1, 2)), -1) @ x


def test_an_intentional_minus_inf_mask_is_not_an_error():
    """-inf written on purpose and softmaxed away reaches neither the model's output nor a gradient: nothing that
    is trained goes non-finite, so the step passes (checking each module's output flagged it)."""
    torch.manual_seed(0)
    m = nn.Sequential(MaskedAttention(), nn.Linear(8, 3))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with nan_sentinel(m) as s:
        for _ in range(3):
            F.cross_entropy(m(torch.randn(2, 5, 8)).reshape(-1, 3), torch.zeros(10, dtype=torch.long)).backward()
            opt.step()
            opt.zero_grad()
    assert s.result.error is None and s.step_index == 3


def test_no_grad_calls_between_optimizer_steps_keep_one_batch_at_most():
    """An evaluation loop between two optimizer steps: each no-grad call is checked at the next call and dropped,
    so at most one batch is held (the accumulation case stays bounded by the cap)."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 4))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    refs = []
    with nan_sentinel(m, optimizer=opt) as s:
        m(torch.randn(2, 16)).sum().backward()
        opt.step()
        opt.zero_grad()
        out = m(torch.randn(2, 16))  # a training call whose backward is still to come
        with torch.no_grad():
            for _ in range(10):
                xb = torch.randn(8, 16)
                refs.append(weakref.ref(xb))
                m(xb)
                del xb
        assert sum(r() is not None for r in refs) <= 1
        out.sum().backward()
        opt.step()
    assert s.result.error is None and s.result.steps == 2
    # a non-finite evaluation output is still found, at the next call
    with pytest.raises(NonFiniteError) as ei:
        with nan_sentinel(m, optimizer=opt):
            m(torch.randn(2, 16)).sum().backward()
            opt.step()
            with torch.no_grad():
                m(torch.full((2, 16), float("nan")))
                m(torch.randn(2, 16))
    assert ei.value.phase == "forward"


def test_replay_restores_every_buffer():
    """A forward that advances a counter, an EMA and spectral_norm's vector: replaying the step leaves all three as
    the step left them."""

    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.register_buffer("calls", torch.zeros(()))
            self.register_buffer("ema", torch.zeros(4), persistent=False)
            self.sn = nn.utils.parametrizations.spectral_norm(nn.Linear(4, 4))

        def forward(self, x):
            self.calls += 1
            h = self.lin(x)
            self.ema.mul_(0.5).add_(h.detach().mean(0))
            return self.sn(h).log()  # log of negatives: NaN

    torch.manual_seed(0)
    m = Counter()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with pytest.raises(NonFiniteError):
        with nan_sentinel(m, optimizer=opt, replay=True):
            out = m(torch.randn(2, 4))
            before = [b.clone() for b in m.buffers()]
            out.nan_to_num().sum().backward()
            opt.step()
    after = list(m.buffers())
    assert len(before) == len(after) >= 3
    for b0, b1 in zip(before, after):
        assert torch.equal(b0, b1)


def test_parameters_on_two_devices_are_checked_together():
    """A model split over devices (here the CPU and the meta device, which holds no values and is not checked):
    the flags are brought to one device before they are stacked."""
    m = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2, device="meta"))
    for p in m.parameters():
        p.grad = torch.ones_like(p)
    s = nan_sentinel(m).start()
    try:
        s.step()
        assert s.result.error is None and s.syncs == 1
        m[0].weight.grad[0, 0] = float("nan")
        with pytest.raises(NonFiniteError) as ei:
            s.step()
        assert ei.value.phase == "backward" and ei.value.module == "0"
    finally:
        s.detach()


def test_call_reads_autocast_without_the_torch_2_4_functions(monkeypatch):
    """torch < 2.4 has no ``get_autocast_dtype`` and its ``is_autocast_enabled`` takes no device type: the call's
    autocast state is read through the per-device functions."""
    import warnings

    from nbdebug.core.training._replay import Call

    old_enabled = torch.is_autocast_enabled

    def enabled(*args):
        if args:
            raise TypeError("is_autocast_enabled() takes 0 positional arguments but 1 was given")
        return old_enabled("cuda")

    def as_torch_2_1(mp):
        mp.delattr(torch, "get_autocast_dtype")
        mp.setattr(torch, "is_autocast_enabled", enabled)

    m = nn.Linear(2, 2)
    with monkeypatch.context() as mp:
        as_torch_2_1(mp)
        assert Call(m, 0, (torch.ones(1, 2),), {}).autocast == ()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autocast("cpu", dtype=torch.bfloat16):
            with monkeypatch.context() as mp:
                as_torch_2_1(mp)
                call = Call(m, 0, (torch.ones(1, 2),), {})
    assert call.autocast == (("cpu", torch.bfloat16),)


def test_checkpointed_child_run_again_in_backward_is_not_a_new_call():
    """Gradient checkpointing runs a child's forward again during backward: that run is not recorded as a call."""
    from torch.utils.checkpoint import checkpoint

    class CK(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 4)
            self.b = nn.Linear(4, 1)

        def forward(self, x):
            return self.b(checkpoint(self.a, x, use_reentrant=False))

    torch.manual_seed(0)
    m = CK()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    seen = []
    with nan_sentinel(m) as s:
        orig = s.step

        def step():
            seen.append([c.index for c in s._calls if c is not None])
            orig()

        s.step = step
        for _ in range(3):
            m(torch.randn(2, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
    assert seen == [[0], [0], [0]] and s.step_index == 3


def test_past_the_call_cap_the_output_gradients_are_still_checked():
    """Gradient accumulation over more calls than are kept: the early check drops the calls, not the hooks waiting
    for the backward, so a NaN the loss sends back is still named as the loss's."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with pytest.raises(NonFiniteError) as ei:
        with nan_sentinel(m, optimizer=opt):
            outs = [m(torch.randn(2, 4)) for _ in range(nan_mod._MAX_CALLS + 3)]
            loss = sum(o.sum() for o in outs) + torch.sqrt(outs[0] - outs[0]).sum()  # sqrt'(0): the loss's NaN
            loss.backward()
            opt.step()
    assert ei.value.module == LOSS and ei.value.phase == "backward"
    assert "gradient of the model's output" in str(ei.value)


def test_freed_tensor_keeps_its_shape_in_the_message():
    """The step's output is freed before the check and running it again fails: the message still gives the
    shape and dtype the output had, not ``()``."""

    class FailsAgain(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 3)
            self.n = 0

        def forward(self, x):
            self.n += 1
            if self.n > 1:
                raise ValueError("replay fails")
            return self.lin(x).log()

    torch.manual_seed(0)
    m = FailsAgain()
    with torch.no_grad():
        m.lin.bias.fill_(-5.0)
        m.lin.weight.zero_()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with pytest.raises(NonFiniteError) as ei:
        with nan_sentinel(m, optimizer=opt):
            m(torch.ones(4, 2)).nan_to_num().sum().backward()
            opt.step()
    assert "shape (4, 3)" in str(ei.value) and ei.value.stats["dtype"] == "float32"
    assert "raised ValueError" in str(ei.value)


def test_nan_gradient_from_a_regulariser_says_it_did_not_come_through_the_output():
    """A penalty on a parameter itself makes its gradient NaN; the output's gradient is finite: the note says so."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
    with torch.no_grad():
        m[0].weight[0, 0] = -1.0
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with pytest.raises(NonFiniteError) as ei:
        with nan_sentinel(m, optimizer=opt):
            loss = m(torch.randn(2, 4)).pow(2).mean() + m[0].weight.clamp(min=-1).sqrt().nansum() * 1e-3
            loss.backward()
            opt.step()
    e = ei.value
    assert e.phase == "backward" and e.module == "0"
    assert "another path" in str(e) and "state that changed" not in str(e)


def test_input_modified_in_place_is_not_blamed_on_the_data():
    """A forward that takes the log of its input in place: running the call again sees the NaN in the input, and
    the message says the input was modified in place since the call."""

    class InPlace(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x.log_())

    torch.manual_seed(0)
    m = InPlace()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with pytest.raises(NonFiniteError) as ei:
        with nan_sentinel(m, optimizer=opt):
            m(torch.tensor([[1.0, 2.0, -3.0, 4.0]])).sum().backward()
            opt.step()
    assert "modified in place since the call" in str(ei.value)


def _scaled_loop(model, loss_of, steps, init_scale):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    for _ in range(steps):
        scaler.scale(loss_of(model(x), y)).backward()
        scaler.step(opt)  # skips opt.step() when the unscaled gradients hold Inf/NaN
        scaler.update()
        opt.zero_grad()
    return scaler


def test_a_step_gradscaler_skips_for_overflow_is_not_an_error():
    # the scaled loss overflows float32 on the first steps; GradScaler skips them and halves its scale: nothing
    # reached the parameters, so the sentinel must not report the Inf of a skipped step at the next forward
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    with nbdebug.nan_sentinel(model) as rec:
        scaler = _scaled_loop(model, lambda out, y: ((out - y) ** 2).sum(), 6, 2.0 ** 127)
    assert scaler.get_scale() < 2.0 ** 127  # steps were skipped, then training went on
    assert rec.result.error is None and rec.result.steps >= 1


def test_a_nan_that_gradscaler_skips_on_every_step_is_still_reported():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    with torch.no_grad():
        model[0].bias[0] = float("nan")  # every output is NaN: GradScaler skips every step and never recovers
    with pytest.raises(nbdebug.NonFiniteError, match="forward"), nbdebug.nan_sentinel(model):
        _scaled_loop(model, lambda out, y: ((out - y) ** 2).sum(), 40, 2.0 ** 16)
