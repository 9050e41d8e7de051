"""The doctor's second eighth-round pass: a batch inspector's remark that does no harm to training stays a remark,
a contrastive loss's labels are not read as class indices, and weights kept in float16 that turn non-finite after
one step are tried in float32 on a copy.  Setups of this file's own."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from nbdebug import doctor  # noqa: E402

QUICK = dict(progress=False, reproducibility=False)


def blobs(n=64, d=16, c=4, seed=7):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(c, d, generator=g) * 2
    y = torch.arange(n) % c
    return centers[y] + torch.randn(n, d, generator=g) * 0.5, y


def loud(r):
    return [f for f in r.findings if f.severity != "info"]


def untouched(model):
    before = {k: v.clone() for k, v in model.state_dict().items()}
    return lambda: all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_rows_repeated_inside_one_batch_are_a_remark_not_a_warning_of_the_doctor():
    x, y = blobs(32)
    x, y = torch.cat([x, x]), torch.cat([y, y])  # every row twice: a model still learns the batch
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    same = untouched(m)
    r = doctor(m, (x, y), loss_fn=nn.CrossEntropyLoss(), optimizer=torch.optim.Adam(m.parameters(), lr=1e-2), **QUICK)
    assert not loud(r), [(f.kind, f.message) for f in loud(r)]
    dup = [f for f in r.findings if f.kind == "duplicate_rows"]
    assert dup and dup[0].severity == "info" and "compare_splits" in dup[0].message
    assert same()


def contrastive(features, labels, temperature=0.5):
    """A supervised contrastive loss: samples of one label pulled together, on L2-normalised features."""
    z = F.normalize(features, dim=1)
    sim = z @ z.T / temperature
    eye = torch.eye(len(z), dtype=torch.bool)
    sim = sim.masked_fill(eye, -1e9)
    pos = (labels[:, None] == labels[None, :]) & ~eye
    logp = sim - torch.logsumexp(sim, dim=1, keepdim=True)
    return -(logp * pos).sum(1).div(pos.sum(1).clamp(min=1)).mean()


def test_labels_beside_a_contrastive_loss_on_features_are_not_called_out_of_range():
    x, y = blobs(64, c=8)  # 8 labels, 4 feature dimensions: the labels index no output
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    r = doctor(m, (x, y), loss_fn=contrastive, optimizer=torch.optim.Adam(m.parameters(), lr=1e-2), **QUICK)
    assert "label_out_of_range" not in r.kinds
    assert any(name == "labels" and outcome.startswith("skipped") for name, outcome in r.checks)


def test_labels_past_the_classes_of_a_cross_entropy_are_still_out_of_range():
    x, y = blobs(64, c=8)
    m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    r = doctor(m, (x, y), loss_fn=nn.CrossEntropyLoss(), optimizer=torch.optim.Adam(m.parameters()), **QUICK)
    assert r.findings[0].kind == "label_out_of_range"


def test_weights_in_float16_that_turn_non_finite_after_one_adam_step_are_tried_in_float32():
    x, y = blobs(64)
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 64), nn.LayerNorm(64), nn.ReLU(), nn.Linear(64, 4)).half()
    same = untouched(m)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    r = doctor(m, (x.half(), y), loss_fn=nn.CrossEntropyLoss(), optimizer=opt, **QUICK)
    top = r.findings[0]
    assert top.kind == "nonfinite_forward" and "float32" in top.message, [(f.kind, f.message) for f in r.findings]
    assert top.evidence["dtype"] == "float16" and top.evidence["float32_loss_after"] < top.evidence["float32_loss_before"]
    assert "float32" in top.fixes[0].title
    assert "mixes_batch" not in r.kinds  # float16's rounding is not one sample reaching another
    assert same() and all(p.dtype == torch.float16 for p in m.parameters()) and not opt.state


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU())
        self.label_head = nn.Linear(32, 4)
        self.size_head = nn.Linear(32, 1)

    def forward(self, x):
        h = self.body(x)
        return torch.cat([self.label_head(h), self.size_head(h)], dim=1)


def test_a_head_whose_output_the_loss_never_reads_is_named_with_the_experiment():
    x, y = blobs(64)
    size = x.norm(dim=1, keepdim=True)
    target = torch.cat([y[:, None].float(), size], dim=1)
    torch.manual_seed(0)
    m = TwoHeads()

    def label_loss_only(out, t):  # the size term was left out
        return F.cross_entropy(out[:, :4], t[:, 0].long())

    r = doctor(m, (x, target), loss_fn=label_loss_only, optimizer=torch.optim.Adam(m.parameters(), lr=1e-2), **QUICK)
    top = loud(r)[0]
    assert top.kind == "no_gradient" and "size_head" in top.message and "size_head" in top.fixes[0].title
    assert "label_head" not in top.message and "detach" not in top.fixes[0].title


def test_a_layer_behind_dead_relus_is_not_called_unread():
    x, y = blobs(64)
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))
    with torch.no_grad():
        m[2].bias.fill_(-100.0)  # every unit after it is silent: its gradients are all 0, but the loss reads it
    r = doctor(m, (x, y), loss_fn=nn.CrossEntropyLoss(), optimizer=torch.optim.Adam(m.parameters(), lr=1e-2), **QUICK)
    assert not any(f.kind == "no_gradient" and "does not read" in f.message for f in r.findings)


def test_a_nan_that_the_batch_brings_gets_the_datas_fix_not_a_precision_or_guard_fix():
    x, y = blobs(64)
    x[5, 3] = float("nan")
    m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    r = doctor(m, (x, y), loss_fn=nn.CrossEntropyLoss(), optimizer=torch.optim.Adam(m.parameters()), **QUICK)
    forward = next(f for f in r.findings if f.kind == "nonfinite_forward")
    said = " ".join(x.title + " " + x.code for x in forward.fixes)
    assert "(input)" in forward.message and "data" in said
    assert not any(w in said for w in ("float16", "bfloat16", "clamp_min"))


def test_relus_silent_from_init_whose_bias_fix_learns_the_batch_do_not_get_the_learning_rate_fix():
    x, y = blobs(64)
    x = (x - x.mean(0)) / x.std(0)
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
    with torch.no_grad():
        m[0].bias.fill_(-10.0)  # silent before any update: no learning rate killed them
    same = untouched(m)
    r = doctor(m, (x, y), loss_fn=nn.CrossEntropyLoss(), optimizer=torch.optim.AdamW(m.parameters(), lr=1e-3), **QUICK)
    dead = next(f for f in r.findings if f.kind == "dead_activations")
    assert dead.severity != "info" and dead.evidence.get("restores")
    assert "bias" in dead.fixes[0].title and "bias.zero_()" in dead.fixes[0].code
    assert not any("learning rate" in x.title for x in dead.fixes)
    assert same()


class DetachedBody(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 8), nn.Tanh())
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(self.body(x).detach())  # the body never learns


def test_what_follows_from_a_named_cause_carries_the_causes_fix_not_its_own_general_advice():
    x, y = blobs(64, c=4)
    x = x + torch.randn(64, 16, generator=torch.Generator().manual_seed(3)) * 3  # a head on a random 8-d map underfits
    torch.manual_seed(0)
    m = DetachedBody()
    r = doctor(m, (x, y), loss_fn=nn.CrossEntropyLoss(), optimizer=torch.optim.SGD(m.parameters(), lr=0.05), **QUICK)
    assert loud(r)[0].kind == "no_gradient"
    follow = [f for f in r.findings if "follows from the finding above" in f.message]
    assert follow
    for f in follow:
        said = " ".join(x.title for x in f.fixes)
        assert "frozen layer" not in said and said.startswith("fix that first")


class GRUTagger(nn.Module):
    """A token tagger: Embedding, one GRU, a Linear over every position; log-probabilities for NLLLoss."""

    def __init__(self, vocab=16, tags=4, hidden=24):
        super().__init__()
        self.emb = nn.Embedding(vocab, 12)
        self.gru = nn.GRU(12, hidden, batch_first=True)
        self.out = nn.Linear(hidden, tags)

    def forward(self, ids):
        h, _ = self.gru(self.emb(ids))  # (B, T, H)
        return F.log_softmax(self.out(h), dim=-1).reshape(-1, self.out.out_features)


def tagged_tokens(n=24, length=10, vocab=16, tags=4):
    g = torch.Generator().manual_seed(11)
    ids = torch.randint(0, vocab, (n, length), generator=g)
    prev = torch.cat([torch.zeros(n, 1, dtype=torch.long), ids[:, :-1]], dim=1)
    return ids, ((ids + prev) % tags).reshape(-1)  # a tag that needs the word and its left neighbour


def test_a_recurrent_net_drawn_far_below_its_default_init_gets_the_default_init_measured_on_a_copy():
    ids, tags = tagged_tokens()
    torch.manual_seed(0)
    m = GRUTagger()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0.0, 1e-3)
    same = untouched(m)
    state = torch.random.get_rng_state()
    opt = torch.optim.SGD(m.parameters(), lr=0.2, momentum=0.9)
    r = doctor(m, (ids, tags), loss_fn=nn.NLLLoss(), optimizer=opt, **QUICK)
    top = loud(r)[0]
    assert top.kind == "vanishing_gradients", [(f.kind, f.message[:200]) for f in loud(r)]
    assert "reset_parameters" in top.fixes[0].title and "measured on a copy" in top.fixes[0].title
    assert "reset_parameters()" in top.fixes[0].code
    assert same() and torch.equal(state, torch.random.get_rng_state())


class NarrowGRU(GRUTagger):
    def __init__(self):
        super().__init__(hidden=1)  # one number carries the word and its left context for 4 tags


def test_a_recurrent_layer_narrower_than_the_classes_is_widened_on_a_copy_and_named():
    ids, tags = tagged_tokens()
    torch.manual_seed(0)
    m = NarrowGRU()
    same = untouched(m)
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    r = doctor(m, (ids, tags), loss_fn=nn.NLLLoss(), optimizer=opt, **QUICK)
    top = loud(r)[0]
    assert top.kind == "model_too_small" and "hidden_size=1" in top.message, [(f.kind, f.message[:200]) for f in loud(r)]
    assert "widen" in top.fixes[0].title and top.evidence["restores"]
    assert same() and not opt.state and m.gru.hidden_size == 1


class Scaled(nn.Module):
    """A classifier whose logits are multiplied up in the forward (a temperature the wrong way round)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU())
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.body(x)) * 500.0


def test_an_output_scaled_far_up_is_tried_at_unit_scale_on_a_copy_and_leads_with_that_measured_fix():
    x, y = blobs(64)
    torch.manual_seed(0)
    m = Scaled()
    same = untouched(m)
    r = doctor(m, (x, y), loss_fn=nn.CrossEntropyLoss(), optimizer=torch.optim.SGD(m.parameters(), lr=0.05), **QUICK)
    top = loud(r)[0]
    assert top.kind == "initial_loss_off", [(f.kind, f.message[:200]) for f in loud(r)]
    assert "output divided by" in top.message and "output scale" in top.fixes[0].title
    assert top.evidence["restores"]
    assert same()
