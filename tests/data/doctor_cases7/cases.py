"""A seventh, independent held-out set of planted bugs for the doctor (see README.md).

The bugs follow the Semantics3 "Debugging Neural Networks: A Checklist" as far as its stored copies go, then
codegenes' "Understanding and Solving the Issue of Model Didn't Learn in PyTorch", in their order (the rule is in
README.md).  Bases (data bundled with scikit-learn or synthetic, nothing downloaded), none of them used in the six
earlier sets:
- ``lenet``: LeNet-5 as Dive into Deep Learning writes it (5x5 convs, sigmoid, average pooling, 120-84-10), its
  ``train_ch6`` loop (CrossEntropyLoss, SGD), on scikit-learn digits brought to 28x28;
- ``litclf``: Lightning's ``backbone_image_classifier.py`` example (``Backbone`` 784-128-10, ``LitClassifier`` with
  ``F.cross_entropy`` in ``training_step`` and Adam in ``configure_optimizers``) on the same digits;
- ``llama``: ``LlamaForCausalLM`` from a tiny transformers config (no download), its own loss from ``labels``,
  AdamW + ``get_scheduler("linear")`` as transformers' ``run_clm_no_trainer.py``;
- ``mobilenet``: MobileNetV2 written by hand as torchvision's ``mobilenetv2.py`` (``Conv2dNormActivation`` with
  ReLU6, ``InvertedResidual``, last 1x1 conv, dropout 0.2 + linear), trained as torchvision's
  ``references/classification/train.py`` recipe for it (CrossEntropyLoss, SGD lr 0.045 momentum 0.9 wd 4e-5);
- ``skmlp``: the MLP of scikit-learn's ``plot_mlp_alpha.py`` example (hidden (10, 10), ReLU, L2 penalty ``alpha``)
  written in torch, on ``make_circles`` / ``make_moons``.

``build(case_id) -> dict`` of ``nbdebug.doctor`` arguments.  What each case should get first is in labels.json,
written before the doctor ran on any case.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


# -- data ------------------------------------------------------------------------------------------------------
def digits(n=64, size=28, offset=0, seed=71):
    """scikit-learn digits brought to ``size`` x ``size`` (bilinear), standardised with the whole set's pixel mean
    and std.  Rows ``offset .. offset + n`` of one fixed shuffle: the batch is offset 0; other offsets are digits
    that are not in it."""
    from sklearn.datasets import load_digits

    d = load_digits()
    idx = torch.randperm(len(d.target), generator=torch.Generator().manual_seed(seed))[offset:offset + n]
    x = torch.tensor(d.data, dtype=torch.float32) / 16.0
    mean, std = x.mean(), x.std()
    x = F.interpolate(((x[idx] - mean) / std).reshape(n, 1, 8, 8), size=(size, size), mode="bilinear",
                      align_corners=False)
    return x, torch.tensor(d.target)[idx]


def shuffled_apart(batch, seed=72):
    """The labels permuted by a generator of their own, apart from their inputs (a dataset whose label column was
    sorted or shuffled separately from its feature column)."""
    x, y = batch
    return x, y[torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))]


def wine(centre=False, scale=False):
    """scikit-learn's wine set, all 178 rows (13 measurements, 3 cultivars), as the file holds them: proline
    around 750, magnesium around 100, hue around 1.  ``centre``: each column minus its mean; ``scale``: divided
    by its standard deviation as well."""
    from sklearn.datasets import load_wine

    d = load_wine()
    x = torch.tensor(d.data, dtype=torch.float32)
    if centre or scale:
        x = x - x.mean(0)
    if scale:
        x = x / x.std(0)
    return x, torch.tensor(d.target)


def circles(n=200, seed=73):
    from sklearn.datasets import make_circles

    x, y = make_circles(n_samples=n, noise=0.08, factor=0.5, random_state=seed)
    return torch.tensor(x, dtype=torch.float32), torch.tensor(y)


def moons(n=200, seed=74):
    from sklearn.datasets import make_moons

    x, y = make_moons(n_samples=n, noise=0.2, random_state=seed)
    x = torch.tensor(x, dtype=torch.float32)
    return (x - x.mean(0)) / x.std(0), torch.tensor(y)


def lm_batch(n=16, length=24, vocab=64, seed=75):
    """Sequences that repeat a random pattern of 6 tokens; labels = input_ids (the model shifts them)."""
    g = torch.Generator().manual_seed(seed)
    pat = torch.randint(3, vocab, (n, 6), generator=g)
    ids = pat.repeat(1, length // 6)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


# -- models ----------------------------------------------------------------------------------------------------
def lenet():
    """d2l's LeNet (chapter "Convolutional Neural Networks (LeNet)"), with its Xavier init of every Linear/Conv."""
    net = nn.Sequential(
        nn.Conv2d(1, 6, kernel_size=5, padding=2), nn.Sigmoid(), nn.AvgPool2d(kernel_size=2, stride=2),
        nn.Conv2d(6, 16, kernel_size=5), nn.Sigmoid(), nn.AvgPool2d(kernel_size=2, stride=2),
        nn.Flatten(),
        nn.Linear(16 * 5 * 5, 120), nn.Sigmoid(),
        nn.Linear(120, 84), nn.Sigmoid(),
        nn.Linear(84, 10))
    for m in net:
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            nn.init.xavier_uniform_(m.weight)
    return net


def mse_on_one_hot(logits, y):
    """Mean squared error between the softmax of the outputs and the one-hot labels: a regression loss used for
    a 10-class classification."""
    return F.mse_loss(torch.softmax(logits, dim=1), F.one_hot(y, logits.shape[1]).float())


def lit_classifier(learning_rate=1e-3):
    """Lightning's ``backbone_image_classifier.py``: ``Backbone`` (784 -> 128 -> 10; the example's ReLU after the
    last layer is left out, it would clip the logits) and ``LitClassifier``."""
    import lightning.pytorch as pl

    class Backbone(nn.Module):
        def __init__(self, hidden_dim=128):
            super().__init__()
            self.l1 = nn.Linear(28 * 28, hidden_dim)
            self.l2 = nn.Linear(hidden_dim, 10)

        def forward(self, x):
            x = x.view(x.size(0), -1)
            return self.l2(torch.relu(self.l1(x)))

    class LitClassifier(pl.LightningModule):
        def __init__(self, backbone=None, learning_rate=1e-4):
            super().__init__()
            self.save_hyperparameters(ignore=["backbone"])
            self.backbone = backbone if backbone is not None else Backbone()

        def forward(self, x):
            return self.backbone(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = F.cross_entropy(self(x), y)
            self.log("train_loss", loss, on_epoch=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)

    torch.manual_seed(0)
    return LitClassifier(learning_rate=learning_rate)


def pretrain_first_layer(lit, steps=150):
    """Fine-tuning as the example's users do it: the first layer comes from a backbone trained (here, by this
    function) on other digits; the head is new."""
    other = digits(n=256, offset=64)
    torch.manual_seed(1)
    donor = lit_classifier().backbone
    opt = torch.optim.Adam(donor.parameters(), lr=1e-3)
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(donor(other[0]), other[1]).backward()
        opt.step()
    with torch.no_grad():
        lit.backbone.l1.load_state_dict(donor.l1.state_dict())


def llama_lm():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                      pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return LlamaForCausalLM(cfg)


def _make_divisible(v, divisor=8):
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


class ConvBNReLU6(nn.Sequential):
    def __init__(self, cin, cout, kernel=3, stride=1, groups=1):
        super().__init__(nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU6(inplace=True))


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand_ratio):
        super().__init__()
        hidden = int(round(cin * expand_ratio))
        self.use_res_connect = stride == 1 and cin == cout
        layers = [ConvBNReLU6(cin, hidden, kernel=1)] if expand_ratio != 1 else []
        layers += [ConvBNReLU6(hidden, hidden, stride=stride, groups=hidden),
                   nn.Conv2d(hidden, cout, 1, 1, 0, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    """torchvision's MobileNetV2 (width 0.25, the first three stages of its setting table, stem stride 1 for
    12x12 inputs), its init: kaiming_normal fan_out for convs, BatchNorm 1/0, Linear normal(0, 0.01)."""

    def __init__(self, num_classes=10, width_mult=0.25, dropout=0.2):
        super().__init__()
        setting = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2]]
        cin = _make_divisible(32 * width_mult)
        self.last_channel = _make_divisible(1280 * width_mult)
        features = [ConvBNReLU6(1, cin, stride=1)]
        for t, c, n, s in setting:
            cout = _make_divisible(c * width_mult)
            for i in range(n):
                features.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        features.append(ConvBNReLU6(cin, self.last_channel, kernel=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout), nn.Linear(self.last_channel, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


def sk_mlp(hidden=(10, 10), inputs=2, classes=2):
    """scikit-learn's MLPClassifier of ``plot_mlp_alpha.py`` in torch: ReLU hidden layers, Glorot-uniform init as
    scikit-learn's, one logit per class (the example fits with lbfgs; Adam lr 1e-2 here, a first-order loop)."""
    layers, width = [], inputs
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    net = nn.Sequential(*layers, nn.Linear(width, classes))
    for m in net:
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
    return net


def sk_alpha_to_weight_decay(alpha, n):
    """scikit-learn adds 0.5 * alpha * ||W||^2 / n_samples to the loss: the same as weight decay alpha / n."""
    return alpha / n


# -- cases -----------------------------------------------------------------------------------------------------
def build(case_id):
    torch.manual_seed(0)
    if case_id == "skmlp-wine-not-centred":  # S3
        m = sk_mlp(inputs=13, classes=3)
        return dict(model=m, batch=wine(), loss_fn=nn.CrossEntropyLoss(),
                    optimizer=torch.optim.Adam(m.parameters(), lr=1e-2))
    if case_id == "lenet-mse-for-classification":  # G1
        m = lenet()
        return dict(model=m, batch=digits(), loss_fn=mse_on_one_hot,
                    optimizer=torch.optim.SGD(m.parameters(), lr=0.9))
    if case_id == "llama-sgd-at-the-adamw-lr":  # G2
        m = llama_lm()
        return dict(model=m, batch=lm_batch(), optimizer=torch.optim.SGD(m.parameters(), lr=1e-3))
    if case_id == "mobilenet-lr-100x":  # G3
        m = MobileNetV2()
        return dict(model=m, batch=digits(size=12), loss_fn=nn.CrossEntropyLoss(),
                    optimizer=torch.optim.SGD(m.parameters(), lr=4.5, momentum=0.9, weight_decay=4e-5))
    if case_id == "litclf-labels-shuffled-apart":  # G4
        return dict(model=lit_classifier(), batch=shuffled_apart(digits()))
    if case_id == "skmlp-no-hidden-layer-circles":  # G9
        m = sk_mlp(hidden=())
        return dict(model=m, batch=circles(), loss_fn=nn.CrossEntropyLoss(),
                    optimizer=torch.optim.Adam(m.parameters(), lr=1e-2))
    if case_id == "skmlp-alpha-as-weight-decay":  # G12
        m = sk_mlp()
        return dict(model=m, batch=moons(), loss_fn=nn.CrossEntropyLoss(),
                    optimizer=torch.optim.Adam(m.parameters(), lr=1e-2, weight_decay=10.0))

    if case_id == "mobilenet-healthy-sgd-momentum":
        m = MobileNetV2()
        return dict(model=m, batch=digits(size=12), loss_fn=nn.CrossEntropyLoss(),
                    optimizer=torch.optim.SGD(m.parameters(), lr=0.045, momentum=0.9, weight_decay=4e-5))
    if case_id == "llama-healthy-adamw-warmup":
        from transformers import get_scheduler

        m = llama_lm()
        decay = [p for n, p in m.named_parameters() if not ("bias" in n or "norm" in n)]
        no_decay = [p for n, p in m.named_parameters() if "bias" in n or "norm" in n]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                 {"params": no_decay, "weight_decay": 0.0}], lr=1e-3)
        get_scheduler("linear", optimizer=opt, num_warmup_steps=20, num_training_steps=200)
        return dict(model=m, batch=lm_batch(), optimizer=opt)
    if case_id == "litclf-healthy-frozen-first-layer-intended":
        m = lit_classifier()
        pretrain_first_layer(m)
        m.backbone.l1.requires_grad_(False)
        return dict(model=m, batch=digits(), frozen=["backbone.l1"])
    if case_id == "skmlp-healthy-alpha-l2":
        m = sk_mlp()
        x, y = moons()
        return dict(model=m, batch=(x, y), loss_fn=nn.CrossEntropyLoss(),
                    optimizer=torch.optim.Adam(m.parameters(), lr=1e-2,
                                               weight_decay=sk_alpha_to_weight_decay(1.0, len(y))))
    raise KeyError(case_id)


CASES = (
    "skmlp-wine-not-centred", "lenet-mse-for-classification", "llama-sgd-at-the-adamw-lr", "mobilenet-lr-100x",
    "litclf-labels-shuffled-apart", "skmlp-no-hidden-layer-circles", "skmlp-alpha-as-weight-decay",
    "mobilenet-healthy-sgd-momentum", "llama-healthy-adamw-warmup", "litclf-healthy-frozen-first-layer-intended",
    "skmlp-healthy-alpha-l2",
)
