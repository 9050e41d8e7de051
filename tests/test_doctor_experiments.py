"""The doctor's verdicts are experiments (issue 24): each suspected cause is tried on a copy, the before/after
numbers are in the finding, a cause whose fix does not help is not called the cause, and the setup checks
(optimizer coverage, weight decay, the mode left, broadcasting loss shapes, BatchNorm on one sample, the lr the
user set, frozen on purpose, learning that is too easy, a NaN made in the loss code) are findings, never crashes."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import nbdebug
from nbdebug.core.doctor import doctor

QUICK = dict(steps=150, reproducibility=False, progress=False)


def digits(n=64):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.data[:n], dtype=torch.float32) / 16.0
    return (x - 0.3) / 0.4, torch.tensor(d.target[:n])


def mlp(dropout=0.0):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Dropout(dropout), nn.Linear(64, 10))


def text_of(r):
    return " ".join(f.message + " " + " ".join(x.title + " " + x.code for x in f.fixes) for f in r.findings)


def loud(r):
    return [f for f in r.findings if f.severity != "info"]


def test_tiny_lr_gets_the_lr_that_restores_learning_with_its_numbers():
    x, y = digits()
    m = mlp(0.2)
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-8), **QUICK)
    f = r.finding("cannot_overfit")
    assert f.fixes[0].title.startswith("raise the learning rate (lr=0.001 instead of 1e-08, measured on a copy)")
    assert f.fixes[0].code == "for g in opt.param_groups: g['lr'] = 0.001"
    assert f.evidence["tried"] == "lr=0.001 instead of 1e-08" and "fitted" in f.evidence["after"]
    assert "frozen layer" not in text_of(r)
    assert r.experiments and r.experiments[0].restores and r.experiments[0].cause == "lr_too_low"
    assert "experiments" in str(r) and "with lr=0.001 instead of 1e-08" in str(r)


def test_weight_decay_is_examined_not_the_lr():
    x, y = digits()
    m = mlp()
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-3, weight_decay=1.0),
               **QUICK)
    assert loud(r)[0].kind == "weight_decay_high", r
    assert "weight_decay=0 instead of 1" in loud(r)[0].message
    assert "follows from the finding above" in r.finding("cannot_overfit").message
    assert "raise the learning rate" not in text_of(r)


def test_broadcasting_mse_is_named_not_an_input_ignoring_model():
    x, y = digits()
    torch.manual_seed(0)
    reg = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 1))
    r = doctor(reg, (x, y.float()), nn.MSELoss(), torch.optim.Adam(reg.parameters(), lr=1e-3), **QUICK)
    f = loud(r)[0]
    assert f.kind == "loss_broadcast" and "(64, 1)" in f.message and "(64,)" in f.message
    assert "ignores_input" not in r.kinds
    assert "tried" in f.evidence


def test_healthy_sgd_and_warmup_schedulers_get_no_warning_and_no_raise_the_lr():
    x, y = digits()
    m = mlp()
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.SGD(m.parameters(), lr=0.1), **QUICK)
    assert not loud(r) and "raise the learning rate" not in text_of(r), r
    m = mlp()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=1000)  # lr is now its warm-up value
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), opt, **QUICK)
    assert not loud(r) and "raise the learning rate" not in text_of(r), r
    lr_check = dict(r.checks)["learning rate"]
    assert lr_check.startswith("0.003 as you set it (the scheduler's max_lr)"), lr_check
    m = mlp()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / 100))
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), opt, **QUICK)
    assert not loud(r) and dict(r.checks)["learning rate"].startswith("0.001 as you set it"), r


def test_the_mode_the_user_left_is_tested_and_said():
    x, y = digits()
    m = mlp(0.5)
    m.eval()
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-3), **QUICK)
    f = r.finding("eval_mode")
    assert f.severity == "warning" and "Dropout" in f.message and f.fixes[0].code == "model.train()"
    assert dict(r.checks)["mode"].startswith("eval") and "tried" in f.evidence
    assert not m.training  # the caller's model is still in eval mode


def test_optimizer_coverage_is_a_finding_never_a_crash():
    x, y = digits()
    m, other = mlp(), mlp()
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(other.parameters(), lr=1e-3), **QUICK)
    f = loud(r)[0]
    assert f.kind == "optimizer_coverage" and f.severity == "error" and "none of the model's" in f.message
    assert "follows from" in r.finding("cannot_overfit").message
    m = mlp()
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m[3].parameters(), lr=1e-3), **QUICK)
    f = r.finding("optimizer_coverage")
    assert "model.0 = Linear(in_features=64, out_features=64, bias=True)" in f.message
    assert f.evidence["restores"] is True


def test_batchnorm_on_one_sample_is_a_finding_not_torchs_error():
    x, y = digits()
    torch.manual_seed(0)
    bn1 = nn.Sequential(nn.Linear(64, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 10))
    r = doctor(bn1, (x[:1], y[:1]), nn.CrossEntropyLoss(), **QUICK)
    assert loud(r)[0].kind == "batchnorm_single_sample" and "model.1" in loud(r)[0].where[0]
    conv = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(144, 10))
    r = doctor(conv, (x[:1].reshape(1, 1, 8, 8), y[:1]), nn.CrossEntropyLoss(), **QUICK)
    assert loud(r)[0].kind == "batchnorm_single_sample"


def test_frozen_on_purpose_is_an_info():
    x, y = digits()
    m = mlp()
    for p in m[0].parameters():
        p.requires_grad_(False)
    opt = torch.optim.Adam(m[3].parameters(), lr=3e-3)
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), opt, frozen="0", **QUICK)
    f = r.finding("frozen_parameters")
    assert f.severity == "info" and "frozen on purpose" in f.message and not f.fixes
    assert not loud(r), r
    with pytest.raises(nbdebug.errors.InvalidArgumentError, match="frozen must be True"):
        doctor(m, (x, y), nn.CrossEntropyLoss(), opt, frozen=3)


def test_lightning_module_without_forward_trains_through_training_step():
    lightning = pytest.importorskip("lightning.pytorch")
    x, y = digits()

    class Lit(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = mlp()

        def training_step(self, batch, batch_idx):
            return F.cross_entropy(self.model(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.Adam(self.model.parameters(), lr=1e-3)

    r = doctor(Lit(), (x, y), **QUICK)
    assert not r.errors() and r.losses[-1] < 0.2 * r.losses[0], r
    assert "no forward of its own" in dict(r.checks)["forward"]


def test_nan_made_in_the_loss_code_names_the_op_and_line():
    x, y = digits()

    def loss(out, t):
        p = torch.softmax(out, dim=1).gather(1, t[:, None]) * 0
        return -torch.log(p).mean()  # log of 0

    r = doctor(mlp(), (x, y), loss, **QUICK)
    f = r.finding("nonfinite_forward")
    assert f.where[0] == "the loss code" and f.evidence["op"] == "torch.log"
    assert "return -torch.log(p).mean()" in f.evidence["line"] and "made by torch.log" in f.message


def test_learning_that_is_too_easy():
    x, y = digits()
    m = mlp()
    r = doctor(m, (x, y), nn.NLLLoss(), torch.optim.Adam(m.parameters(), lr=1e-3), **QUICK)
    assert loud(r)[0].kind == "loss_below_minimum" and "log_softmax" in loud(r)[0].fixes[0].title
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 30, (16, 12), generator=g)
    torch.manual_seed(0)
    lm = nn.Sequential(nn.Embedding(30, 16), nn.Linear(16, 30))
    r = doctor(lm, (ids, ids), lambda o, t: F.cross_entropy(o.transpose(1, 2), t), **QUICK)
    f = loud(r)[0]
    assert f.kind == "fits_too_easily" and "not shifted" in f.message and "shift" in f.fixes[0].title


def test_checks_always_list_labels_against_inputs_and_speak_in_words():
    x, y = digits()
    r = doctor(mlp(), (x, y), nn.CrossEntropyLoss(), **QUICK)
    checks = dict(r.checks)
    assert checks["labels against inputs (a second batch after fitting the first)"].startswith("skipped: one batch")
    dead = [v for k, v in r.checks if k.startswith("ReLU units silent")]
    assert dead and all("model.1 = ReLU()" in v for v in dead)  # not "1: 0%"
    m = nn.Sequential(mlp(), nn.Softmax(dim=1))
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), **QUICK)
    assert "consequence_of" not in str(r.to_dict()) and "consequence_of" not in str(r)


def test_adam_lr_10_is_lowered_and_nothing_claims_the_input_is_ignored():
    x, y = digits()
    m = mlp()
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=10), **QUICK)
    top = loud(r)[0]
    assert top.fixes[0].title.startswith("lower the learning rate (lr=0.001 instead of 10"), top
    assert "ignores_input" not in r.kinds and "raise the learning rate" not in text_of(r)


def test_the_batch_inspector_speaks_in_the_doctors_report_once_per_problem():
    # issue 28: the doctor's data section is the batch inspector; a problem the doctor names itself is not repeated
    x, y = digits()
    x, y = x.clone(), y.clone()
    x[1] = x[0]
    y[1] = (y[0] + 1) % 10  # the same input with two labels: no training can fit both
    r = doctor(mlp(), (x, y), nn.CrossEntropyLoss(), **QUICK)
    assert "conflicting_labels" in r.kinds, r.kinds
    assert dict(r.checks)["the batch inspector"].startswith("conflicting labels")
    clean = doctor(mlp(), digits(), nn.CrossEntropyLoss(), **QUICK)
    assert dict(clean.checks)["the batch inspector"] == "nothing found"
    kinds = [f.kind for f in clean.findings]
    assert len(kinds) == len(set(kinds)) and "unscaled_features" not in kinds


# -- a model that cannot be copied, and a time budget that slow steps cannot exceed (review 3) ------------------
class Tokenizer:
    """Something a model may hold that cannot be deep-copied (a tokenizer or a logger with a lock)."""

    def __init__(self):
        import threading

        self.lock = threading.Lock()


def test_a_model_that_cannot_be_copied_gets_one_error_naming_the_attribute():
    from nbdebug.errors import InvalidArgumentError

    x, y = digits(16)
    m = mlp()
    m[0].tokenizer = Tokenizer()
    with pytest.raises(InvalidArgumentError) as info:
        doctor(m, (x, y), nn.CrossEntropyLoss(), **QUICK)
    msg = str(info.value)
    assert "deep copy" in msg and "untouched" in msg
    assert "model.0.tokenizer.lock (a lock) cannot be copied" in msg and "cannot pickle" in msg
    assert "Move model.0.tokenizer out of the model" in msg and "(Tokenizer) a __deepcopy__" in msg
    assert isinstance(info.value.__cause__, TypeError)  # the copy's own error is chained, not hidden
    assert m[0].tokenizer.lock.acquire(blocking=False)  # the user's model is left as it was


class SleepyForward(nn.Module):
    """A model whose every forward takes 0.3 s: eight steps cannot fit in what a 2 s budget leaves."""

    def __init__(self):
        super().__init__()
        self.net = mlp()

    calls = 0

    def forward(self, x):
        import time

        SleepyForward.calls += 1
        time.sleep(0.3)
        return self.net(x)


def test_a_phase_that_cannot_fit_in_the_time_budget_is_skipped_and_says_so():
    import time

    x, y = digits(32)
    m = SleepyForward()
    SleepyForward.calls = 0
    t0 = time.perf_counter()
    r = doctor(m, (x, y), nn.CrossEntropyLoss(), time_budget=2, progress=False)
    wall = time.perf_counter() - t0
    checks = dict(r.checks)
    said = checks["overfit one batch"]
    assert said.startswith("skipped: 8 steps of 0.3") and "s left of time_budget" in said, r.checks
    assert r.losses == () and not r.experiments and not r.baseline_losses
    assert SleepyForward.calls <= 8  # the init checks' forwards, no training steps
    f = r.finding("overfit_out_of_time")
    assert f.severity == "info" and "time_budget=None" in f.fixes[0].code
    assert not any(f.severity == "error" for f in r.findings)
    assert wall < 4 * 2  # generous: the bound is the budget plus a step, not three times it
