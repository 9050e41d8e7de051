"""A fourth, independent held-out set of planted bugs for the doctor (see README.md).

The bugs follow Karpathy's "A Recipe for Training Neural Networks" in its order (the rule is in README.md). Bases
(the architecture and loop each case copies; data bundled with scikit-learn or synthetic, nothing downloaded),
none of them used in the three earlier sets:
- ``gcn``: pytorch/examples ``gcn/main.py`` (``GraphConv`` with the normalised adjacency D^-1/2 (A+I) D^-1/2,
  two layers, ReLU, dropout, ``log_softmax`` + NLLLoss, Adam lr=0.01 weight_decay=5e-4), on a synthetic
  stochastic-block graph (3 communities) with noisy node features;
- ``seq2seq``: pytorch/examples ``language_translation/src/model.py`` ``Translator`` (embeddings, sinusoidal
  ``PositionalEncoding``, ``nn.Transformer`` sequence-first, linear head, CrossEntropyLoss), scaled down, fed
  batch-first data, on a synthetic reverse-the-sequence task;
- ``sr``: pytorch/examples ``super_resolution/model.py`` (ESPCN: convs 5x5/3x3/3x3/3x3, ``PixelShuffle``, orthogonal
  init, MSELoss, Adam), channels scaled down, digits 8x8 -> 16x16;
- ``regression``: pytorch/examples ``regression/main.py`` (features x..x^4, one ``Linear(4, 1)``,
  ``F.smooth_l1_loss``, SGD lr=0.1), one fixed batch of 32;
- ``snli``: pytorch/examples ``snli/model.py`` (``Bottle``-Linear projection, bidirectional LSTM ``Encoder``
  returning its last hidden states, 4-layer MLP with dropout), synthetic premise/hypothesis token sequences;
- ``distilbert``: ``DistilBertForSequenceClassification`` from a tiny transformers config (no download), AdamW +
  ``get_linear_schedule_with_warmup``, synthetic token sequences labelled by a lexicon;
- ``vit``: ``ViTForImageClassification`` from a tiny transformers config, its own loss from ``labels``, digits 8x8;
- ``litft``: Lightning's ``computer_vision_fine_tuning`` example shape (``TransferLearningModel``: a frozen
  ``feature_extractor``, an fc head 3 layers, ``BCEWithLogitsLoss``, Adam over the trainable parameters), a small
  conv backbone for the ResNet-50, digits "below 5 or not".

``build(case_id) -> dict`` of ``nbdebug.doctor`` arguments.  What each case should get first is in labels.json,
written and committed before the doctor ran on any case.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


# -- data ------------------------------------------------------------------------------------------------------
def digits(n=64, seed=21, offset=0):
    from sklearn.datasets import load_digits

    d = load_digits()
    idx = torch.randperm(len(d.target), generator=torch.Generator().manual_seed(seed))[offset:offset + n]
    return torch.tensor(d.data, dtype=torch.float32)[idx] / 16.0, torch.tensor(d.target)[idx]  # x in [0, 1]


def sbm_graph(per_class=30, classes=3, feat=16, seed=22):
    """A stochastic-block graph: edges mostly inside a community; node features a noisy one-hot of it."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(classes).repeat_interleave(per_class)
    n = len(y)
    same = y[:, None] == y[None, :]
    p = torch.where(same, torch.tensor(0.15), torch.tensor(0.02))
    a = (torch.rand(n, n, generator=g) < p).float().triu(1)
    a = a + a.t() + torch.eye(n)  # self-loops, as load_cora
    d = a.sum(1).rsqrt()
    adj = d[:, None] * a * d[None, :]  # D^-1/2 (A + I) D^-1/2
    x = 0.8 * F.one_hot(y % feat, feat).float() + torch.randn(n, feat, generator=g)
    return (x, adj), y


def reverse_task(n=32, length=8, vocab=12, seed=23):
    """Tokens 3..vocab-1; the target is BOS + the reversed source + EOS (PAD=0, BOS=1, EOS=2).  Batch-first."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, vocab, (n, length), generator=g)
    tgt = torch.cat([torch.ones(n, 1, dtype=torch.long), src.flip(1), torch.full((n, 1), 2)], 1)
    return (src, tgt[:, :-1].contiguous()), tgt[:, 1:].contiguous()  # as a collate_fn returns them


def lowres_digits(n=32):
    x, _ = digits(n, seed=24)
    hr = F.interpolate(x.reshape(n, 1, 8, 8), size=(16, 16), mode="bicubic", align_corners=False)
    return F.avg_pool2d(hr, 2), hr  # (n, 1, 8, 8) -> (n, 1, 16, 16)


def snli_batch(n=48, length=10, vocab=40, seed=25):
    """Premise and hypothesis token sequences (sequence-first, as torchtext's SNLI iterator gives them); the label
    is how many hypothesis tokens occur in the premise: none, some, or all (3 classes)."""
    g = torch.Generator().manual_seed(seed)
    prem = torch.randint(1, vocab, (n, length), generator=g)
    hyp = torch.randint(1, vocab, (n, length // 2), generator=g)
    kind = torch.arange(n) % 3
    for i in range(n):
        if kind[i] == 2:
            hyp[i] = prem[i, torch.randperm(length, generator=g)[: length // 2]]
        elif kind[i] == 1:
            hyp[i, :2] = prem[i, :2]
    shared = torch.tensor([sum(int(t) in set(prem[i].tolist()) for t in hyp[i]) for i in range(n)])
    y = torch.where(shared == 0, 0, torch.where(shared == hyp.size(1), 2, 1))
    return (prem.t().contiguous(), hyp.t().contiguous()), y


def lexicon_tokens(n=32, length=16, vocab=50, seed=26):
    """Label 1 when tokens 5..9 outnumber tokens 10..14 (a tiny sentiment lexicon)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (n, length), generator=g)
    y = (((ids >= 5) & (ids <= 9)).sum(1) > ((ids >= 10) & (ids <= 14)).sum(1)).long()
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": y}


# -- gcn -------------------------------------------------------------------------------------------------------
class GraphConv(nn.Module):  # pytorch/examples gcn/main.py
    def __init__(self, input_dim, output_dim, use_bias=False):
        super().__init__()
        self.kernel = nn.Parameter(torch.empty(input_dim, output_dim))
        nn.init.xavier_normal_(self.kernel)
        self.bias = None
        if use_bias:
            self.bias = nn.Parameter(torch.zeros(output_dim))

    def forward(self, input_tensor, adj_mat):
        support = torch.mm(input_tensor, self.kernel)
        output = torch.mm(adj_mat, support)  # the example's spmm on a sparse adjacency; dense here
        return output + self.bias if self.bias is not None else output


class GCN(nn.Module):
    def __init__(self, input_dim=16, hidden_dim=16, output_dim=3, use_bias=True, dropout_p=0.5, softmax=False):
        super().__init__()
        self.gc1 = GraphConv(input_dim, hidden_dim, use_bias=use_bias)
        self.gc2 = GraphConv(hidden_dim, output_dim, use_bias=use_bias)
        self.dropout = nn.Dropout(dropout_p)
        self.softmax = softmax

    def forward(self, input_tensor, adj_mat):
        x = self.dropout(F.relu(self.gc1(input_tensor, adj_mat)))
        x = self.gc2(x, adj_mat)
        # the bug: probabilities returned (for the predictions the script prints) and fed to CrossEntropyLoss
        return F.softmax(x, dim=1) if self.softmax else F.log_softmax(x, dim=1)


# -- language_translation Translator -------------------------------------------------------------------------------
class PositionalEncoding(nn.Module):
    def __init__(self, emb_size, dropout, maxlen=64):
        super().__init__()
        den = torch.exp(-torch.arange(0, emb_size, 2) * math.log(10000) / emb_size)
        pos = torch.arange(0, maxlen).reshape(maxlen, 1)
        pe = torch.zeros((maxlen, emb_size))
        pe[:, 0::2] = torch.sin(pos * den)
        pe[:, 1::2] = torch.cos(pos * den)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pos_embedding", pe.unsqueeze(-2))

    def forward(self, token_embedding):
        return self.dropout(token_embedding + self.pos_embedding[: token_embedding.size(0), :])


class Translator(nn.Module):  # language_translation/src/model.py, scaled down; takes batch-first data
    # (the example's Adam lr=1e-4 is for its 512-wide model; the cases use 3e-3 for this 64-wide one)
    def __init__(self, vocab=12, embed_size=64, num_heads=4, dim_feedforward=128, dropout=0.1, use_view=False):
        super().__init__()
        self.src_embedding = nn.Embedding(vocab, embed_size)
        self.tgt_embedding = nn.Embedding(vocab, embed_size)
        self.pos_enc = PositionalEncoding(embed_size, dropout)
        self.transformer = nn.Transformer(d_model=embed_size, nhead=num_heads, num_encoder_layers=1,
                                          num_decoder_layers=1, dim_feedforward=dim_feedforward, dropout=dropout)
        self.ff = nn.Linear(embed_size, vocab)
        self.use_view = use_view

    def swap(self, t):
        # the bug: view() taken for a transpose -- same shape, but the elements are re-read in memory order, so
        # "sequence-first" rows hold tokens of other samples
        if self.use_view:
            return t.view(t.size(1), t.size(0), *t.shape[2:])
        return t.transpose(0, 1)

    def forward(self, src, tgt_in):  # (B, S) and (B, T) -> logits (B, T, V)
        src, tgt_in = self.swap(src), self.swap(tgt_in)
        tgt_mask = nn.Transformer.generate_square_subsequent_mask(tgt_in.size(0))
        outs = self.transformer(self.pos_enc(self.src_embedding(src)), self.pos_enc(self.tgt_embedding(tgt_in)),
                                tgt_mask=tgt_mask)
        return self.swap(self.ff(outs))


class TokenCrossEntropy(nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.ce = nn.CrossEntropyLoss(ignore_index=0, **kw)

    def forward(self, logits, target):
        return self.ce(logits.reshape(-1, logits.size(-1)), target.reshape(-1))


# -- super_resolution ESPCN ------------------------------------------------------------------------------------------
class GaussianNoise(nn.Module):
    """Training-time input noise drawn from the module's own numpy generator -- created without a seed."""

    def __init__(self, sigma=0.1):
        super().__init__()
        self.sigma = sigma
        self.rng = np.random.default_rng()  # the bug: unseeded; torch.manual_seed does not reach it

    def forward(self, x):
        if not self.training:
            return x
        return x + torch.from_numpy(self.rng.normal(0.0, self.sigma, tuple(x.shape))).to(x.dtype)


class ESPCN(nn.Module):  # super_resolution/model.py `Net`, 64/64/32 -> 32/32/16 channels
    def __init__(self, upscale_factor=2, noise=False):
        super().__init__()
        self.noise = GaussianNoise() if noise else nn.Identity()
        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, 32, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(32, 32, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(32, 16, (3, 3), (1, 1), (1, 1))
        self.conv4 = nn.Conv2d(16, upscale_factor**2, (3, 3), (1, 1), (1, 1))
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)
        nn.init.orthogonal_(self.conv1.weight, nn.init.calculate_gain("relu"))
        nn.init.orthogonal_(self.conv2.weight, nn.init.calculate_gain("relu"))
        nn.init.orthogonal_(self.conv3.weight, nn.init.calculate_gain("relu"))
        nn.init.orthogonal_(self.conv4.weight)

    def forward(self, x):
        x = self.noise(x)
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        x = self.relu(self.conv3(x))
        return self.pixel_shuffle(self.conv4(x))


# -- regression ------------------------------------------------------------------------------------------------------
POLY_DEGREE = 4


def poly_batch(offset=0.0, batch_size=32, seed=27):
    """regression/main.py's get_batch(), one fixed batch; ``offset`` moves the targets' mean (the bug case)."""
    g = torch.Generator().manual_seed(seed)
    w_target = torch.randn(POLY_DEGREE, 1, generator=g) * 5
    b_target = torch.randn(1, generator=g) * 5
    x = torch.randn(batch_size, generator=g).unsqueeze(1)
    feats = torch.cat([x**i for i in range(1, POLY_DEGREE + 1)], 1)
    return feats, feats.mm(w_target) + b_target.item() + offset


# -- snli ------------------------------------------------------------------------------------------------------------
class Bottle(nn.Module):
    def forward(self, input):
        if len(input.size()) <= 2:
            return super().forward(input)
        size = input.size()[:2]
        out = super().forward(input.view(size[0] * size[1], -1))
        return out.view(size[0], size[1], -1)


class Linear(Bottle, nn.Linear):
    pass


class Encoder(nn.Module):  # snli/model.py, bidirectional, one layer
    def __init__(self, d_proj=32, d_hidden=32, return_initial_state=False):
        super().__init__()
        self.d_hidden, self.n_cells = d_hidden, 2
        self.rnn = nn.LSTM(input_size=d_proj, hidden_size=d_hidden, num_layers=1, bidirectional=True)
        self.return_initial_state = return_initial_state

    def forward(self, inputs):
        batch_size = inputs.size()[1]
        h0 = c0 = inputs.new_zeros((self.n_cells, batch_size, self.d_hidden))
        outputs, (ht, ct) = self.rnn(inputs, (h0, c0))
        if self.return_initial_state:  # the bug: h0 typed for ht -- the encoding is the zero initial state
            return h0[-2:].transpose(0, 1).contiguous().view(batch_size, -1)
        return ht[-2:].transpose(0, 1).contiguous().view(batch_size, -1)


class SNLIClassifier(nn.Module):
    def __init__(self, n_embed=40, d_embed=32, d_proj=32, d_hidden=32, d_out=3, dp_ratio=0.2, bug=False):
        super().__init__()
        self.embed = nn.Embedding(n_embed, d_embed)
        self.projection = Linear(d_embed, d_proj)
        self.encoder = Encoder(d_proj, d_hidden, return_initial_state=bug)
        self.dropout = nn.Dropout(p=dp_ratio)
        self.relu = nn.ReLU()
        seq_in_size = 2 * d_hidden * 2
        lin_config = [seq_in_size] * 2
        self.out = nn.Sequential(Linear(*lin_config), self.relu, self.dropout, Linear(*lin_config), self.relu,
                                 self.dropout, Linear(*lin_config), self.relu, self.dropout,
                                 Linear(seq_in_size, d_out))

    def forward(self, premise, hypothesis):
        prem_embed = self.relu(self.projection(self.embed(premise)))
        hypo_embed = self.relu(self.projection(self.embed(hypothesis)))
        return self.out(torch.cat([self.encoder(prem_embed), self.encoder(hypo_embed)], 1))


# -- transformers models from tiny configs ------------------------------------------------------------------------
def distilbert():
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    cfg = DistilBertConfig(vocab_size=50, dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=32,
                           pad_token_id=0, num_labels=2)
    return DistilBertForSequenceClassification(cfg)


def vit(initializer_range=0.02):
    from transformers import ViTConfig, ViTForImageClassification

    cfg = ViTConfig(image_size=8, patch_size=2, num_channels=1, hidden_size=32, num_hidden_layers=2,
                    num_attention_heads=2, intermediate_size=64, num_labels=10, initializer_range=initializer_range)
    return ViTForImageClassification(cfg)


def vit_batch():
    x, y = digits(64, seed=28)
    return {"pixel_values": x.reshape(-1, 1, 8, 8), "labels": y}


def warmup(opt, warmup_steps=20, total=200):
    from transformers import get_linear_schedule_with_warmup

    return get_linear_schedule_with_warmup(opt, warmup_steps, total)


# -- Lightning transfer learning -------------------------------------------------------------------------------------
def lit_transfer():
    import lightning.pytorch as pl

    class TransferLearningModel(pl.LightningModule):  # computer_vision_fine_tuning's shape, a small backbone
        def __init__(self, lr=1e-3):
            super().__init__()
            self.lr = lr
            self.feature_extractor = nn.Sequential(
                nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                nn.MaxPool2d(2), nn.Flatten())
            for p in self.feature_extractor.parameters():  # "pretrained", frozen on purpose
                p.requires_grad = False
            self.fc = nn.Sequential(nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 16), nn.Linear(16, 1))
            self.loss_func = F.binary_cross_entropy_with_logits

        def forward(self, x):
            return self.fc(self.feature_extractor(x.reshape(-1, 1, 8, 8)))

        def loss(self, logits, labels):
            return self.loss_func(input=logits, target=labels)

        def training_step(self, batch, batch_idx):
            x, y = batch
            y_logits = self.forward(x)
            y_true = y.view((-1, 1)).type_as(x)
            train_loss = self.loss(y_logits, y_true)
            self.log("train_loss", train_loss, prog_bar=True)
            return train_loss

        def configure_optimizers(self):
            trainable = [p for p in self.parameters() if p.requires_grad]
            return torch.optim.Adam(trainable, lr=self.lr)

    return TransferLearningModel()


def below_five(n=64, offset=0):
    x, y = digits(n, seed=29, offset=offset)
    return x, (y < 5).long()


def digit_loader(shuffle_labels_apart=False, n=512):
    from torch.utils.data import DataLoader, TensorDataset

    x, y = below_five(n)
    if shuffle_labels_apart:  # the bug: the labels shuffled on their own ("to mix the classes") -- not the images
        y = y[torch.randperm(n, generator=torch.Generator().manual_seed(30))]
    return DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True,
                      generator=torch.Generator().manual_seed(31))


# -- the cases ------------------------------------------------------------------------------------------------------
def build(case_id):  # noqa: C901 - one branch per case, read top to bottom
    torch.manual_seed(0)
    if case_id.startswith("distilbert"):
        m = distilbert()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.01)
        if case_id == "distilbert-healthy-warmup":
            m.train()
            warmup(opt)  # the scheduler has set the group's lr to its warm-up value (0 at step 0)
            return dict(model=m, batch=lexicon_tokens(), optimizer=opt)
        if case_id == "distilbert-eval-left":  # as from_pretrained() returns it; the loop never calls train()
            m.eval()
            return dict(model=m, batch=lexicon_tokens(), optimizer=opt)

    if case_id.startswith("gcn"):
        batch = sbm_graph()
        if case_id == "gcn-healthy-dropout-weight-decay":
            m = GCN()
            return dict(model=m, batch=batch, loss_fn=nn.NLLLoss(),
                        optimizer=torch.optim.Adam(m.parameters(), lr=0.01, weight_decay=5e-4))
        if case_id == "gcn-softmax-into-cross-entropy":
            m = GCN(softmax=True)
            return dict(model=m, batch=batch, loss_fn=nn.CrossEntropyLoss(),
                        optimizer=torch.optim.Adam(m.parameters(), lr=0.01, weight_decay=5e-4))

    if case_id.startswith("seq2seq"):
        if case_id == "seq2seq-view-for-transpose":
            m = Translator(use_view=True)
            return dict(model=m, batch=reverse_task(), loss_fn=TokenCrossEntropy(),
                        optimizer=torch.optim.Adam(m.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9))
        if case_id == "seq2seq-healthy-label-smoothing-cosine":
            m = Translator()
            opt = torch.optim.AdamW(m.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.01)
            torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=200)
            return dict(model=m, batch=reverse_task(), loss_fn=TokenCrossEntropy(label_smoothing=0.1), optimizer=opt)

    if case_id == "sr-unseeded-noise-generator":
        m = ESPCN(noise=True)
        return dict(model=m, batch=lowres_digits(), loss_fn=nn.MSELoss(),
                    optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))

    if case_id == "vit-initializer-range-1":  # initializer_range=1.0 typed for 0.02
        m = vit(initializer_range=1.0)
        return dict(model=m, batch=vit_batch(), optimizer=torch.optim.AdamW(m.parameters(), lr=1e-3))

    if case_id.startswith("regression"):
        m = nn.Linear(POLY_DEGREE, 1)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        if case_id == "regression-healthy-sgd":
            return dict(model=m, batch=poly_batch(), loss_fn=F.smooth_l1_loss, optimizer=opt)
        if case_id == "regression-targets-mean-50":  # readings around 50, the output bias starts at 0
            return dict(model=m, batch=poly_batch(offset=50.0), loss_fn=F.smooth_l1_loss, optimizer=opt)

    if case_id.startswith("snli"):
        if case_id == "snli-encoder-returns-initial-state":
            m = SNLIClassifier(bug=True)
            return dict(model=m, batch=snli_batch(), loss_fn=nn.CrossEntropyLoss(),
                        optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))
        if case_id == "snli-adam-with-sgd-lr":  # Adam given the lr of an SGD recipe
            m = SNLIClassifier()
            return dict(model=m, batch=snli_batch(), loss_fn=nn.CrossEntropyLoss(),
                        optimizer=torch.optim.Adam(m.parameters(), lr=1.0))

    if case_id == "litft-healthy-frozen-backbone-intended":
        return dict(model=lit_transfer(), batch=below_five(), frozen="feature_extractor")
    if case_id == "litft-labels-shuffled-apart":
        return dict(model=lit_transfer(), batch=digit_loader(shuffle_labels_apart=True), frozen="feature_extractor")
    raise KeyError(case_id)


CASES = (
    "distilbert-eval-left", "gcn-softmax-into-cross-entropy", "seq2seq-view-for-transpose",
    "sr-unseeded-noise-generator", "vit-initializer-range-1", "regression-targets-mean-50",
    "snli-encoder-returns-initial-state", "litft-labels-shuffled-apart", "snli-adam-with-sgd-lr",
    "regression-healthy-sgd", "distilbert-healthy-warmup", "litft-healthy-frozen-backbone-intended",
    "gcn-healthy-dropout-weight-decay", "seq2seq-healthy-label-smoothing-cosine",
)
