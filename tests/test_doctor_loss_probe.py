"""The doctor sees what the loss was given wherever the loss is computed (``loss_fn``, a model's own loss, a
LightningModule's ``training_step``), tries fixes of the loss's inputs on a copy through the same probe, and
judges a batch that is learned but not memorised against what the trainable part can do (issue 24)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from nbdebug.core.doctor import doctor
from nbdebug.core.doctor._loss_probe import LossProbe

QUICK = dict(steps=150, reproducibility=False, progress=False)


def digits(n=64):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.data[:n], dtype=torch.float32) / 16.0
    return (x - 0.3) / 0.4, torch.tensor(d.target[:n])


def mlp(*tail):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10), *tail)


def loud(r):
    return [f for f in r.findings if f.severity != "info"]


def text_of(r):
    return " ".join(f.message + " " + " ".join(x.title + " " + x.code for x in f.fixes) for f in r.findings)


# -- the probe -------------------------------------------------------------------------------------------------
def test_the_probe_notes_each_torch_loss_with_its_tensors_in_module_and_functional_form():
    x = torch.randn(4, 3, requires_grad=True)
    y = torch.tensor([0, 1, 2, -100])
    with LossProbe() as probe, pytest.warns(UserWarning, match="broadcasting"):
        ce = nn.CrossEntropyLoss()(x.softmax(1), y)
        F.nll_loss(x.log_softmax(1), y.clamp_min(0), ignore_index=1)
        nn.MSELoss()(x[:, :1], x[:, 1])
        nn.BCEWithLogitsLoss()(x, torch.ones(4, 3))
    assert [c.name for c in probe.calls] == ["cross_entropy", "nll_loss", "mse_loss",
                                             "binary_cross_entropy_with_logits"]
    first = probe.calls[0]
    assert first.input.grad_fn.name() == "SoftmaxBackward0" and first.target is y and first.ignore_index == -100
    assert probe.calls[1].ignore_index == 1 and probe.calls[0].class_dim == 1
    assert probe.calls[2].input.shape == (4, 1) and probe.calls[2].target.shape == (4,)
    assert probe.the_loss(ce) == (first, True)
    assert probe.the_loss(ce + 1) == (first, False)
    assert not torch.overrides._get_current_function_mode_stack()


def test_the_probe_sees_a_loss_that_raises_and_comes_off_whatever_happens():
    x = torch.randn(4, 3)
    with pytest.raises(IndexError), LossProbe() as probe:
        F.cross_entropy(x, torch.tensor([0, 1, 2, 9]))
    assert probe.calls[0].result is None and int(probe.calls[0].target.max()) == 9
    assert not torch.overrides._get_current_function_mode_stack()


def test_a_rewrite_changes_what_the_loss_is_given():
    out, t = torch.randn(8, 1), torch.randn(8)

    def matched(call, x):
        return x.reshape(call.target.shape)

    with LossProbe(rewrite=matched) as probe:
        got = F.mse_loss(out, t)
    assert torch.allclose(got, ((out.squeeze(1) - t) ** 2).mean())
    assert probe.calls[0].input.shape == (8, 1)  # what the user's code gave, not the rewrite


# -- every path to the loss ------------------------------------------------------------------------------------
def _lit(model, step):
    lightning = pytest.importorskip("lightning.pytorch")

    class Lit(lightning.LightningModule):  # Lightning's template: no forward of its own
        def __init__(self):
            super().__init__()
            self.model = model

        def training_step(self, batch, batch_idx):
            return step(self.model, batch)

        def configure_optimizers(self):
            return torch.optim.Adam(self.model.parameters(), lr=1e-3)

    return Lit()


def test_a_softmax_seen_only_through_training_step_is_named_with_its_experiment():
    x, y = digits()
    lit = _lit(mlp(nn.Softmax(dim=1)), lambda m, b: F.cross_entropy(m(b[0]), b[1]))
    r = doctor(lit, (x, y), **QUICK)
    top = loud(r)[0]
    assert top.kind == "probabilities_to_loss", r
    assert "Softmax" in top.where[0] and "F.cross_entropy" in top.message
    assert top.fixes[0].title.startswith("remove the final Softmax")
    assert "Tried on a copy" in top.message and top.evidence["restores"] is True
    assert "follows from the finding above" in r.finding("cannot_overfit").message
    assert dict(r.checks)["output vs loss"] == "softmax probabilities into F.cross_entropy"


def test_a_loss_the_model_computes_itself_is_seen():
    class OwnLoss(nn.Module):  # a Hugging Face-style model: model(**batch) returns its loss and logits
        def __init__(self):
            super().__init__()
            self.net = mlp(nn.Softmax(dim=-1))

        def forward(self, pixels, labels):
            probs = self.net(pixels)
            return {"loss": F.cross_entropy(probs.view(-1, 10), labels.view(-1)), "logits": probs}

    x, y = digits()
    r = doctor(OwnLoss(), {"pixels": x, "labels": y}, **QUICK)
    assert loud(r)[0].kind == "probabilities_to_loss", r
    assert "net.3" in loud(r)[0].where[0]


def test_a_broadcasting_loss_inside_training_step_is_named_and_its_fix_measured():
    x, y = digits()
    yr = (y.float() - 4.5) / 3  # a regression target of shape (N,)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 1))
    lit = _lit(net, lambda m, b: F.mse_loss(m(b[0]), b[1]))  # (N, 1) against (N,)
    r = doctor(lit, (x, yr), **QUICK)
    top = loud(r)[0]
    assert top.kind == "loss_broadcast" and "(64, 1)" in top.message and "(64,)" in top.message, r
    assert top.evidence["restores"] is True and "reshaped to the targets' shape" in top.evidence["tried"]


def test_labels_are_checked_against_the_classes_the_loss_reads():
    x, y = digits()
    lit = _lit(nn.Sequential(nn.Linear(64, 8)), lambda m, b: F.cross_entropy(m(b[0]), b[1]))
    r = doctor(lit, (x, y), **QUICK)
    f = r.finding("label_out_of_range")
    assert "outside 0..7" in f.message and dict(r.checks)["labels"] == "out of range"


def test_nll_on_raw_scores_gets_its_log_softmax_tried_on_a_copy():
    x, y = digits()
    r = doctor(mlp(), (x, y), F.nll_loss, **QUICK)
    f = loud(r)[0]
    assert f.kind == "loss_below_minimum", r
    assert f.evidence["tried"] == "log_softmax applied to the scores before NLLLoss"
    assert f.evidence["restores"] is True and "fitted" in f.evidence["after"]


# -- learned, not memorised ------------------------------------------------------------------------------------
def _frozen_features():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 8), nn.ReLU(), nn.Linear(8, 10))  # 8 frozen features cannot separate 64 digits
    for p in m[0].parameters():
        p.requires_grad_(False)
    return m


def test_a_head_on_features_frozen_on_purpose_that_learns_is_no_fault():
    x, y = digits()
    m = _frozen_features()
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m[2].parameters(), lr=3e-3), frozen="0", **QUICK)
    assert not loud(r), r
    f = r.finding("cannot_overfit")
    assert f.severity == "info" and "frozen as you declared" in f.message and "label frequencies" in f.message
    assert "raise the learning rate" not in text_of(r)
    # the same freeze not declared is a warning, and a learning rate that moves nothing is still an error
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m[2].parameters(), lr=3e-3), **QUICK)
    assert loud(r)[0].kind == "frozen_parameters"
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m[2].parameters(), lr=1e-8), frozen="0", **QUICK)
    assert loud(r)[0].kind == "cannot_overfit" and loud(r)[0].severity == "error"


def test_a_slower_lr_that_learns_gets_a_measured_note_not_a_warning():
    x, y = digits()
    m = mlp()
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-4), **QUICK)
    assert not loud(r), r
    f = r.finding("cannot_overfit")
    assert f.severity == "info" and "at your lr=0.0001 the loss moves" in f.message
    assert f.fixes[0].title.startswith("only if your training is slow too: lr=0.001 instead of 0.0001")
    assert "raise the learning rate" not in text_of(r)
    # an lr far below what Adam trains with, at which the loss barely learns, gets the measured lr as a fault
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-6), **QUICK)
    assert loud(r) and loud(r)[0].kind == "cannot_overfit", r
    assert loud(r)[0].fixes[0].title.startswith("raise the learning rate (lr=0.001 instead of 1e-06")


def test_a_transformer_fine_tune_at_its_usual_lr_gets_no_warning():
    pytest.importorskip("transformers")
    from transformers import BertConfig, BertForSequenceClassification

    cfg = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=32, num_labels=2)
    torch.manual_seed(0)
    m = BertForSequenceClassification(cfg)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 50, (16, 16), generator=g)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": (ids == 7).any(dim=1).long()}
    opt = torch.optim.AdamW(m.parameters(), lr=2e-5)  # run_glue's range: too slow to memorise 16 sequences here
    r = doctor(m, batch, None, opt, **QUICK)
    assert not loud(r), r
    assert "raise the learning rate" not in text_of(r)


def test_shapes_a_loss_refuses_are_a_finding_not_torchs_error():
    from sklearn.datasets import load_breast_cancer

    d = load_breast_cancer()
    x = torch.tensor(d.data[:64], dtype=torch.float32)
    x = (x - x.mean(0)) / x.std(0)
    y = torch.tensor(d.target[:64], dtype=torch.float32)  # (N,) against the model's (N, 1)
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(30, 16), nn.ReLU(), nn.Linear(16, 1))
    r = doctor(m, (x, y), nn.BCEWithLogitsLoss(), **QUICK)
    f = loud(r)[0]
    assert f.kind == "loss_broadcast" and "refuses them" in f.message and "(64, 1)" in f.message, r
    assert dict(r.checks)["first step"] == "the loss refused the shapes of its inputs"


def test_a_lightning_warm_up_schedule_trains_the_copy_at_the_lr_set_not_at_zero():
    lightning = pytest.importorskip("lightning.pytorch")
    x, y = digits()

    class Lit(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = mlp()

        def training_step(self, batch, batch_idx):
            return F.cross_entropy(self.net(batch[0]), batch[1])

        def configure_optimizers(self):  # a linear warm-up from 0, as transformers' schedules do
            opt = torch.optim.AdamW(self.parameters(), lr=1e-3, weight_decay=0.01)
            warm = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, step / 100))
            return [opt], [{"scheduler": warm, "interval": "step"}]

    r = doctor(Lit(), (x, y), **QUICK)
    assert not loud(r), r
    assert r.losses[-1] < 0.1 * r.losses[0]


def test_a_lightning_optimizer_over_the_head_only_is_found():
    x, y = digits()
    lightning = pytest.importorskip("lightning.pytorch")

    class Lit(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = mlp()

        def training_step(self, batch, batch_idx):
            return F.cross_entropy(self.model(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.Adam(self.model[2].parameters(), lr=1e-3, weight_decay=1e-4)

    lit = Lit()
    r = doctor(lit, (x, y), **QUICK)
    top = loud(r)[0]
    assert top.kind == "optimizer_coverage" and "2 of 4 trainable parameter tensors" in top.message, r
    assert dict(r.checks)["learning rate"] == "0.001" and "weight decay" in dict(r.checks)
    assert all(p.grad is None for p in lit.parameters())  # its optimizer was built on a copy


def test_probabilities_into_nll_or_bce_with_logits_get_the_right_first_fix_and_a_measured_one():
    x, y = digits()
    r = doctor(mlp(nn.Softmax(dim=1)), (x, y), F.nll_loss, **QUICK)
    top = loud(r)[0]
    assert top.kind == "probabilities_to_loss" and top.fixes[0].title.startswith("give NLLLoss log-probabilities")
    assert top.evidence["restores"] is True, r
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 1), nn.Sigmoid())
    r = doctor(m, (x, (y % 2).float().unsqueeze(1)), nn.BCEWithLogitsLoss(), **QUICK)
    top = loud(r)[0]
    assert top.kind == "probabilities_to_loss" and "sigmoid" in top.message and top.evidence["restores"] is True
