"""nbdebug.integrations inside real training loops: transformers.Trainer, Lightning Trainer.fit, accelerate."""

from __future__ import annotations

import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.optimizer import _global_optimizer_pre_hooks

import nbdebug
from nbdebug.errors import InvalidArgumentError, NonFiniteError
from nbdebug.integrations import (
    TrainerWatch,
    accelerate_watch,
    hf_callback,
    lightning_callback,
    watch_trainer,
)

transformers = pytest.importorskip("transformers", reason="transformers is in the dev dependency group")


def hook_free(model):
    return all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def tiny_bert():
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=32, num_labels=3)
    return transformers.BertForSequenceClassification(cfg)


def dataset(n=32):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 64, (n, 8), generator=g)
    return [{"input_ids": ids[i], "attention_mask": torch.ones(8, dtype=torch.long), "labels": int(ids[i, 0] % 3)}
            for i in range(n)]


def hf_trainer(model, tmp_path, steps=6, callbacks=()):
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=steps, per_device_train_batch_size=8,
                                          logging_steps=1, report_to="none", save_strategy="no", use_cpu=True,
                                          disable_tqdm=True, learning_rate=1e-3)
    return transformers.Trainer(model=model, args=args, train_dataset=dataset(), callbacks=list(callbacks))


def test_hf_trainer_callback_records_norms_and_the_loss(tmp_path):
    before = len(_global_optimizer_pre_hooks)
    model = tiny_bert()
    cb = hf_callback(nan_sentinel=True, live=False)
    trainer = hf_trainer(model, tmp_path, callbacks=[cb])
    trainer.train()
    h = cb.history
    logged = [r for r in trainer.state.log_history if "loss" in r]
    assert h.steps_seen == 6 and len(h.losses) == 6 and all(v == v for v in h.losses)
    assert h.losses == pytest.approx([r["loss"] for r in logged], rel=1e-6)
    # the norms the monitor recorded are the ones the Trainer logs (all below its clipping threshold of 1)
    assert list(h.global_norms) == pytest.approx([r["grad_norm"] for r in logged], rel=1e-3)
    assert "bert.encoder.layer.1.attention.self.query.weight" in h.names
    assert not [f for f in h.findings if f.severity in ("error", "warning")], h.findings  # a healthy tiny BERT
    assert len(_global_optimizer_pre_hooks) == before and hook_free(model)


def test_hf_watch_stops_at_the_first_nan_and_takes_its_hooks_off(tmp_path):
    before = len(_global_optimizer_pre_hooks)
    model = tiny_bert()
    with torch.no_grad():
        model.bert.encoder.layer[0].output.dense.bias[0] = float("nan")
    trainer = hf_trainer(model, tmp_path)
    with pytest.raises(NonFiniteError) as info:
        with watch_trainer(trainer, nan_sentinel=True, live=False):
            trainer.train()
    assert info.value.module == "bert.encoder.layer.0.output.dense" and info.value.step == 0
    assert len(_global_optimizer_pre_hooks) == before and hook_free(model)
    assert not any(type(c).__name__ == "NbdebugCallback" for c in trainer.callback_handler.callbacks)


def test_lightning_fit_with_the_callback(tmp_path):
    lightning = pytest.importorskip("lightning.pytorch")

    class Lit(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-2)

    x = torch.randn(40, 8)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x[:, :3].argmax(1)), batch_size=8)
    before = len(_global_optimizer_pre_hooks)
    lit = Lit()
    cb = lightning_callback(live=False, nan_sentinel=True)
    trainer = lightning.Trainer(max_epochs=2, callbacks=[cb], logger=False, enable_checkpointing=False,
                                enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
                                default_root_dir=str(tmp_path))
    trainer.fit(lit, loader)
    h = cb.history
    assert h.steps_seen == 10 and len(h.losses) == 10 and h.losses[-1] < h.losses[0]
    assert h.names == ("net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias")
    assert len(_global_optimizer_pre_hooks) == before and hook_free(lit)


def test_accelerate_loop_logs_the_loss_given_to_backward():
    accelerate = pytest.importorskip("accelerate")
    acc = accelerate.Accelerator(cpu=True)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = acc.prepare(model, opt)
    x = torch.randn(16, 8)
    y = x[:, :3].argmax(1)
    before = len(_global_optimizer_pre_hooks)
    with accelerate_watch(acc, model, live=False) as w:
        for _ in range(5):
            loss = F.cross_entropy(model(x), y)
            acc.backward(loss)
            opt.step()
            opt.zero_grad()
    h = w.history
    assert h.steps_seen == 5 and len(h.losses) == 5 and h.losses[-1] < h.losses[0]
    assert "backward" not in vars(acc)  # the wrapper is gone
    assert len(_global_optimizer_pre_hooks) == before


def test_bad_arguments_are_one_clear_error():
    with pytest.raises(InvalidArgumentError, match="both False"):
        TrainerWatch(grad_monitor=False, nan_sentinel=False)
    with pytest.raises(InvalidArgumentError, match="every must be an int >= 1, got 0"):
        hf_callback(every=0)
    with pytest.raises(InvalidArgumentError, match="expected a transformers.Trainer or a lightning Trainer, got str"):
        with watch_trainer("trainer"):
            pass
    with pytest.raises(InvalidArgumentError, match="expected an accelerate.Accelerator, got int"):
        with accelerate_watch(3, nn.Linear(2, 2)):
            pass


def test_importing_integrations_imports_no_framework():
    import subprocess

    code = ("import sys, nbdebug.integrations; "
            "print(sorted(m for m in ('transformers', 'lightning', 'accelerate', 'pytorch_lightning') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_magics_find_the_model_inside_a_trainer(ip, tmp_path):
    model = tiny_bert()
    ip.user_ns["trainer"] = hf_trainer(model, tmp_path, steps=3)
    ip.user_ns["other"] = nn.Linear(2, 2)  # two top-level modules: only the trainer names the right one
    ip.run_cell_magic("gradmonitor", "trainer --no-live -o hist", "trainer.train()")
    h = ip.user_ns["hist"]
    assert h.steps_seen == 3 and "classifier.weight" in h.names
    result = ip.run_cell_magic("nanhunt", "trainer -o err", "trainer.train()")
    assert result is ip.user_ns["err"] and result.error is None and result.steps == 3  # the clean run's report
    assert hook_free(model)


def test_live_panel_that_cannot_show_leaves_no_hook_behind():
    before = len(_global_optimizer_pre_hooks)

    def broken(monitor):
        raise ModuleNotFoundError("No module named 'ipywidgets'")

    mon = nbdebug.GradMonitor(nn.Linear(2, 2), live=broken)
    with pytest.raises(ModuleNotFoundError):
        mon.attach()
    assert len(_global_optimizer_pre_hooks) == before and not mon.attached


def test_gradmonitor_magic_needs_no_ipywidgets_and_leaves_no_hook(ip, monkeypatch):
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # `import ipywidgets` raises ImportError
    before = len(_global_optimizer_pre_hooks)
    torch.manual_seed(0)
    ip.user_ns.update(model=nn.Linear(4, 2), X=torch.randn(8, 4))
    ip.user_ns["opt"] = torch.optim.SGD(ip.user_ns["model"].parameters(), lr=0.1)
    ip.run_cell_magic("gradmonitor", "model -o h", "for _ in range(3):\n    model(X).sum().backward(); opt.step()")
    assert ip.user_ns["h"].steps_seen == 3
    assert len(_global_optimizer_pre_hooks) == before


# -- what happened, step by step: norms before clipping, losses aligned, NaN caught before the update ----------
def grad_hooks_free(model):
    return all(not getattr(p, "_post_accumulate_grad_hooks", None) for p in model.parameters())


def global_norm(params):
    grads = [p.grad.detach().float() for p in params if p.grad is not None]
    return float(torch.sqrt(sum((g * g).sum() for g in grads)))


@pytest.mark.parametrize("max_grad_norm", [0.05, 0.0])
def test_hf_norms_are_read_before_the_trainer_clips_them(tmp_path, max_grad_norm):
    model = tiny_bert()
    cb = hf_callback(live=False)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=5, per_device_train_batch_size=8,
                                          logging_steps=1, report_to="none", save_strategy="no", use_cpu=True,
                                          disable_tqdm=True, learning_rate=1e-3, max_grad_norm=max_grad_norm)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=dataset(), callbacks=[cb])
    by_hand, after_clip = [], []
    clip = trainer.accelerator.clip_grad_norm_

    def clip_and_note(parameters, max_norm, *a, **kw):  # the norm computed by hand, then after the clip
        parameters = list(parameters)
        if max_norm != float("inf"):
            by_hand.append(global_norm(parameters))
        out = clip(parameters, max_norm, *a, **kw)
        if max_norm != float("inf"):
            after_clip.append(global_norm(parameters))
        return out

    trainer.accelerator.clip_grad_norm_ = clip_and_note
    if max_grad_norm == 0.0:  # no clipping: the Trainer still computes the norm it logs, with max_norm=inf
        def unclipped(model_):
            return by_hand.append(global_norm(model_.parameters())) or by_hand[-1]

        trainer._get_grad_norm = lambda model_, grad_norm=None: unclipped(model_)
    trainer.train()
    h = cb.history
    assert len(by_hand) == 5 and list(h.global_norms) == pytest.approx(by_hand, rel=1e-4)
    if max_grad_norm:
        assert all(a == pytest.approx(0.05, rel=1e-3) for a in after_clip)  # the Trainer did clip
        assert h.clip_norm == 0.05 and h.clipped_steps == tuple(range(5))
        f = next(f for f in h.findings if f.kind == "gradient_clipped")
        assert "on 5 of 5 recorded steps" in f.message and "before clipping" in f.message
    else:
        assert h.clip_norm is None and "gradient_clipped" not in {f.kind for f in h.findings}
    assert grad_hooks_free(model) and hook_free(model)


def _lit_classes(lightning, nan_at=None):
    class Lit(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
            self.hand_norms, self.hand_losses = [], []

        def training_step(self, batch, batch_idx):
            x, y = batch
            if nan_at is not None and self.global_step == nan_at:
                x = x * float("nan")
            loss = F.cross_entropy(self.net(x), y)
            self.hand_losses.append(float(loss.detach()))
            return loss

        def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
            self.hand_norms.append(global_norm(self.parameters()))  # before Lightning clips
            self.clip_gradients(optimizer, gradient_clip_val=gradient_clip_val,
                                gradient_clip_algorithm=gradient_clip_algorithm)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Lit


def _lit_fit(lightning, tmp_path, cb, lit, clip=None, epochs=2):
    x = torch.randn(40, 8, generator=torch.Generator().manual_seed(1))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x[:, :3].argmax(1)), batch_size=8)
    trainer = lightning.Trainer(max_epochs=epochs, callbacks=[cb], logger=False, enable_checkpointing=False,
                                enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
                                default_root_dir=str(tmp_path), gradient_clip_val=clip)
    trainer.fit(lit, loader)


@pytest.mark.parametrize("clip", [None, 0.05])
def test_lightning_norms_match_each_step_and_its_loss(tmp_path, clip):
    lightning = pytest.importorskip("lightning.pytorch")
    lit = _lit_classes(lightning)()
    cb = lightning_callback(live=False)
    _lit_fit(lightning, tmp_path, cb, lit, clip=clip)
    h = cb.history
    # every step, the first (not 0.0) and the last (not lost), each with the loss of its own step
    assert h.steps == tuple(range(10)) and len(lit.hand_norms) == 10
    assert list(h.global_norms) == pytest.approx(lit.hand_norms, rel=1e-5)
    assert h.loss_steps == tuple(range(10)) and list(h.losses) == pytest.approx(lit.hand_losses, rel=1e-6)
    if clip:
        assert h.clip_norm == 0.05 and h.clipped_steps  # clipped, and the norms are the ones before it
        assert max(h.global_norms) > 0.05
    assert grad_hooks_free(lit) and hook_free(lit)


def test_lightning_sentinel_stops_before_the_optimizer_applies_the_nan(tmp_path):
    lightning = pytest.importorskip("lightning.pytorch")
    lit = _lit_classes(lightning, nan_at=3)()
    cb = lightning_callback(live=False, nan_sentinel=True)
    with pytest.raises(NonFiniteError) as info:
        _lit_fit(lightning, tmp_path, cb, lit)
    assert info.value.step == 3
    assert all(bool(torch.isfinite(p).all()) for p in lit.parameters())  # step 3 was never applied
    assert hook_free(lit) and grad_hooks_free(lit)


@pytest.mark.parametrize("clip", [None, 0.01])
def test_accelerate_norms_before_clipping_and_the_nan_step(clip):
    accelerate = pytest.importorskip("accelerate")
    acc = accelerate.Accelerator(cpu=True)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = acc.prepare(model, opt)
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(2))
    y = x[:, :3].argmax(1)
    hand = []
    with pytest.raises(NonFiniteError) as info:
        with accelerate_watch(acc, model, live=False, nan_sentinel=True) as w:
            for step in range(6):
                xb = x * float("nan") if step == 4 else x
                acc.backward(F.cross_entropy(model(xb), y))
                hand.append(global_norm(model.parameters()))
                if clip:
                    acc.clip_grad_norm_(model.parameters(), clip)
                opt.step()
                opt.zero_grad()
    assert info.value.step == 4
    g = list(w.history.global_norms)
    assert g[:4] == pytest.approx(hand[:4], rel=1e-5) and len(g) == 5 and g[4] != g[4]  # step 4: NaN, recorded
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
    assert grad_hooks_free(model)
