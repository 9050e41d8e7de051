"""The doctor's eighth round: where an output stops depending on its input, a vanishing signal's fixes tried on
copies, and ReLU units silent at init judged by what they cost the training.  Setups of this file's own."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from nbdebug import doctor  # noqa: E402

QUICK = dict(progress=False, reproducibility=False)


def blobs(n=64, d=16, c=4, seed=5):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(c, d, generator=g) * 2
    y = torch.arange(n) % c
    return centers[y] + torch.randn(n, d, generator=g) * 0.5, y


def digits(n=64):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.data[:n], dtype=torch.float32)
    return ((x - x.mean()) / x.std()).view(-1, 1, 8, 8), torch.tensor(d.target[:n])


def loud(r):
    return [f for f in r.findings if f.severity != "info"]


def text(r):
    return " ".join(f.message + " " + " ".join(x.title + " " + x.code for x in f.fixes) for f in r.findings)


def untouched(model):
    before = {k: v.clone() for k, v in model.state_dict().items()}
    return lambda: all(torch.equal(before[k], v) for k, v in model.state_dict().items())


class Masked(nn.Module):
    """A feature mask kept as a buffer of zeros (meant to be filled later): the head sees zeros for every sample."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU())
        self.head = nn.Linear(32, 4)
        self.register_buffer("keep", torch.zeros(32))

    def forward(self, x):
        return self.head(self.body(x) * self.keep)


def test_a_softmax_over_one_output_unit_is_named_and_a_sigmoid_in_its_place_learns_the_batch():
    x, y = blobs()
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1), nn.Softmax(dim=1))
    same = untouched(m)
    r = doctor(m, (x, (y % 2).float().unsqueeze(1)), nn.BCELoss(), torch.optim.Adam(m.parameters(), lr=1e-3),
               steps=100, **QUICK)
    top = loud(r)[0]
    assert top.kind == "ignores_input" and "model.3 = Softmax(dim=1)" in top.message, r
    assert "dim=1, a dimension of size 1" in top.message and "sigmoid" in top.fix, top
    after = float(top.evidence["after"].split(" -> ")[1].split()[0])
    before = float(top.evidence["before"].split(" -> ")[1])
    assert after < 0.5 * before, top.evidence  # the experiment: a sigmoid learns, the softmax does not
    assert "detach" not in text(r) and "cached tensor" not in text(r), r
    assert same()


def test_a_mask_of_zeros_is_named_with_its_line_and_the_factor_made_one_learns():
    x, y = blobs()
    torch.manual_seed(0)
    m = Masked()
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-3), steps=100, **QUICK)
    top = loud(r)[0]
    assert top.kind == "ignores_input" and top.evidence["op"] == "Tensor.mul", top
    assert "self.body(x) * self.keep" in top.evidence["line"] and "factor is zero" in top.fix, top
    assert top.evidence["tried"] == "the zero factor made 1", top
    assert "detach" not in text(r), r


def test_an_output_that_never_reads_the_input_keeps_the_general_advice():
    class Cached(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 4)
            self.register_buffer("seen", torch.randn(1, 16))

        def forward(self, x):  # a sample cached once stands in for every input
            return self.fc(self.seen).expand(x.shape[0], -1)

    x, y = blobs()
    torch.manual_seed(0)
    r = doctor(Cached(), (x, y), nn.CrossEntropyLoss(), steps=40, **QUICK)
    f = next(f for f in r.findings if f.kind == "ignores_input")
    assert "op" not in f.evidence and "cached tensor" in f.fixes[0].title, f
    assert "reads the input" in dict(r.checks)["where the output stops depending on the input"]


def sigmoid_stack(depth=10, width=32):
    torch.manual_seed(0)
    layers = []
    for i in range(depth):
        layers += [nn.Linear(16 if i == 0 else width, width), nn.Sigmoid()]
    return nn.Sequential(*layers, nn.Linear(width, 4))


def test_a_deep_sigmoid_stack_is_told_to_replace_the_sigmoids_with_the_measured_effect():
    x, y = blobs()
    m = sigmoid_stack()
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.SGD(m.parameters(), lr=0.05), steps=150, **QUICK)
    top = loud(r)[0]
    assert top.kind == "vanishing_gradients", r
    assert top.fixes[0].title.startswith("replace the saturating activations (10 x Sigmoid) with ReLU"), top
    assert "measured on a copy" in top.fixes[0].title and top.evidence["restores"] is True, top
    assert "fewer layers" not in top.fix, top


def test_a_relu_stack_drawn_at_std_0_03_is_told_to_use_he_init_with_the_measured_effect():
    x, y = blobs()
    torch.manual_seed(0)
    layers = []
    for i in range(10):
        layers += [nn.Linear(16 if i == 0 else 32, 32), nn.ReLU()]
    m = nn.Sequential(*layers, nn.Linear(32, 4))
    for layer in m:
        if isinstance(layer, nn.Linear):
            nn.init.normal_(layer.weight, 0.0, 0.03)
            nn.init.zeros_(layer.bias)
    same = untouched(m)
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.SGD(m.parameters(), lr=0.05), steps=150, **QUICK)
    top = loud(r)[0]
    assert top.kind == "vanishing_gradients" and "He (kaiming)" in top.fix and "initialise" in top.fix, top
    assert top.evidence["restores"] is True and "(fitted)" in top.evidence["after"], top
    assert "kaiming_normal_" in top.fixes[0].code, top
    assert same()


def test_relus_that_one_batch_never_fires_in_a_healthy_conv_net_are_no_warning():
    # a squeeze layer of 8 channels over post-ReLU features: half of them silent on this batch at init, and the
    # net learns the batch all the same
    x, y = digits()
    torch.manual_seed(1)
    m = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 8, 1), nn.ReLU(),
                      nn.Conv2d(8, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 8, 1), nn.ReLU(),
                      nn.Conv2d(8, 64, 3, padding=1), nn.ReLU(), nn.Dropout(0.5), nn.Conv2d(64, 10, 1),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten())
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-3), steps=150, **QUICK)
    assert not loud(r), r
    f = next(f for f in r.findings if f.kind == "dead_activations")
    assert "learned all the same" in f.message, f


def test_relus_silenced_by_a_negative_bias_keep_their_warning_with_the_biases_at_zero_tried_on_a_copy():
    x, y = blobs()
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
    with torch.no_grad():
        m[0].bias[:60] = -30.0
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.SGD(m.parameters(), lr=0.01), steps=150, **QUICK)
    f = next(f for f in loud(r) if f.kind == "dead_activations")
    assert f.evidence["tried"] == "the biases of model.0 set to 0" and f.evidence["restores"] is True, f
    assert "bias" in f.fix, f
