"""GradMonitor: exact norms, batched host copies, optimizer/scaler/accumulation/DDP/compile, spikes and trends."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.optimizer import _global_optimizer_pre_hooks

import nbdebug
from nbdebug.core._findings import Finding, Severity
from nbdebug.core.training._dynamics import analyze_loss
from nbdebug.core.training.grads import GradHistory, GradMonitor
from nbdebug.errors import InvalidArgumentError


def mlp(c=4):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, c))


def batch(n=32, c=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 10, generator=g), torch.randint(0, c, (n,), generator=g)


def train(model, opt, steps, mon=None, x=None, y=None, scale_at=None):
    if x is None:
        x, y = batch()
    for i in range(steps):
        loss = F.cross_entropy(model(x), y)
        if scale_at is not None and i == scale_at:
            loss = loss * 1e4
        opt.zero_grad()
        loss.backward()
        if mon is not None:
            mon.log_loss(loss)
        opt.step()


def test_norms_match_reference_and_global_matches_clip_grad_norm():
    m = mlp()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    ref = []
    with GradMonitor(m, flush_every=4) as mon:
        x, y = batch()
        for _ in range(9):
            opt.zero_grad()
            F.cross_entropy(m(x), y).backward()
            ref.append([p.grad.norm().item() for p in m.parameters()])
            total = nn.utils.clip_grad_norm_(m.parameters(), float("inf")).item()
            opt.step()
    h = mon.history
    assert h.steps == tuple(range(9))
    assert h.names == ("0.weight", "0.bias", "2.weight", "2.bias")
    np.testing.assert_allclose(h.norms, np.array(ref), rtol=1e-5)
    assert h.global_norms[-1] == pytest.approx(total, rel=1e-5)
    assert h.modules == ("0", "2")
    np.testing.assert_allclose(h.module_norms[:, 0], np.hypot(h.norms[:, 0], h.norms[:, 1]), rtol=1e-6)


def test_rows_stay_on_device_until_a_batched_flush():
    m = mlp()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    mon = GradMonitor(m, flush_every=5).attach()
    try:
        train(m, opt, 4)
        assert len(mon._pending.rows) == 4 and not mon._h_rows  # nothing copied to the host yet
        assert all(isinstance(r, torch.Tensor) and r.shape == (4,) for r in mon._pending.rows)
        train(m, opt, 1)
        assert not mon._pending.rows and len(mon._h_rows) == 5  # one batched copy
    finally:
        mon.detach()


def test_every_n_and_hooks_come_off():
    before = len(_global_optimizer_pre_hooks)
    m = mlp()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with GradMonitor(m, every=3) as mon:
        assert len(_global_optimizer_pre_hooks) == before + 1
        train(m, opt, 10)
    assert len(_global_optimizer_pre_hooks) == before
    assert mon.history.steps == (0, 3, 6, 9)
    assert mon.steps_seen == 10
    train(m, opt, 2)  # detached: nothing more recorded
    assert mon.steps_seen == 10


def test_other_optimizers_are_ignored():
    m, other = mlp(), nn.Linear(3, 3)
    opt, opt2 = torch.optim.SGD(m.parameters(), lr=0.1), torch.optim.SGD(other.parameters(), lr=0.1)
    with GradMonitor(m) as mon:
        train(m, opt, 2)
        other(torch.randn(2, 3)).sum().backward()
        opt2.step()
    assert mon.history.steps == (0, 1)


def test_gradient_accumulation_records_once_per_optimizer_step():
    m = mlp()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x, y = batch(64)
    with GradMonitor(m) as mon:
        for _ in range(3):
            opt.zero_grad()
            for k in range(4):
                (F.cross_entropy(m(x[k * 16 : (k + 1) * 16]), y[k * 16 : (k + 1) * 16]) / 4).backward()
            ref = [p.grad.norm().item() for p in m.parameters()]
            opt.step()
    h = mon.history
    assert h.steps == (0, 1, 2)
    np.testing.assert_allclose(h.norms[-1], ref, rtol=1e-5)


def test_grad_scaler_norms_are_unscaled_and_skipped_steps_are_noticed():
    m = mlp()
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    x, y = batch()
    refs = []
    with GradMonitor(m, scaler=scaler) as mon:
        for i in range(6):
            opt.zero_grad()
            loss = F.cross_entropy(m(x), y)
            if i == 3:
                loss = loss * float("inf")  # overflow: the scaler skips this step
            scaler.scale(loss).backward()
            ref_m = m
            scaler.step(opt)
            refs.append([p.grad.norm().item() for p in ref_m.parameters()])  # unscaled by scaler.step
            scaler.update()
    h = mon.history
    assert h.skipped_steps == (3,)
    assert h.steps == tuple(range(6))
    np.testing.assert_allclose(h.norms[0], refs[0], rtol=1e-5)
    assert h.global_norms[0] < 100  # not multiplied by the 1024 scale
    assert h.nonfinite and h.nonfinite[0][0] == 3
    assert {"skipped_steps", "nonfinite_gradient"} <= {f.kind for f in h.findings}
    assert "step" not in vars(scaler)  # the wrapper is gone


def test_compiled_model_is_unwrapped():
    m = mlp()
    compiled = torch.compile(m, backend="eager")
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with GradMonitor(compiled) as mon:
        train(compiled, opt, 2)
    assert mon.history.names[0] == "0.weight" and mon.history.steps == (0, 1)



DDP_PROBE = """
import json, torch, torch.nn as nn, torch.nn.functional as F, torch.distributed as dist
from nbdebug.core.training.grads import GradMonitor
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
torch.manual_seed(0)
m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
ddp = nn.parallel.DistributedDataParallel(m)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
with GradMonitor(ddp) as mon:
    for _ in range(3):
        loss = F.cross_entropy(ddp(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
print(json.dumps({"names": list(mon.history.names), "steps": list(mon.history.steps)}), flush=True)
import os
os._exit(0)  # skip gloo's teardown: it is not what this test is about
"""


def test_ddp_model_is_unwrapped():
    # in its own process: tearing down gloo's threads inside the test process can block forever
    import json
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    out = subprocess.run([sys.executable, "-c", DDP_PROBE], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO)
    first = next(line for line in out.stdout.splitlines() if line.startswith("{"))
    row = json.loads(first)
    assert row["names"][0] == "0.weight" and row["steps"] == [0, 1, 2]


def test_spike_is_flagged_with_its_parameter():
    m = mlp()
    opt = torch.optim.SGD(m.parameters(), lr=1e-6)
    with GradMonitor(m, spike_threshold=50) as mon:
        train(m, opt, 30, mon=mon, scale_at=20)
    h = mon.history
    assert h.spikes and all(s.step == 20 for s in h.spikes)
    assert {s.name for s in h.spikes} >= {"2.weight", "(global)"}
    assert min(s.score for s in h.spikes) > 50
    assert "gradient_spike" in {f.kind for f in h.findings}
    with GradMonitor(m, spike_threshold=1e6) as quiet:
        train(m, opt, 30, scale_at=20)
    assert not quiet.history.spikes


def test_nan_gradients_are_named():
    m = mlp()
    opt = torch.optim.SGD(m.parameters(), lr=0.0)
    x, y = batch()
    with GradMonitor(m) as mon:
        for i in range(3):  # the NaN reaches the parameters at the last step only
            opt.zero_grad()
            F.cross_entropy(m(x), y).backward()
            if i == 2:
                m[2].bias.grad[0] = float("nan")
            opt.step()
    h = mon.history
    assert h.nonfinite == ((2, ("2.bias",)),)
    f = next(f for f in h.findings if f.kind == "nonfinite_gradient")
    assert f.where == ("2.bias",)


def test_exploding_and_vanishing_trends():
    torch.manual_seed(0)
    m = nn.Linear(10, 1)
    opt = torch.optim.SGD(m.parameters(), lr=0.2)  # far above 2 / largest curvature: divergence
    x = torch.randn(64, 10) * 3
    y = torch.randn(64, 1)
    with GradMonitor(m) as mon:
        for _ in range(30):
            opt.zero_grad()
            F.mse_loss(m(x), y).backward()
            opt.step()
    kinds = {f.kind for f in mon.history.findings}
    assert kinds & {"exploding_gradients", "nonfinite_gradient"}, mon.history

    torch.manual_seed(0)
    layers = [nn.Linear(10, 16), nn.Sigmoid()]
    for _ in range(14):
        layers += [nn.Linear(16, 16), nn.Sigmoid()]
    deep = nn.Sequential(*layers, nn.Linear(16, 4))
    opt = torch.optim.SGD(deep.parameters(), lr=0.1)
    with GradMonitor(deep) as mon:
        train(deep, opt, 10)
    f = next(f for f in mon.history.findings if f.kind == "vanishing_gradients")
    assert f.where == ("0",)

    m = mlp()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with GradMonitor(m) as mon:
        train(m, opt, 30)
    assert not {"exploding_gradients", "vanishing_gradients"} & {f.kind for f in mon.history.findings}


def test_no_gradient_and_manual_steps():
    class Partly(nn.Module):
        def __init__(self):
            super().__init__()
            self.used, self.unused = nn.Linear(10, 4), nn.Linear(10, 4)

        def forward(self, x):
            return self.used(x)

    m = Partly()
    before = len(_global_optimizer_pre_hooks)
    with GradMonitor(m) as mon:
        x, y = batch()
        for _ in range(3):
            m.zero_grad()
            F.cross_entropy(m(x), y).backward()
            mon.step()  # manual mode: no optimizer at all
            with torch.no_grad():
                for p in m.parameters():
                    if p.grad is not None:
                        p -= 0.1 * p.grad
        assert len(_global_optimizer_pre_hooks) == before  # manual mode took the optimizer hook off
    h = mon.history
    assert h.steps == (0, 1, 2)
    assert h.no_grad == ("unused.weight", "unused.bias")
    assert (h.norms[:, 2:] == 0).all()


LOSS_CASES = [
    # (name, losses, num_classes, expected kinds)
    ("falling", [2.0 * 0.97**i for i in range(100)], 10, set()),
    ("spike", [1.0 - 0.001 * i if i != 70 else 9.0 for i in range(100)], None, {"loss_spike"}),
    ("nan", [1.0] * 30 + [math.nan] * 5, None, {"loss_spike"}),
    # minibatch noise at a low loss (healthy late training): 3x the median is within its own variability
    ("minibatch-noise", list(0.05 * np.random.default_rng(0).exponential(1.0, 200)), None, {"loss_plateau"}),
    ("spike-on-noise", [v if i != 150 else 2.0 for i, v in
                        enumerate(0.05 * np.random.default_rng(0).exponential(1.0, 200))], None, {"loss_spike", "loss_plateau"}),
    ("plateau", [0.7 + 1e-4 * math.sin(i) for i in range(100)], None, {"loss_plateau"}),
    ("chance", [math.log(10) + 1e-3 * math.sin(i) for i in range(100)], 10, {"chance_plateau"}),
    ("plateau-not-chance", [0.5 + 1e-4 * math.sin(i) for i in range(100)], 10, {"loss_plateau"}),
]


@pytest.mark.parametrize("name,losses,classes,expected", LOSS_CASES, ids=[c[0] for c in LOSS_CASES])
def test_loss_analysis(name, losses, classes, expected):
    kinds = {f.kind for f in analyze_loss(range(len(losses)), losses, num_classes=classes)}
    assert kinds == expected


def test_loss_plateau_at_chance_from_a_model_that_learns_nothing():
    m = mlp(c=5)
    with torch.no_grad():
        m[2].weight.zero_()
        m[2].bias.zero_()
    opt = torch.optim.SGD(m.parameters(), lr=0.0)
    x, y = batch(c=5)
    with GradMonitor(m, num_classes=5) as mon:
        train(m, opt, 60, mon=mon, x=x, y=y)
    h = mon.history
    assert h.losses[0] == pytest.approx(math.log(5), rel=1e-5)
    assert "chance_plateau" in {f.kind for f in h.findings}


def test_history_exports_and_plots():
    m = mlp()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with GradMonitor(m, num_classes=4) as mon:
        train(m, opt, 12, mon=mon)
    h = mon.history
    assert isinstance(h, GradHistory)
    df = h.to_pandas()
    assert list(df.columns) == ["step", "name", "norm"] and len(df) == 12 * 4
    assert df[(df.step == 5) & (df.name == "2.bias")].norm.item() == pytest.approx(h.norms[5, 3])
    assert len(h.modules_to_pandas()) == 12 * 2
    from matplotlib.figure import Figure

    fig = h.plot()
    assert isinstance(fig, Figure) and len(fig.axes) >= 3  # norm, loss twin, heatmap (+ colorbar)
    assert fig.canvas.figure is fig and type(fig) is Figure  # built on Figure, not pyplot
    bundle = h._repr_mimebundle_()
    assert "<svg" in bundle["text/html"] and "GradMonitor" in bundle["text/plain"]
    assert h.to_dict()["names"] == list(h.names)
    assert "12 steps" in repr(h)


def test_live_listener_is_rate_bounded(monkeypatch):
    import nbdebug.core.training.grads as grads

    clock = iter(i * 0.05 for i in range(10_000))  # 50 ms per step
    monkeypatch.setattr(grads.time, "monotonic", lambda: next(clock))
    m = mlp()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    calls = []
    mon = GradMonitor(m, refresh_hz=1000)  # asks for 1000 Hz, gets at most 2 Hz
    mon.add_listener(lambda mm: calls.append(len(mm.history.steps)))
    with mon:
        train(m, opt, 100)
    # 100 steps x 50 ms (+ the clock reads inside _notify) = at most ~5 s of fake time: <= 2 Hz -> <= ~11 renders
    assert 2 <= len(calls) <= 12
    assert calls[-1] == 100  # the final refresh on detach shows everything


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(model="model"), "expected a torch.nn.Module, got str"),
        (dict(every=0), "every must be an int >= 1, got 0"),
        (dict(spike_threshold=1), "spike_threshold must be a number > 1, got 1"),
        (dict(num_classes=0), "num_classes must be an int >= 1 or None, got 0"),
        (dict(refresh_hz=0), "refresh_hz must be a number > 0, got 0"),
        (dict(live="yes"), "live must be a bool or a callable"),
        (dict(model=nn.ReLU()), "ReLU has no trainable parameters"),
    ],
)
def test_bad_arguments_raise_invalid_argument_error(kwargs, match):
    kwargs = {"model": mlp(), **kwargs}
    with pytest.raises(InvalidArgumentError, match=match) as info:
        GradMonitor(**kwargs)
    assert isinstance(info.value, (ValueError, TypeError))  # what callers caught before still catches it


def test_core_live_true_needs_a_view_and_a_callable_view_is_called_and_fed(monkeypatch):
    # one GradMonitor: the display layer registers its view (set_live_view); here none is registered
    monkeypatch.setattr(GradMonitor, "live_view", None)
    with pytest.raises(InvalidArgumentError, match="live=True needs a display"):
        GradMonitor(mlp(), live=True)
    seen = []

    class View:
        def __init__(self, monitor):
            self.monitor = monitor
            monitor.add_listener(self.update)

        def update(self, monitor):
            seen.append((monitor.attached, len(monitor.history.steps)))

    m = mlp()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with GradMonitor(m, live=View) as mon:
        assert isinstance(mon.view, View) and mon.view.monitor is mon
        train(m, opt, 3)
    assert seen and seen[-1] == (False, 3)  # the last call comes after detach, with everything recorded


def test_history_is_an_immutable_snapshot():
    import dataclasses

    m = mlp()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with GradMonitor(m) as mon:
        train(m, opt, 3)
        first = mon.history
        train(m, opt, 2)
    later = mon.history
    assert len(first.steps) == 3 and len(later.steps) == 5 and first.norms.shape == (3, 4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.findings = ()  # type: ignore[misc]
    for arr in (later.norms, later.global_norms, later.module_norms):
        with pytest.raises(ValueError, match="read-only"):
            arr[0] = 0.0
    assert mon.history is later  # nothing new recorded: the same snapshot


def test_no_optimizer_step_is_a_warning_not_a_clean_history():
    m = mlp()
    other = mlp()
    opt = torch.optim.SGD(other.parameters(), lr=0.1)  # steps another model's parameters
    with GradMonitor(m) as mon:
        train(other, opt, 3)
    h = mon.history
    f = next(f for f in h.findings if f.kind == "no_optimizer_steps")
    assert f.severity is Severity.WARNING and "optimizer.step()" in f.message and f.fixes
    assert 'class="nbdebug warning' in h._repr_mimebundle_()["text/html"]
    m2 = mlp()
    opt2 = torch.optim.SGD(m2.parameters(), lr=0.1)
    with GradMonitor(m2, every=50) as mon2:
        train(m2, opt2, 1)
    assert len(mon2.history.steps) == 1  # step 0 is always recorded, whatever every is
    assert "no_optimizer_steps" not in {f.kind for f in mon2.history.findings}


def test_findings_are_the_shared_finding_with_entry_titles():
    m = mlp()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with GradMonitor(m, num_classes=4) as mon:
        train(m, opt, 30, mon=mon, scale_at=25)
    h = mon.history
    assert h.findings and all(isinstance(f, Finding) and f.title for f in h.findings)
    text = str(h)
    assert "fix:" in text and "seeds/" not in text and "seed:" not in text


def test_core_grads_does_not_reach_the_ipython_layer():
    import subprocess
    import sys

    from tests.conftest import REPO

    code = (
        "import sys, torch, torch.nn as nn\n"
        "from nbdebug.core.training.grads import GradMonitor\n"
        "m = nn.Linear(3, 2); opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "with GradMonitor(m, live=lambda mon: None) as mon:\n"
        "    m(torch.randn(4, 3)).sum().backward(); opt.step()\n"
        "h = mon.history; str(h); h._repr_mimebundle_()\n"
        "print(sorted(k for k in sys.modules if k.startswith(('nbdebug.ipython', 'IPython', 'ipywidgets'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         env={**__import__("os").environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_manual_steps_with_a_scaler_report_unscaled_norms():
    m = mlp()
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    x, y = batch()
    with GradMonitor(m, scaler=scaler) as mon:
        for i in range(2):
            opt.zero_grad()
            scaler.scale(F.cross_entropy(m(x), y)).backward()
            if i == 1:
                scaler.unscale_(opt)
            mon.step()  # before unscale_ at step 0 (divided by the scale), after it at step 1
            ref = [p.grad.norm().item() / (2.0**12 if i == 0 else 1.0) for p in m.parameters()]
            np.testing.assert_allclose(mon.history.norms[-1], ref, rtol=1e-5)
            scaler.step(opt)
            scaler.update()
    assert mon.history.steps == (0, 1)


def test_long_curves_are_downsampled_in_svg_but_keep_nonfinite_marks():
    from nbdebug.render.training import svg_line

    ys = [1.0 + i % 7 for i in range(20_000)]
    ys[12_345] = float("nan")
    svg = svg_line(list(range(20_000)), [("x", ys, "#000")], max_points=500)
    points = svg.split('points="')[1].split('"')[0].split()
    assert 400 <= len(points) <= 1100
    assert 'stroke="#cf222e"' in svg  # the NaN is still marked


def test_sparse_gradients_are_measured_by_their_values():
    import torch
    from torch import nn

    from nbdebug.core.training.grads import GradMonitor

    norms = {}
    for sparse in (True, False):
        torch.manual_seed(0)
        emb = nn.Embedding(10, 4, sparse=sparse)
        opt = torch.optim.SGD(emb.parameters(), lr=0.1)
        with GradMonitor(emb) as mon:
            for _ in range(3):
                loss = (emb(torch.tensor([1, 2, 2])) ** 2).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()  # raised NotImplementedError ('linalg_vector_norm' on SparseCPU) before
        norms[sparse] = mon.history.global_norms
    assert len(norms[True]) == 3 and np.allclose(norms[True], norms[False], rtol=1e-5)


def _healthy_history(steps=30):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    with nbdebug.GradMonitor(model, num_classes=3) as mon:
        for _ in range(steps):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            mon.log_loss(loss)
            opt.step()
    return mon.history


def test_charts_read_well_axis_ends_differ_legend_and_rows_named():
    """26-4: the global-norm axis does not read 1e0 at both ends; no label is drawn inside the plot area; the
    Figure has a legend; heatmap rows are named by module and kind, not 0 / 2."""
    import re

    from nbdebug.render.training import grad_history_html, svg_line

    svg = svg_line(list(range(5)), [("global grad norm", [0.4, 0.6, 0.9, 1.3, 1.8], "#0969da")], log=True,
                   title="global gradient norm")
    ends = re.findall(r'text-anchor="end" class="nbd-muted">([^<]+)</text>', svg)
    assert len(set(ends[:2])) == 2 and "1e0" not in ends, ends
    # legend labels sit on the title line (y=11), above the plot area that starts at y=16
    svg2 = svg_line(list(range(5)), [("a", [1, 2, 3, 4, 5], "#000"), ("b", [2, 3, 4, 5, 6], "#111")],
                    title="loss", hline=(3.0, "chance"))
    for y in re.findall(r'<text x="[\d.]+" y="([\d.]+)" font-size="10" fill=', svg2):
        assert float(y) < 16
    h = _healthy_history()
    assert h.module_labels() == ("0 (Linear)", "2 (Linear)")
    assert "0 (Linear)" in grad_history_html(h)
    fig = h.plot()
    top, heat = fig.axes[0], fig.axes[1]
    legend = top.get_legend()
    assert legend is not None and {"global grad norm", "loss"} <= {t.get_text() for t in legend.get_texts()}
    assert [t.get_text() for t in heat.get_yticklabels()] == ["0 (Linear)", "2 (Linear)"]


def test_forgotten_zero_grad_is_named():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    with nbdebug.GradMonitor(model) as mon:
        for _ in range(40):
            loss = F.cross_entropy(model(x), y)
            loss.backward()  # no zero_grad(): gradients add up
            mon.log_loss(loss)
            opt.step()
    f = next(f for f in mon.history.findings if f.kind == "grads_accumulate")
    assert "zero_grad() is" in f.message and f.evidence["growth"] > 10
    assert "grads_accumulate" not in _healthy_history().kinds
