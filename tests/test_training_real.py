"""The doctor, GradMonitor and the NaN sentinel on real architectures and data that ships inside packages.

ResNet-18 and MobileNetV2 are the transformers implementations built from configs (PyPI's torchvision wheels link
the CUDA build of torch and fail to import next to the CPU one); BERT and GPT-2 come from tiny configs; the data
is scikit-learn's bundled digits and breast-cancer sets.  Nothing is downloaded.  Sizes are small so that the
whole file runs in well under a few minutes on two cores.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import nbdebug
from nbdebug.core.doctor import doctor

sklearn = pytest.importorskip("sklearn.datasets", reason="scikit-learn is in the dev dependency group")
transformers = pytest.importorskip("transformers", reason="transformers is in the dev dependency group")

QUICK = dict(reproducibility=False, time_budget=30)
HEAVY = dict(reproducibility=False, time_budget=20)  # the big models (room for a loaded machine): "still falling" is info only


# -- data -----------------------------------------------------------------------------------------------------
def digits(n=64, offset=0, scale=True):
    d = sklearn.load_digits()
    x = torch.tensor(d.data[offset : offset + n], dtype=torch.float32)
    y = torch.tensor(d.target[offset : offset + n], dtype=torch.long)
    return ((x - 8.0) / 6.0 if scale else x * (255.0 / 16.0), y)  # raw: 0..16 -> 0..255 pixel values


def digit_images(n=16, offset=0, size=16):
    x, y = digits(n, offset)
    img = x.reshape(n, 1, 8, 8).repeat(1, 3, 1, 1)
    return F.interpolate(img, size=(size, size), mode="nearest"), y


def cancer(n=64):
    d = sklearn.load_breast_cancer()
    x = torch.tensor(d.data, dtype=torch.float32)
    x = (x - x.mean(0)) / x.std(0)
    y = torch.tensor(d.target, dtype=torch.float32)
    return x[:n], y[:n]


def digits_loader(n=256, batch=64, shuffle_labels=False):
    x, y = digits(n)
    if shuffle_labels:
        y = y[torch.randperm(n, generator=torch.Generator().manual_seed(0))]
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=batch)


# -- models ---------------------------------------------------------------------------------------------------
def mlp(d=64, c=10, *tail):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, c), *tail)


def resnet18(num_labels=10):
    torch.manual_seed(0)
    cfg = transformers.ResNetConfig(layer_type="basic", depths=[2, 2, 2, 2], hidden_sizes=[64, 128, 256, 512],
                                    embedding_size=64, num_labels=num_labels)
    return transformers.ResNetForImageClassification(cfg)


def mobilenet(num_labels=10):
    torch.manual_seed(0)
    cfg = transformers.MobileNetV2Config(num_labels=num_labels, image_size=16, depth_multiplier=0.35)
    return transformers.MobileNetV2ForImageClassification(cfg)


def tiny_bert(num_labels=3):
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=32, num_labels=num_labels)
    return transformers.BertForSequenceClassification(cfg)


def tiny_gpt2():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2)
    return transformers.GPT2LMHeadModel(cfg)


def token_batch(n=16, t=12, labels=3):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 64, (n, t), generator=g)
    y = ids[:, 0] % labels  # the label follows from the first token
    mask = torch.ones(n, t, dtype=torch.long)
    mask[:, -2:] = 0
    return {"input_ids": ids, "attention_mask": mask, "labels": y}


class DigitsTransformer(nn.Module):
    """nn.TransformerEncoder over the 8 rows of a digit, as a sequence of 8 tokens of 8 features."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj = nn.Linear(8, 32)
        layer = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        return self.head(self.encoder(self.proj(x.reshape(-1, 8, 8))).mean(1))


def hf_images(model_fn, n=16):
    x, y = digit_images(n)
    return model_fn(), {"pixel_values": x, "labels": y}


def healthy_cases():
    lm = token_batch()
    lm_labels = lm["input_ids"].clone()
    lm_labels[lm["attention_mask"] == 0] = -100
    return {
        "mlp-digits": lambda: (mlp(), digits(), nn.CrossEntropyLoss()),
        "mlp-breast-cancer": lambda: (nn.Sequential(mlp(30, 1), nn.Flatten(0)), cancer(), nn.BCEWithLogitsLoss()),
        "transformer-encoder-digits": lambda: (DigitsTransformer(), digits(), nn.CrossEntropyLoss()),
        "resnet18": lambda: (*hf_images(resnet18), None),
        "mobilenet": lambda: (*hf_images(mobilenet), None),
        "bert": lambda: (tiny_bert(), token_batch(), None),
        "gpt2": lambda: (tiny_gpt2(), {**lm, "labels": lm_labels}, None),
    }


@pytest.mark.parametrize("name", list(healthy_cases()))
def test_healthy_real_setups_get_no_error_and_no_warning(name):
    model, batch, loss_fn = healthy_cases()[name]()
    r = doctor(model, batch, loss_fn, **(QUICK if name.startswith(("mlp", "transformer")) else HEAVY))
    loud = [f for f in r.findings if f.severity in ("error", "warning")]
    assert not loud, f"{name}: {[(f.kind, f.message) for f in loud]}\n{r}"
    assert r.initial_loss is not None and r.losses


# -- planted bugs: each found, and placed ---------------------------------------------------------------------
def _finding(r, kind):
    found = [f for f in r.findings if f.kind == kind]
    assert found, f"{kind} not found; got {[(f.kind, f.message) for f in r.findings]}"
    return found[0]


def test_softmax_before_cross_entropy():
    r = doctor(mlp(64, 10, nn.Softmax(dim=1)), digits(), nn.CrossEntropyLoss(), baseline=False, **QUICK)
    f = _finding(r, "probabilities_to_loss")
    assert f.where == ("model.3 = Softmax(dim=1)",)
    c = _finding(r, "cannot_overfit") if "cannot_overfit" in r.kinds else None
    if c is not None:  # a consequence says so, and does not suggest a higher learning rate
        assert "this follows from the finding above, probabilities fed to a loss" in c.message.lower() or \
            "follows from the finding above" in c.message
        assert "consequence_of" not in str(dict(c.evidence))
        assert not any("raise the learning rate" in x.title for x in c.fixes)


def test_relu_on_the_logits():
    r = doctor(mlp(64, 10, nn.ReLU()), digits(), nn.CrossEntropyLoss(), baseline=False, **QUICK)
    f = _finding(r, "activation_on_logits")
    assert f.severity == "error" and f.where == ("model.3 = ReLU()",) and "ReluBackward0" in f.message


def test_labels_out_of_range():
    x, y = digits()
    r = doctor(mlp(64, 9), (x, y), nn.CrossEntropyLoss(), **QUICK)
    assert _finding(r, "label_out_of_range").where == ("targets",)


class DetachedBlock(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.block1 = nn.Sequential(nn.Linear(64, 64), nn.ReLU())
        self.block2 = nn.Sequential(nn.Linear(64, 64), nn.ReLU())
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        return self.head(self.block2(self.block1(x).detach()))


def test_detached_block():
    r = doctor(DetachedBlock(), digits(), nn.CrossEntropyLoss(), baseline=False, **QUICK)
    assert set(_finding(r, "no_gradient").where) == {"block1.0.weight", "block1.0.bias"}


def test_backbone_frozen_but_the_head():
    model = resnet18()
    for name, p in model.named_parameters():
        p.requires_grad_(name.startswith("classifier"))
    x, y = digit_images()
    r = doctor(model, {"pixel_values": x, "labels": y}, baseline=False, **QUICK)
    f = _finding(r, "frozen_parameters")
    assert f.severity == "warning" and f.where == ("model.resnet",)
    assert "99.95% of the model" in f.message and "classifier" in f.message


def test_learning_rate_too_high_says_lower_it():
    m = mlp()
    r = doctor(m, digits(), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=10.0), **QUICK)
    found = [f for f in r.findings if f.kind in ("cannot_overfit", "exploding_gradients")]
    assert found, r
    for f in found:
        assert any("lower the learning rate" in x.title for x in f.fixes), f
        assert not any("raise the learning rate" in x.title for x in f.fixes), f
    assert "ignores_input" not in r.kinds  # a diverged run is not an input-ignoring model


def test_learning_rate_too_low_says_raise_it():
    m = mlp()
    r = doctor(m, digits(), nn.CrossEntropyLoss(), torch.optim.Adam(m.parameters(), lr=1e-8), steps=60, **QUICK)
    f = _finding(r, "cannot_overfit")
    assert "barely moved" in f.message and "lr=1e-08" in f.message
    assert "raise the learning rate" in f.fixes[0].title
    assert "ignores_input" not in r.kinds


def test_unnormalised_pixels_point_at_the_input_scale():
    r = doctor(mlp(), digits(scale=False), nn.CrossEntropyLoss(), **QUICK)
    f = _finding(r, "unnormalised_inputs")
    assert f.where == ("inputs",) and "0-255" in f.message
    if "initial_loss_off" in r.kinds:
        g = _finding(r, "initial_loss_off")
        assert g.where == ("inputs",) and "pixels by 255" in g.fixes[0].title


def test_labels_shuffled_apart_from_inputs():
    loader = digits_loader(shuffle_labels=True)
    r = doctor(mlp(), loader, nn.CrossEntropyLoss(), **QUICK)
    assert _finding(r, "labels_unrelated").where == ("targets",)
    healthy = doctor(mlp(), digits_loader(), nn.CrossEntropyLoss(), **QUICK)
    assert "labels_unrelated" not in healthy.kinds, healthy


class ZeroesInput(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 2))

    def forward(self, x):
        return self.net(x * 0)


def test_model_that_zeroes_its_input_with_a_constant_target():
    x, _ = digits()
    y = torch.zeros(len(x), dtype=torch.long)  # both the real and a zero input reach a low loss
    r = doctor(ZeroesInput(), (x, y), nn.CrossEntropyLoss(), **QUICK)
    f = _finding(r, "ignores_input")
    assert "identical for all 64 samples" in f.message


def test_ignores_input_not_claimed_against_its_own_numbers():
    # a model that learns from its input but cannot fit the batch: the zero-input run is worse, so no finding
    torch.manual_seed(0)
    x, y = digits(256)
    r = doctor(nn.Linear(64, 10), (x, y), nn.CrossEntropyLoss(), steps=40, **QUICK)
    for f in r.findings:
        if f.kind == "ignores_input":
            ev = f.evidence
            assert ev["zero"] <= ev["real"] + 0.2 * (ev["initial"] - ev["real"]), f


def test_hf_labels_with_ignore_index_and_lightning_module():
    lightning = pytest.importorskip("lightning.pytorch")

    class Lit(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = mlp()

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = F.cross_entropy(self(x), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=3e-3)

    r = doctor(Lit(), digits(), **HEAVY)
    assert r.ok and r.task == "classification" and r.num_classes == 10, r
    assert r.losses[-1] < 0.5 * r.losses[0]
    # labels with -100 (ignored) inside a Hugging Face batch are not "out of range"
    b = token_batch()
    b["labels"][:4] = -100
    r = doctor(tiny_bert(), b, **HEAVY)
    assert "label_out_of_range" not in r.kinds and r.num_classes == 3, r


def test_nonfinite_in_a_real_model_is_placed():
    model = tiny_bert()
    with torch.no_grad():
        model.bert.encoder.layer[1].output.dense.weight[0, 0] = float("nan")
    with pytest.raises(nbdebug.NonFiniteError) as info:
        with nbdebug.nan_sentinel(model):
            model(**token_batch())
    assert info.value.module == "bert.encoder.layer.1.output.dense" and info.value.phase == "forward"


def _minibatch_run(corrupt_at=None):
    from nbdebug.core.training.grads import GradMonitor

    x_all, y_all = digits(1797)
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.Adam(m.parameters(), 3e-3)
    g = torch.Generator().manual_seed(0)
    with GradMonitor(m, num_classes=10) as mon:
        for step in range(400):
            idx = torch.randint(0, len(x_all), (16,), generator=g)
            x, y = x_all[idx], y_all[idx]
            if step == corrupt_at:  # a corrupted batch: raw values, labels shifted by one
                x, y = x * 50.0, (y + 1) % 10
            loss = F.cross_entropy(m(x), y)
            opt.zero_grad()
            loss.backward()
            mon.log_loss(loss)
            opt.step()
    return mon.history


def test_loss_spike_is_quiet_on_minibatch_noise_and_finds_a_corrupted_batch():
    # batches of 16 at a low loss: one misclassified sample makes the loss 5-15x its median (31 such steps here)
    h = _minibatch_run()
    assert "loss_spike" not in {f.kind for f in h.findings}, h.findings
    bad = _minibatch_run(corrupt_at=300)
    f = next(f for f in bad.findings if f.kind == "loss_spike")
    assert "at step 300" in f.message


def test_hf_batch_without_labels_is_one_clear_error():
    from nbdebug.errors import InvalidArgumentError

    b = token_batch()
    del b["labels"]
    with pytest.raises(InvalidArgumentError, match="returned no loss; expected labels in the batch"):
        doctor(tiny_bert(), b, **QUICK)
    with pytest.raises(InvalidArgumentError, match="loss_fn is None, but the batch is"):
        doctor(mlp(), digits(), **QUICK)


def test_dataloader_of_hugging_face_dict_batches():
    b = token_batch(32)
    rows = [{k: v[i] for k, v in b.items()} for i in range(32)]
    loader = torch.utils.data.DataLoader(rows, batch_size=8)
    r = doctor(tiny_bert(), loader, **HEAVY)
    assert r.task == "classification" and r.num_classes == 3 and r.initial_loss is not None
    assert any(name == "dataloader wait" for name, _ in r.checks), r.checks
