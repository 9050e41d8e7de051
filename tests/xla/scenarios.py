"""Tiny real training loops on torch_xla (CPU PJRT), each with one real problem or none.

Each scenario returns nothing; it runs ``STEPS`` training steps on the XLA device.  Used by the integration
tests (``tests/xla``) and by ``python tests/xla/scenarios.py OUTDIR`` which saves the real reports and debug
logs under ``tests/data/xla``.  Kept tiny: every new graph costs a compile of ~0.1-1 s on CPU.
"""

from __future__ import annotations

import torch

STEPS = 6


def _setup(hidden: int):
    """A fresh model whose hidden width is unique to the scenario: torch_xla's compilation cache lives as long as
    the process, so scenarios sharing graph shapes would hit each other's cache."""
    import torch_xla

    torch.manual_seed(0)
    dev = torch_xla.device()
    model = torch.nn.Sequential(torch.nn.Linear(8, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return torch_xla, dev, model, opt


def _train_step(model, opt, x, y):
    loss = torch.nn.functional.mse_loss(model(x).mean(dim=1), y)  # x: (B, T, 8) -> (B, T, 1) -> (B, 1)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


def healthy():
    txla, dev, model, opt = _setup(10)
    for _ in range(STEPS):
        x, y = torch.randn(4, 6, 8), torch.randn(4, 1)
        _train_step(model, opt, x.to(dev), y.to(dev))
        txla.sync()


def lr_warmup_from_zero():
    txla, dev, model, opt = _setup(11)
    for step in range(STEPS):
        for group in opt.param_groups:
            group["lr"] = 0.05 * step / STEPS  # 0.0 on the first step: a special scalar, baked in once
        x, y = torch.randn(4, 6, 8), torch.randn(4, 1)
        _train_step(model, opt, x.to(dev), y.to(dev))
        txla.sync()


def bucketed_padding():
    txla, dev, model, opt = _setup(12)
    lengths = [3, 7, 5, 12, 2, 9, 11, 4]
    for n in lengths:
        bucket = 8 if n <= 8 else 16
        x = torch.zeros(4, bucket, 8)
        x[:, :n] = torch.randn(4, n, 8)
        _train_step(model, opt, x.to(dev), torch.randn(4, 1).to(dev))
        txla.sync()


def variable_length():
    txla, dev, model, opt = _setup(13)
    for n in [3, 7, 5, 12, 2, 9]:  # no padding: a new sequence length every step
        _train_step(model, opt, torch.randn(4, n, 8).to(dev), torch.randn(4, 1).to(dev))
        txla.sync()


def short_last_batch():
    txla, dev, model, opt = _setup(14)
    data_x, data_y = torch.randn(22, 6, 8), torch.randn(22, 1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data_x, data_y), batch_size=4)
    for x, y in loader:  # 5 batches of 4, then one of 2
        _train_step(model, opt, x.to(dev), y.to(dev))
        txla.sync()


def item_and_print():
    txla, dev, model, opt = _setup(15)
    for step in range(STEPS):
        x, y = torch.randn(4, 6, 8), torch.randn(4, 1)
        loss = _train_step(model, opt, x.to(dev), y.to(dev))
        if loss.item() > 100:  # reads the loss before the sync: an extra execution and a transfer
            print("diverged")
        print(f"step {step} loss {loss}")
        txla.sync()


def boolean_mask():
    txla, dev, model, opt = _setup(16)
    for _ in range(STEPS):
        x, y = torch.randn(4, 6, 8).to(dev), torch.randn(4, 1).to(dev)
        out = model(x).mean(dim=1)  # (B, 1)
        err = out - y
        big = err[err.abs() > 0.5]  # data-dependent shape
        loss = (big**2).sum() / 4 + (err**2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        txla.sync()


def fft_fallback():
    txla, dev, model, opt = _setup(17)
    for _ in range(STEPS):
        x, y = torch.randn(4, 6, 8).to(dev), torch.randn(4, 1).to(dev)
        spec = torch.view_as_real(torch.fft.rfft(x, dim=1)).pow(2).sum(-1)  # (B, 4, 8): no XLA lowering on 2.9 -> CPU fallback
        loss = torch.nn.functional.mse_loss(model(spec).mean(dim=1), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        txla.sync()


def missing_sync():
    txla, dev, model, opt = _setup(18)
    for _ in range(STEPS):
        x, y = torch.randn(4, 6, 8), torch.randn(4, 1)
        loss = _train_step(model, opt, x.to(dev), y.to(dev))  # no torch_xla.sync(): one ever-growing graph
    loss.item()


def constant_hyperparameter():
    txla, dev, model, opt = _setup(19)
    for step in range(STEPS):
        gamma = 1.5 + 0.1 * step  # annealed Python float used as an exponent: baked into the graph
        x, y = torch.randn(4, 6, 8).to(dev), torch.randn(4, 1).to(dev)
        loss = (model(x).mean(dim=1) - y).abs().pow(gamma).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        txla.sync()


SCENARIOS = {
    f.__name__: f
    for f in (
        healthy,
        lr_warmup_from_zero,
        bucketed_padding,
        variable_length,
        short_last_batch,
        item_and_print,
        boolean_mask,
        fft_fallback,
        missing_sync,
        constant_hyperparameter,
    )
}

# scenario -> {source: {kind: severity}} of the warnings/errors expected (info findings are not problems).
# Sources: R = the saved metrics_report() text alone, RD = text + debug log, D = debug log alone,
# L = live watch() with debug capture, LN = live watch(debug=False) (per-step timeline from step closures).
_E, _W = "error", "warning"
EXPECTED: dict[str, dict[str, dict[str, str]]] = {
    "healthy": {"R": {}, "RD": {}, "D": {}, "L": {}, "LN": {}},
    "lr_warmup_from_zero": {"R": {}, "RD": {}, "D": {}, "L": {}, "LN": {}},
    "bucketed_padding": {"R": {}, "RD": {}, "D": {}, "L": {}, "LN": {}},
    "variable_length": {s: {"recompilation": _E} for s in ("R", "RD", "D", "L", "LN")},
    # the report alone cannot tell a late compile from a warm-up one (info only); any timeline can
    "short_last_batch": {"R": {}, **{s: {"recompilation": _W} for s in ("RD", "D", "L", "LN")}},
    "item_and_print": {s: {"host_sync": _W} for s in ("R", "RD", "D", "L", "LN")},
    "boolean_mask": {**{s: {"cpu_fallback": _E, "recompilation": _E} for s in ("R", "RD", "L", "LN")},
                     "D": {"cpu_fallback": _W, "recompilation": _E}},
    # the debug log alone has no call counts, so a fallback is a warning rather than an error
    "fft_fallback": {**{s: {"cpu_fallback": _E} for s in ("R", "RD", "L", "LN")}, "D": {"cpu_fallback": _W}},
    "missing_sync": {s: {"missing_sync": _W} for s in ("R", "RD", "D", "L", "LN")},
    "constant_hyperparameter": {s: {"recompilation": _E} for s in ("R", "RD", "D", "L", "LN")},
}
