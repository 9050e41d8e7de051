"""The doctor on learning that is too easy, and on what only looks like it: a reconstruction loss (the input holds
the target by design), token targets not shifted whichever way the loss flattens them, a loss counted over
padding, labels shuffled apart from their inputs behind a shuffling DataLoader, and the warnings of the doctor's
own runs on the copy."""

from __future__ import annotations

import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

from nbdebug.core.doctor import doctor

QUICK = dict(steps=150, reproducibility=False, progress=False)


def digits(n=64):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.data[:n], dtype=torch.float32) / 16.0
    return (x - 0.3) / 0.4, torch.tensor(d.target[:n])


def loud(r):
    return [f for f in r.findings if f.severity != "info"]


def autoencoder(lr, target=lambda x: x):
    import lightning.pytorch as pl

    class AE(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.encoder = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 3))
            self.decoder = nn.Sequential(nn.Linear(3, 64), nn.ReLU(), nn.Linear(64, 64))

        def training_step(self, batch, batch_idx):
            x, _ = batch  # the class labels ride along unused
            x = x.view(x.size(0), -1)
            return F.mse_loss(self.decoder(self.encoder(x)), target(x))

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=lr)

    return AE()


def test_a_reconstruction_loss_is_no_leak_and_its_low_lr_comes_first():
    x, y = digits()
    for target in (lambda v: v, lambda v: (v + 1) / 2):  # the input itself, or made from it element by element
        r = doctor(autoencoder(1e-3, target), (x, y), **QUICK)
        assert loud(r) == [], r
        assert dict(r.checks)["task"].startswith("reconstruction")
    r = doctor(autoencoder(1e-7), (x, y), **QUICK)
    assert "fits_too_easily" not in r.kinds
    assert loud(r)[0].kind == "cannot_overfit" and "raise the learning rate" in loud(r)[0].fixes[0].title


def test_tokens_not_shifted_are_found_when_the_loss_flattens_them():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 30, (20, 8), generator=g)  # (T, B), as pytorch/examples' word_language_model batches

    class RNNLM(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.emb, self.rnn, self.out = nn.Embedding(30, 16), nn.LSTM(16, 32), nn.Linear(32, 30)

        def forward(self, x):
            h, _ = self.rnn(self.emb(x))
            return F.log_softmax(self.out(h).view(-1, 30), dim=1)

    r = doctor(RNNLM(), (ids, ids.reshape(-1)), nn.NLLLoss(), **QUICK)
    f = loud(r)[0]
    assert f.kind == "fits_too_easily" and "not shifted" in f.message and "shift" in f.fixes[0].title


class TinyCausalLM(nn.Module):
    """A model that computes its own loss from ``labels``, shifted, as Hugging Face causal LMs do."""

    def __init__(self, vocab=128):
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.out = nn.Embedding(vocab, 32), nn.Linear(32, vocab)

    def forward(self, input_ids, attention_mask=None, labels=None):
        logits = self.out(torch.tanh(self.emb(input_ids)))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))
        return {"loss": loss, "logits": logits}


def padded_batch(mask_labels):
    g = torch.Generator().manual_seed(0)
    lengths = [30, 12, 20, 8, 25, 16, 10, 30]
    ids = torch.full((8, 30), 127)  # pad = eos = 127
    mask = torch.zeros(8, 30, dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(0, 120, (n,), generator=g)
        mask[i, :n] = 1
    labels = ids.clone()
    if mask_labels:
        labels[mask == 0] = -100
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def test_a_loss_over_padding_is_found_and_masking_it_is_the_first_fix():
    r = doctor(TinyCausalLM(), padded_batch(False), **QUICK)
    f = loud(r)[0]
    assert f.kind == "fits_too_easily" and "padding" in f.message, r
    assert "-100" in f.fixes[0].title and f.fixes[0].code == "labels[attention_mask == 0] = -100"
    assert f.evidence["padding_positions"] == int((padded_batch(False)["attention_mask"] == 0).sum())
    assert f.evidence["tried"] == "the padding masked out of the labels" and "Tried on a copy" in f.message
    r = doctor(TinyCausalLM(), padded_batch(True), **QUICK)
    assert "fits_too_easily" not in r.kinds
    # without a mask: a run of one id closing several rows
    b = padded_batch(False)
    del b["attention_mask"]
    r = doctor(TinyCausalLM(), b, **QUICK)
    assert loud(r) and loud(r)[0].kind == "fits_too_easily" and "padding" in loud(r)[0].message


def test_labels_shuffled_apart_are_found_behind_a_shuffling_dataloader():
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (torch.tensor(d.data[:256], dtype=torch.float32) / 16.0 - 0.3) / 0.4
    y = torch.tensor(d.target[:256])
    y = y[torch.randperm(256, generator=torch.Generator().manual_seed(1))]
    dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=64, shuffle=True,
                                     generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    r = doctor(m, dl, nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=3e-3), **QUICK)
    check = dict(r.checks)["labels against inputs (a second batch after fitting the first)"]
    assert "samples it did not train on" in check and "p = " in check
    assert loud(r)[0].kind == "labels_unrelated", r
    # the same data with its labels in place: the check runs and finds nothing
    y2 = torch.tensor(d.target[:256])
    dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y2), batch_size=64, shuffle=True,
                                     generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    r = doctor(m, dl, nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=3e-3), **QUICK)
    assert "labels_unrelated" not in r.kinds
    assert dict(r.checks)["labels against inputs (a second batch after fitting the first)"].startswith("accuracy")


def test_warnings_of_the_doctors_own_runs_are_not_shown_as_the_users():
    x, y = digits()
    torch.manual_seed(0)
    reg = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = doctor(reg, (x, y.float()), nn.MSELoss(), torch.optim.Adam(reg.parameters(), lr=1e-3), **QUICK)
    assert not [w for w in caught if "broadcasting" in str(w.message)]
    said = dict(r.checks)["warnings raised during the doctor's runs on the copy"]
    assert "broadcasting" in said and "not shown" in said
    assert loud(r)[0].kind == "loss_broadcast"


def held_out_case(case_id):
    """A case of the third held-out set (tests/data/doctor_cases3), built by its own cases.py."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parent / "data" / "doctor_cases3" / "cases.py"
    spec = importlib.util.spec_from_file_location("doctor_cases3_cases", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build(case_id)


def test_a_denoiser_is_an_image_to_image_task_not_a_loss_on_two_views():
    """fast_neural_style's TransformerNet as a denoiser: the input is the target plus noise (correlation about 0.7,
    no element-wise map of it), so the input holds the target by design: no too-easy finding."""
    case = held_out_case("fns-denoiser-healthy")
    r = doctor(case["model"], case["batch"], case["loss_fn"], optimizer=case["optimizer"], **QUICK)
    assert loud(r) == [], r
    assert dict(r.checks)["task"].startswith("reconstruction"), r.checks

def test_two_views_of_one_tensor_are_named_only_when_the_loss_gets_them():
    """A loss between two halves of the model's own output (shared storage) ignores the targets: the finding says
    so with the "two views" fix first."""
    x, y = digits()

    def halves(out, target):
        return F.mse_loss(out[:, :5], out[:, 5:].detach())

    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    r = doctor(m, (x, y.float()), halves, **QUICK)
    f = r.finding("fits_too_easily")
    assert "two views" in f.fixes[0].title, f


def test_another_threads_warnings_are_shown_while_the_doctor_runs():
    # the filters and the printer of warnings are the process's: the doctor keeps only its own thread's
    import threading

    stop = threading.Event()

    def noisy():
        while not stop.is_set():
            warnings.warn("from another thread", UserWarning, stacklevel=1)
            stop.wait(0.005)

    x, y = digits()
    torch.manual_seed(0)
    reg = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        other = threading.Thread(target=noisy)
        other.start()
        try:
            r = doctor(reg, (x, y.float()), nn.MSELoss(), torch.optim.Adam(reg.parameters(), lr=1e-3), **QUICK)
        finally:
            stop.set()
            other.join()
    assert any("another thread" in str(w.message) for w in caught)
    said = dict(r.checks)["warnings raised during the doctor's runs on the copy"]
    assert "another thread" not in said and "broadcasting" in said


def test_label_smoothing_is_not_a_batch_that_cannot_be_fitted():
    # with label_smoothing=0.1 over 10 classes no model goes under 0.50: that floor is not a stalled run
    x, y = digits()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    r = doctor(net, (x, y), nn.CrossEntropyLoss(label_smoothing=0.1), torch.optim.Adam(net.parameters(), lr=1e-3),
               **QUICK)
    assert not loud(r), [(f.kind, f.message) for f in loud(r)]


class SlowingMLP(nn.Module):
    """An MLP whose forward takes 1 ms longer at each call (over all its copies): the doctor's later runs, the
    labels control among them, are slower per step than the user's run, so they cannot fit in what it left."""

    calls = 0

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))

    def forward(self, x):
        import time

        SlowingMLP.calls += 1
        time.sleep(min(0.001 * SlowingMLP.calls, 0.2))
        return self.net(x)


def test_the_labels_control_stops_at_the_time_budget_and_gives_no_verdict():
    # review: the control copy (trained on labels that follow from the inputs) trained with no deadline and could
    # overrun time_budget; cut short, it gives no verdict instead of a finding it did not check
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (torch.tensor(d.data[:256], dtype=torch.float32) / 16.0 - 0.3) / 0.4
    y = torch.tensor(d.target[:256])[torch.randperm(256, generator=torch.Generator().manual_seed(1))]
    dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=64, shuffle=True,
                                     generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    SlowingMLP.calls = 0
    m = SlowingMLP()
    r = doctor(m, dl, nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=3e-3), steps=500, time_budget=3,
               reproducibility=False, progress=False)
    check = dict(r.checks)["labels against inputs (a second batch after fitting the first)"]
    assert check.startswith("no verdict (time)"), r.checks
    assert "labels_unrelated" not in r.kinds, r.findings
