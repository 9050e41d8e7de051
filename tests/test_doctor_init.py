"""The doctor on weights that start as one value, and on fixes that would send the user after what is right."""

from __future__ import annotations

import torch
from torch import nn

from nbdebug import doctor

QUICK = dict(reproducibility=False, progress=False, time_budget=None)  # every step: the verdicts do not depend on load


def blobs():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=g)
    y = (x[:, 0] + x[:, 1] > 0).long()
    return x, y


def test_weights_initialised_to_zero_are_named_first_with_the_init_as_the_fix():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 2))
    for layer in (m[0], m[2]):
        nn.init.zeros_(layer.weight)  # an initializer range of 0: no symmetry to break
    x, y = blobs()
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-3), steps=60, **QUICK)
    top = next(f for f in r.findings if f.severity != "info")
    assert top.kind == "zero_init" and top.severity == "error", r.findings
    assert "model.0" in top.where and "model.2" in top.where and "initiali" in top.fixes[0].title, top
    for f in r.findings:
        if f.kind in ("ignores_input", "no_gradient", "cannot_overfit"):
            assert f.severity != "error" and f.fixes[0].title.startswith("fix that first: initialise"), f
            assert "detached" not in " ".join(x.title for x in f.fixes), f


def test_a_zero_initialised_output_layer_that_learns_is_no_warning():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
    nn.init.zeros_(m[2].weight)  # a common choice for a head: the inputs differ, so its units do too
    x, y = blobs()
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-2), steps=150, **QUICK)
    f = next(f for f in r.findings if f.kind == "zero_init")
    assert f.severity == "info" and "model.2.weight = 0" in f.message, r.findings
    assert not [g for g in r.findings if g.severity != "info"], r.findings


def test_vanishing_gradients_in_a_relu_stack_are_not_told_to_replace_saturating_activations():
    from nbdebug.core.doctor._init_checks import _vanishing_fixes

    relu = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(4, 4), nn.ReLU())])
    tanh = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4))
    assert not any("saturating" in f.title for f in _vanishing_fixes(relu))
    assert any("saturating" in f.title for f in _vanishing_fixes(tanh))


def test_fixes_lose_the_learning_rate_once_a_lower_one_was_tried_in_vain():
    from nbdebug.core.doctor._verdicts import without_lr as _without_lr
    from nbdebug.core.knowledge import entry

    fixes = _without_lr(entry("dead_activations").fixes)
    assert fixes and not any("learning rate" in f.title for f in fixes)
    assert any(f.title == "use LeakyReLU/GELU" for f in fixes), fixes


def deep_stack(norm: bool) -> nn.Sequential:
    torch.manual_seed(0)
    layers: list[nn.Module] = [nn.Linear(8, 32), nn.ReLU()]
    for _ in range(15):
        layers += [nn.Linear(32, 32), *([nn.BatchNorm1d(32)] if norm else []), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(32, 2))


def test_a_signal_that_vanishes_through_sixteen_plain_layers_is_named_with_depth_and_normalisation_fixes():
    m = deep_stack(norm=False)
    x, y = blobs()
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9), steps=80,
               **QUICK)
    top = next(f for f in r.findings if f.severity != "info")
    assert top.kind == "vanishing_gradients" and "signal vanishes with depth" in top.message, r.findings
    fixes = " ".join(f.title for f in top.fixes)
    assert "fewer layers" in fixes and "BatchNorm" in fixes and "residual" in fixes and "kaiming" in fixes, fixes
    assert "saturating" not in fixes
    scale = list(top.evidence["activation_scale"].values())
    assert scale[-1] < scale[0] / 1000, scale  # measured by the hooks, orders of magnitude
    for f in r.findings:
        if f.kind == "ignores_input":
            assert f.severity != "error" and "fix that first" in f.fixes[0].title, f


def test_the_same_stack_with_batchnorm_keeps_its_signal():
    m = deep_stack(norm=True)
    x, y = blobs()
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9), steps=80,
               **QUICK)
    assert not any("activation_scale" in f.evidence for f in r.findings), r.findings
    assert "signal scale with depth (deepest/first; depth correlation)" in dict(r.checks)


class TokensFromZero(nn.Module):
    """A small ViT whose class token and position embedding start at zero (as ViTs do): added, not multiplied."""

    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, 32, 4, 4)
        self.cls = nn.Parameter(torch.zeros(1, 1, 32))
        self.pos = nn.Parameter(torch.zeros(1, 17, 32))
        layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, norm_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        h = self.patch(x).flatten(2).transpose(1, 2)
        h = torch.cat([self.cls.expand(len(x), -1, -1), h], 1) + self.pos
        return self.head(self.enc(h)[:, 0])


def test_a_start_a_measured_fix_learns_with_is_not_put_before_that_fix():
    # review: a copy with a higher lr fitted the batch, yet the constant start took over as the error and told the
    # user to re-initialise first; the measured fix stays first, and the start is an info that says why
    torch.manual_seed(0)
    m = TokensFromZero()
    x, y = torch.randn(32, 3, 16, 16), torch.randint(0, 10, (32,))
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.SGD(m.parameters(), lr=1e-4), **QUICK)
    top = next(f for f in r.findings if f.severity != "info")
    assert top.kind == "cannot_overfit" and "raise the learning rate" in top.fixes[0].title, r.findings
    # the class token and position embedding at zero are bare parameters' standard init: no finding at all (they were
    # an info here before this round), and the check says why
    assert not any(f.kind == "zero_init" for f in r.findings), r.findings
    assert "by design" in dict(r.checks)["weights initialised to a constant"], r.checks
    assert not any("fix that first" in fix.title for f in r.findings for fix in f.fixes)


class BareMLP(nn.Module):
    """A hand-written MLP whose weight matrices are bare parameters (``x @ W1``), at zero (the bug) or random."""

    def __init__(self, zeros: bool):
        super().__init__()
        make = torch.zeros if zeros else (lambda *shape: torch.randn(*shape) / shape[0] ** 0.5)
        self.W1, self.b1 = nn.Parameter(make(8, 32)), nn.Parameter(torch.zeros(32))
        self.W2, self.b2 = nn.Parameter(make(32, 3)), nn.Parameter(torch.zeros(3))

    def forward(self, x):
        return torch.relu(x @ self.W1 + self.b1) @ self.W2 + self.b2


def test_bare_weight_matrices_at_zero_that_multiply_the_input_are_zero_init_first():
    # review: a bare parameter not named "weight" was called "constant by design" (as a class token is), and the
    # top finding became ignores_input; a matrix the input is multiplied by is a weight, whatever its name
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 8, generator=g), torch.randint(0, 3, (64,), generator=g)
    torch.manual_seed(0)
    m = BareMLP(zeros=True)
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-2), steps=100, **QUICK)
    top = next(f for f in r.findings if f.severity != "info")
    assert top.kind == "zero_init" and "model.W1" in top.where and "model.W2" in top.where, r.findings
    assert "by design" not in dict(r.checks)["weights initialised to a constant"], r.checks
    torch.manual_seed(0)
    m = BareMLP(zeros=False)
    healthy = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-2), steps=100, **QUICK)
    assert not any(f.kind == "zero_init" for f in healthy.findings), healthy.findings
    assert dict(healthy.checks)["weights initialised to a constant"] == "none", healthy.checks


def test_relus_dead_at_init_come_before_the_output_that_ignores_the_input():
    # review: a first-layer bias of -100 silences every ReLU, so the output is the same for every sample; that
    # was reported first as "the forward does not use its input" (a detached or cached tensor)
    x, y = blobs()

    def run(bias):
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
        if bias is not None:
            with torch.no_grad():
                m[0].bias.fill_(bias)
        return doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-3), steps=60, **QUICK)

    r = run(-100.0)
    top = next(f for f in r.findings if f.severity != "info")
    assert top.kind == "dead_activations" and "bias" in top.fixes[0].title, r.findings
    for f in r.findings:
        if f.kind in ("ignores_input", "cannot_overfit"):
            assert f.severity != "error" and f.fixes[0].title.startswith("fix that first"), f
            assert "bias" in f.fixes[0].title and "detached" not in f.fixes[0].title, f
    healthy = run(None)
    assert not any(f.kind in ("dead_activations", "ignores_input") for f in healthy.findings), healthy.findings


def test_the_init_fix_names_the_detected_last_layer_not_a_placeholder():
    # review: the fix code said model.head.weight whatever the model's output layer is called
    x, y = blobs()
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 2))
    with torch.no_grad():
        for layer in (m[0], m[2]):
            layer.weight.normal_(0, 1.0)  # an initializer range of 1 typed for 0.02
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-3), steps=30, **QUICK)
    f = next(f for f in r.findings if f.kind == "initial_loss_off")
    codes = " ".join(x.code for x in f.fixes)
    assert "model[2].bias" in codes and "model.head" not in codes, f.fixes
