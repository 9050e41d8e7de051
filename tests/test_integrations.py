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
