"""A third, independent held-out set of planted bugs for the doctor (see README.md).

Bases (the architecture and loop each case copies; data bundled with scikit-learn or synthetic, nothing
downloaded), none of them used in ``../doctor_cases`` or ``../doctor_cases2``:
- ``tsp``: pytorch/examples ``time_sequence_prediction`` (``Sequence``: two ``LSTMCell`` + linear, sine waves
  with random phase, input ``data[:, :-1]``, target ``data[:, 1:]``, MSELoss), Adam instead of the script's LBFGS;
- ``siamese``: pytorch/examples ``siamese_network`` (shared backbone run on both images, features concatenated,
  fc 256 -> 1, sigmoid, BCELoss, Adadelta lr=1), a small conv backbone instead of ResNet-18, digit pairs
  "same class or not"; and its common contrastive-loss variant (Euclidean distance of the two embeddings);
- ``rnn``: pytorch/examples ``mnist_rnn`` (LSTM over the image's rows, last step, BatchNorm1d, dropout, fc 64-32-10,
  ``log_softmax`` + ``F.nll_loss``, Adadelta), digits 8x8 read as 8 rows of 8;
- ``fns``: pytorch/examples ``fast_neural_style`` ``TransformerNet`` (reflection-padded convs, InstanceNorm,
  residual blocks, upsample-conv), channels and kernels scaled down, as a denoiser of digits at 16 x 16, MSELoss;
- ``bert``: ``BertForMaskedLM`` from a tiny transformers config, its own loss from ``labels`` (-100 ignored),
  AdamW with ``get_linear_schedule_with_warmup``, on synthetic arithmetic token sequences with 15% masked;
- ``wine``: a Lightning classifier (``training_step`` with ``F.cross_entropy`` and ``self.log``,
  ``configure_optimizers``) on scikit-learn's wine set, standardised;
- ``linnerud``: a multi-output tanh regressor (encoder + regressor) on scikit-learn's linnerud set (3 -> 3);
- ``cnn1d``: a 1-D CNN classifying synthetic waves (sine, square, sawtooth; random frequency, phase, noise);
- ``gru``: a GRU sentence classifier over ``nn.Embedding.from_pretrained(vectors, freeze=True)`` (fixed random
  vectors standing in for pretrained ones), on synthetic token sequences labelled by a small lexicon.

``build(case_id) -> dict`` of ``nbdebug.doctor`` arguments.  What each case should get first is in labels.json,
written and committed before the doctor ran on any case.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# -- data ------------------------------------------------------------------------------------------------------
def digits(n=64, seed=3):
    from sklearn.datasets import load_digits

    d = load_digits()
    g = torch.Generator().manual_seed(seed)
    idx = torch.randperm(len(d.target), generator=g)[:n]
    return torch.tensor(d.data, dtype=torch.float32)[idx] / 16.0, torch.tensor(d.target)[idx]  # x in [0, 1]


def standardised(x):
    x = torch.as_tensor(x, dtype=torch.float32)
    return (x - x.mean(0)) / x.std(0)


def sine_waves(n=16, length=60, period=20.0, seed=2):  # time_sequence_prediction/generate_sine_wave.py, smaller
    g = torch.Generator().manual_seed(seed)
    x = torch.arange(length).float() + torch.randint(-4 * int(period), 4 * int(period), (n, 1), generator=g).float()
    data = torch.sin(x / period)
    return data[:, :-1], data[:, 1:]


def waves(n=64, length=64, seed=4):  # three classes: sine, square, sawtooth
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, (n,), generator=g)
    freq = 2 + 4 * torch.rand(n, 1, generator=g)
    phase = 2 * math.pi * torch.rand(n, 1, generator=g)
    t = torch.linspace(0, 1, length)
    arg = 2 * math.pi * freq * t + phase
    s = torch.sin(arg)
    shapes = torch.stack([s, torch.sign(s), 2 * ((arg / (2 * math.pi)) % 1.0) - 1], 1)  # (n, 3, length)
    x = shapes[torch.arange(n), y] + 0.2 * torch.randn(n, length, generator=g)
    return x.unsqueeze(1), y  # (n, 1, length)


def lexicon_sentences(n=64, length=16, vocab=30, seed=5):  # label 1 when positive words outnumber negative ones
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (n, length), generator=g)
    pos = ((ids >= 1) & (ids <= 4)).sum(1)
    neg = ((ids >= 5) & (ids <= 8)).sum(1)
    return ids, (pos > neg).long()


# -- time_sequence_prediction -------------------------------------------------------------------------------------
class Sequence(nn.Module):  # pytorch/examples time_sequence_prediction/train.py, hidden 51 -> 32
    def __init__(self, hidden=32, detach_outputs=False):
        super().__init__()
        self.hidden = hidden
        self.lstm1 = nn.LSTMCell(1, hidden)
        self.lstm2 = nn.LSTMCell(hidden, hidden)
        self.linear = nn.Linear(hidden, 1)
        self.detach_outputs = detach_outputs

    def forward(self, input, future=0):
        outputs = []
        h_t = torch.zeros(input.size(0), self.hidden)
        c_t = torch.zeros(input.size(0), self.hidden)
        h_t2 = torch.zeros(input.size(0), self.hidden)
        c_t2 = torch.zeros(input.size(0), self.hidden)
        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            # the bug: the outputs kept for plotting with .detach(), and the same list returned for the loss
            outputs += [output.detach() if self.detach_outputs else output]
        return torch.cat(outputs, dim=1)


# -- siamese_network ---------------------------------------------------------------------------------------------
class SiameseNetwork(nn.Module):  # pytorch/examples siamese_network/main.py, a small conv backbone for 8x8 digits
    def __init__(self, embed_only=False):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 4 * 4, 32),
        )
        if not embed_only:  # the contrastive variant has no pair head
            self.fc = nn.Sequential(nn.Linear(32 * 2, 256), nn.ReLU(inplace=True), nn.Linear(256, 1))
            self.sigmoid = nn.Sigmoid()
        self.embed_only = embed_only

    def forward_once(self, x):
        return self.backbone(x)

    def forward(self, input1, input2):
        if self.embed_only:  # the contrastive variant: the two embeddings, one backbone call on both
            both = self.forward_once(torch.cat([input1, input2]))
            return both[: len(input1)], both[len(input1):]
        output = torch.cat((self.forward_once(input1), self.forward_once(input2)), 1)
        return self.sigmoid(self.fc(output)).squeeze(1)


def digit_pairs(n=64):
    """Each digit with a partner of the same class (half) or another class; positive partners drawn with
    replacement among the same class, so a few pairs hold the same image twice (as a sampler without a check does)."""
    x, y = digits(n)
    img = x.reshape(n, 1, 8, 8)
    g = torch.Generator().manual_seed(7)
    partner, same = [], []
    for i in range(n):
        want_same = i % 2 == 0
        pool = [j for j in range(n) if (y[j] == y[i]) == want_same]
        if want_same and i % 8 == 0:
            pool = [i]  # make sure the batch has identical pairs
        partner.append(pool[int(torch.randint(len(pool), (1,), generator=g))])
        same.append(float(y[partner[-1]] == y[i]))
    return (img, img[partner]), torch.tensor(same)


def contrastive_loss(out, same, margin=2.0):  # a hand-written contrastive loss with a bare sqrt
    f1, f2 = out
    d = torch.sqrt(((f1 - f2) ** 2).sum(1))
    return (same * d**2 + (1 - same) * F.relu(margin - d) ** 2).mean()


# -- mnist_rnn -----------------------------------------------------------------------------------------------------
class RowLSTM(nn.Module):  # pytorch/examples mnist_rnn/main.py `Net`, rows of 8 instead of 28
    def __init__(self, log_softmax=True):
        super().__init__()
        self.rnn = nn.LSTM(input_size=8, hidden_size=64, batch_first=True)
        self.batchnorm = nn.BatchNorm1d(64)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 10)
        self.log_softmax = log_softmax

    def forward(self, input):
        input = input.reshape(-1, 8, 8)
        output, _ = self.rnn(input)
        output = output[:, -1, :]
        output = self.batchnorm(output)
        output = self.dropout1(output)
        output = F.relu(self.fc1(output))
        output = self.dropout2(output)
        output = self.fc2(output)
        return F.log_softmax(output, dim=1) if self.log_softmax else output


# -- fast_neural_style TransformerNet ------------------------------------------------------------------------------
class ConvLayer(nn.Module):
    def __init__(self, cin, cout, k, stride):
        super().__init__()
        self.pad = nn.ReflectionPad2d(k // 2)
        self.conv2d = nn.Conv2d(cin, cout, k, stride)

    def forward(self, x):
        return self.conv2d(self.pad(x))


class ResidualBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = ConvLayer(c, c, 3, 1)
        self.in1 = nn.InstanceNorm2d(c, affine=True)
        self.conv2 = ConvLayer(c, c, 3, 1)
        self.in2 = nn.InstanceNorm2d(c, affine=True)

    def forward(self, x):
        out = F.relu(self.in1(self.conv1(x)))
        return self.in2(self.conv2(out)) + x


class UpsampleConvLayer(nn.Module):
    def __init__(self, cin, cout, k, stride, upsample=None):
        super().__init__()
        self.upsample = upsample
        self.conv = ConvLayer(cin, cout, k, stride)

    def forward(self, x):
        if self.upsample:
            x = F.interpolate(x, mode="nearest", scale_factor=self.upsample)
        return self.conv(x)


class TransformerNet(nn.Module):  # fast_neural_style/neural_style/transformer_net.py: 32/64/128 -> 8/16/32, 5 res -> 2
    def __init__(self):
        super().__init__()
        self.conv1, self.in1 = ConvLayer(1, 8, 5, 1), nn.InstanceNorm2d(8, affine=True)
        self.conv2, self.in2 = ConvLayer(8, 16, 3, 2), nn.InstanceNorm2d(16, affine=True)
        self.conv3, self.in3 = ConvLayer(16, 32, 3, 2), nn.InstanceNorm2d(32, affine=True)
        self.res1, self.res2 = ResidualBlock(32), ResidualBlock(32)
        self.deconv1, self.in4 = UpsampleConvLayer(32, 16, 3, 1, upsample=2), nn.InstanceNorm2d(16, affine=True)
        self.deconv2, self.in5 = UpsampleConvLayer(16, 8, 3, 1, upsample=2), nn.InstanceNorm2d(8, affine=True)
        self.deconv3 = ConvLayer(8, 1, 5, 1)

    def forward(self, x):
        y = F.relu(self.in1(self.conv1(x)))
        y = F.relu(self.in2(self.conv2(y)))
        y = F.relu(self.in3(self.conv3(y)))
        y = self.res2(self.res1(y))
        y = F.relu(self.in4(self.deconv1(y)))
        y = F.relu(self.in5(self.deconv2(y)))
        return self.deconv3(y)


def noisy_digits(n=32):
    x, _ = digits(n)
    clean = F.interpolate(x.reshape(n, 1, 8, 8), size=(16, 16), mode="bilinear", align_corners=False)
    noisy = clean + 0.3 * torch.randn(clean.shape, generator=torch.Generator().manual_seed(8))
    return noisy, clean  # (n, 1, 16, 16) each


# -- tiny BERT masked LM -------------------------------------------------------------------------------------------
def bert():
    from transformers import BertConfig, BertForMaskedLM

    cfg = BertConfig(vocab_size=40, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                     max_position_embeddings=64, pad_token_id=0)
    return BertForMaskedLM(cfg)


def mlm_batch(ignore=-100, n=16, length=24):
    """Arithmetic token sequences (5 + (a + b t) mod 35) between [CLS]=1 and [SEP]=2, 15% replaced by [MASK]=4;
    labels hold the original id at the masked positions and ``ignore`` elsewhere."""
    g = torch.Generator().manual_seed(9)
    a = torch.randint(0, 35, (n, 1), generator=g)
    b = torch.randint(1, 4, (n, 1), generator=g)
    body = 5 + (a + b * torch.arange(length - 2)) % 35
    ids = torch.cat([torch.ones(n, 1, dtype=torch.long), body, torch.full((n, 1), 2)], 1)
    masked = torch.rand(n, length, generator=g) < 0.15
    masked[:, 0] = masked[:, -1] = False
    masked[:, 3] = True  # at least one masked token per row
    labels = torch.where(masked, ids, torch.full_like(ids, ignore))
    input_ids = torch.where(masked, torch.full_like(ids, 4), ids)
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def warmup(opt, warmup_steps=20, total=200):
    from transformers import get_linear_schedule_with_warmup

    return get_linear_schedule_with_warmup(opt, warmup_steps, total)


# -- Lightning wine classifier -------------------------------------------------------------------------------------
def lit_wine(softmax=False):
    import lightning.pytorch as pl

    class WineClassifier(pl.LightningModule):
        def __init__(self):
            super().__init__()
            layers = [nn.Linear(13, 32), nn.ReLU(), nn.Linear(32, 3)]
            if softmax:
                layers.append(nn.Softmax(dim=1))
            self.net = nn.Sequential(*layers)

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = F.cross_entropy(self(x), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)

    return WineClassifier()


def wine(n=64):
    from sklearn.datasets import load_wine

    d = load_wine()
    idx = torch.randperm(len(d.target), generator=torch.Generator().manual_seed(10))[:n]
    return standardised(d.data)[idx], torch.tensor(d.target)[idx]


# -- linnerud regressor --------------------------------------------------------------------------------------------
class LinnerudNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(3, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh())
        self.regressor = nn.Linear(32, 3)

    def forward(self, x):
        return self.regressor(self.encoder(x))


def linnerud():
    from sklearn.datasets import load_linnerud

    d = load_linnerud()
    return standardised(d.data), standardised(d.target)  # 20 rows, 3 -> 3


# -- 1-D CNN and GRU classifiers -----------------------------------------------------------------------------------
def cnn1d():
    return nn.Sequential(
        nn.Conv1d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool1d(2),
        nn.Conv1d(16, 32, 5, padding=2), nn.ReLU(), nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(32, 3),
    )


class GRUClassifier(nn.Module):
    def __init__(self, vectors):
        super().__init__()
        self.embedding = nn.Embedding.from_pretrained(vectors, freeze=True)
        self.gru = nn.GRU(vectors.size(1), 32, batch_first=True)
        self.head = nn.Linear(32, 2)

    def forward(self, ids):
        _, h = self.gru(self.embedding(ids))
        return self.head(h[-1])


def word_vectors(vocab=30, dim=16):  # stands in for loaded pretrained vectors
    return torch.randn(vocab, dim, generator=torch.Generator().manual_seed(11))


# -- the cases ------------------------------------------------------------------------------------------------------
def build(case_id):  # noqa: C901 - one branch per case, read top to bottom
    torch.manual_seed(0)
    if case_id == "tsp-outputs-detached":
        m = Sequence(detach_outputs=True)
        return dict(model=m, batch=sine_waves(), loss_fn=nn.MSELoss(),
                    optimizer=torch.optim.Adam(m.parameters(), lr=1e-2))

    if case_id == "siamese-contrastive-sqrt-of-zero":
        m = SiameseNetwork(embed_only=True)
        return dict(model=m, batch=digit_pairs(), loss_fn=contrastive_loss,
                    optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))

    if case_id == "rnn-nll-without-log-softmax":
        x, y = digits()
        m = RowLSTM(log_softmax=False)
        return dict(model=m, batch=(x, y), loss_fn=F.nll_loss, optimizer=torch.optim.Adadelta(m.parameters(), lr=1.0))

    if case_id.startswith("fns"):
        noisy, clean = noisy_digits()
        m = TransformerNet()
        opt = torch.optim.Adam(m.parameters(), lr=1e-3)
        if case_id == "fns-denoiser-healthy":
            return dict(model=m, batch=(noisy, clean), loss_fn=nn.MSELoss(), optimizer=opt)
        if case_id == "fns-mse-broadcast-channel":  # the target's channel squeezed away: (N, 1, H, W) vs (N, H, W)
            return dict(model=m, batch=(noisy, clean.squeeze(1)), loss_fn=nn.MSELoss(), optimizer=opt)

    if case_id.startswith("bert"):
        m = bert()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.01)
        warmup(opt)  # the scheduler has set the group's lr to its warm-up value (0 at step 0)
        if case_id == "bert-mlm-healthy-warmup":
            return dict(model=m, batch=mlm_batch(), optimizer=opt)
        if case_id == "bert-mlm-labels-minus-one":  # the old pytorch-pretrained-bert convention: -1 for "no label"
            return dict(model=m, batch=mlm_batch(ignore=-1), optimizer=opt)

    if case_id.startswith("wine"):
        x, y = wine()
        if case_id == "wine-lit-healthy-sgd-momentum":
            return dict(model=lit_wine(), batch=(x, y))
        if case_id == "wine-lit-softmax-before-ce":
            return dict(model=lit_wine(softmax=True), batch=(x, y))

    if case_id == "linnerud-regressor-not-in-optimizer":
        x, y = linnerud()
        m = LinnerudNet()
        opt = torch.optim.Adam([{"params": m.encoder.parameters()}], lr=1e-2)  # the regressor's group forgotten
        return dict(model=m, batch=(x, y), loss_fn=nn.MSELoss(), optimizer=opt)

    if case_id == "cnn1d-lr-far-too-high":
        m = cnn1d()
        return dict(model=m, batch=waves(), loss_fn=nn.CrossEntropyLoss(),
                    optimizer=torch.optim.Adam(m.parameters(), lr=3.0))  # lr=3.0 typed for 3e-3

    if case_id == "gru-frozen-embedding-intended":
        ids, y = lexicon_sentences()
        m = GRUClassifier(word_vectors())
        opt = torch.optim.Adam([p for p in m.parameters() if p.requires_grad], lr=3e-3)
        return dict(model=m, batch=(ids, y), loss_fn=nn.CrossEntropyLoss(), optimizer=opt, frozen="embedding")
    raise KeyError(case_id)


CASES = (
    "tsp-outputs-detached", "siamese-contrastive-sqrt-of-zero", "rnn-nll-without-log-softmax",
    "fns-denoiser-healthy", "fns-mse-broadcast-channel", "bert-mlm-healthy-warmup", "bert-mlm-labels-minus-one",
    "wine-lit-healthy-sgd-momentum", "wine-lit-softmax-before-ce", "linnerud-regressor-not-in-optimizer",
    "cnn1d-lr-far-too-high", "gru-frozen-embedding-intended",
)
