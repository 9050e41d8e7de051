"""A second, independent held-out set of planted bugs for the doctor (see README.md).

Bases (the architecture and loop each case copies; data bundled with Python or scikit-learn, nothing downloaded):
- ``wlm``: pytorch/examples ``word_language_model`` (``RNNModel``: embedding, dropout, 2-layer LSTM, decoder,
  ``log_softmax`` + ``NLLLoss``; sequence-first batches from ``batchify``/``get_batch``), character level on the
  Zen of Python (the standard library's ``this`` module);
- ``gpt2``: transformers' ``run_clm`` loop (``GPT2LMHeadModel`` from a tiny config, a dict batch whose
  ``labels`` the model shifts itself, AdamW with ``get_linear_schedule_with_warmup``), on the Zen's lines
  padded with the end-of-text token, as GPT-2 users do;
- ``vae``: pytorch/examples ``vae/main.py`` (fc1, fc21/fc22, reparameterise, fc3, fc4 + sigmoid; BCE summed +
  KL divergence, Adam lr=1e-3) on digits 8x8 scaled to [0, 1];
- ``dcgan``: pytorch/examples ``dcgan/main.py`` Discriminator (4x4 stride-2 convs, BatchNorm, LeakyReLU 0.2,
  Adam lr=2e-4 betas (0.5, 0.999)) reused as a classifier on digits upsampled to 32 x 32;
- ``vit``: a small Vision Transformer written by hand (patch conv, class token, pre-norm
  ``nn.TransformerEncoderLayer`` x 2, LayerNorm, linear head; AdamW with a linear warm-up), on digits 8x8;
- ``convnext``: ConvNeXt-like blocks written by hand (patchify stem + channel LayerNorm, depthwise 7x7 conv,
  LayerNorm, pointwise MLP with GELU, layer scale, residual), SGD with momentum, on digits 8x8;
- ``diabetes``: a regression MLP (Linear, BatchNorm1d, ReLU) on scikit-learn's diabetes set, features and target
  standardised, MSELoss, SGD with momentum;
- ``litae``: the LitAutoEncoder of Lightning's README (encoder 64-64-3, decoder 3-64-64, ``training_step`` with
  ``F.mse_loss`` and ``self.log``, Adam lr=1e-3 in ``configure_optimizers``), on digits.

``build(case_id) -> dict`` of ``nbdebug.doctor`` arguments.  What each case should get first is in labels.json,
written and committed before the doctor ran on any case.
"""

from __future__ import annotations

import contextlib
import io

import torch
import torch.nn as nn
import torch.nn.functional as F


# -- data ------------------------------------------------------------------------------------------------------
def zen() -> str:
    import codecs

    with contextlib.redirect_stdout(io.StringIO()):  # importing `this` prints the Zen once
        import this
    return codecs.decode(this.s, "rot13")


def digits(n=64, seed=1):
    from sklearn.datasets import load_digits

    d = load_digits()
    g = torch.Generator().manual_seed(seed)
    idx = torch.randperm(len(d.target), generator=g)[:n]
    return torch.tensor(d.data, dtype=torch.float32)[idx] / 16.0, torch.tensor(d.target)[idx]  # x in [0, 1]


def digit_images(n=64, size=8, seed=1):
    x, y = digits(n, seed)
    img = (x.reshape(n, 1, 8, 8) - 0.3) / 0.4
    if size != 8:
        img = F.interpolate(img, size=(size, size), mode="bilinear", align_corners=False)
    return img, y


def diabetes():
    from sklearn.datasets import load_diabetes

    d = load_diabetes()
    x = torch.tensor(d.data, dtype=torch.float32)
    y = torch.tensor(d.target, dtype=torch.float32)
    return (x - x.mean(0)) / x.std(0), (y - y.mean()) / y.std()  # 442 rows, 10 features


# -- word_language_model ---------------------------------------------------------------------------------------
class RNNModel(nn.Module):  # pytorch/examples word_language_model/model.py (LSTM branch)
    def __init__(self, ntoken, ninp=64, nhid=128, nlayers=2, dropout=0.2):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, input, hidden=None):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden


def wlm_data(bsz=8, bptt=35):
    text = zen()
    vocab = sorted(set(text))
    ids = torch.tensor([vocab.index(c) for c in text])
    nbatch = ids.size(0) // bsz
    source = ids[: nbatch * bsz].view(bsz, -1).t().contiguous()  # batchify: (nbatch, bsz)
    data = source[0:bptt]  # get_batch(source, 0)
    target = source[1 : 1 + bptt].reshape(-1)
    return len(vocab), data, target, source


def wlm_loss(output, targets):  # criterion = nn.NLLLoss(); output, hidden = model(data, hidden)
    return F.nll_loss(output[0], targets)


# -- run_clm with a tiny GPT-2 ---------------------------------------------------------------------------------
def gpt2_batch(labels_mask_padding=True, n=8):
    lines = [ln for ln in zen().splitlines() if ln.strip()][1 : 1 + n]
    eos = 127  # the end-of-text id of this byte-level vocabulary, used as the pad token (pad_token = eos_token)
    ids = [[min(ord(c), 126) for c in ln] + [eos] for ln in lines]
    width = max(len(s) for s in ids)
    input_ids = torch.full((n, width), eos)
    attention_mask = torch.zeros(n, width, dtype=torch.long)
    for i, s in enumerate(ids):
        input_ids[i, : len(s)] = torch.tensor(s)
        attention_mask[i, : len(s)] = 1
    labels = input_ids.clone()
    if labels_mask_padding:
        labels[attention_mask == 0] = -100
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=128, n_positions=96, n_embd=64, n_layer=2, n_head=4, bos_token_id=127,
                     eos_token_id=127)
    return GPT2LMHeadModel(cfg)


# -- vae --------------------------------------------------------------------------------------------------------
class VAE(nn.Module):  # pytorch/examples vae/main.py, 784-400-20 scaled to 64-128-8
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.fc21 = nn.Linear(128, 8)
        self.fc22 = nn.Linear(128, 8)
        self.fc3 = nn.Linear(8, 128)
        self.fc4 = nn.Linear(128, 64)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        return mu + torch.randn_like(std) * std

    def decode(self, z):
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z))))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 64))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def vae_loss(out, x):  # loss_function of vae/main.py
    recon_x, mu, logvar = out
    bce = F.binary_cross_entropy(recon_x, x.view(-1, 64), reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


def bce_by_hand(p, t):  # a hand-written binary cross-entropy: p the probabilities, t the targets
    return -(t * torch.log(p) + (1 - t) * torch.log(1 - p)).sum()


def vae_loss_swapped(out, x):  # the same loss with the hand-written BCE, called with its arguments swapped
    recon_x, mu, logvar = out
    bce = bce_by_hand(x.view(-1, 64), recon_x)  # log of the pixels, many of which are exactly 0 or 1
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


# -- dcgan discriminator -----------------------------------------------------------------------------------------
class Discriminator(nn.Module):  # pytorch/examples dcgan/main.py, for 32 x 32 inputs (one block fewer)
    def __init__(self, nc=1, ndf=16, out=1, sigmoid=True):
        super().__init__()
        layers = [
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 4),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 4, out, 4, 1, 0, bias=False),
        ]
        if sigmoid:
            layers.append(nn.Sigmoid())
        self.main = nn.Sequential(*layers)
        self.out = out

    def forward(self, input):  # dcgan/main.py: output.view(-1, 1).squeeze(1); a 10-class head keeps (N, 10)
        out = self.main(input).flatten(1)
        return out.squeeze(1) if self.out == 1 else out


def dcgan_init(m):  # weights_init of dcgan/main.py
    name = m.__class__.__name__
    if name.find("Conv") != -1:
        nn.init.normal_(m.weight, 0.0, 0.02)
    elif name.find("BatchNorm") != -1:
        nn.init.normal_(m.weight, 1.0, 0.02)
        nn.init.zeros_(m.bias)


# -- vit ----------------------------------------------------------------------------------------------------------
class ViT(nn.Module):
    def __init__(self, classes=10, dim=64, depth=2, heads=4, patch=2, img=8):
        super().__init__()
        self.patch = nn.Conv2d(1, dim, patch, patch)
        n = (img // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, dim * 2, dropout=0.1, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.size(0), -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.encoder(x)[:, 0]))


def warmup(opt, warmup_steps=10, total=200):  # linear warm-up then linear decay (get_linear_schedule_with_warmup)
    def f(step):
        if step < warmup_steps:
            return step / warmup_steps
        return max(0.0, (total - step) / (total - warmup_steps))

    return torch.optim.lr_scheduler.LambdaLR(opt, f)


# -- convnext -----------------------------------------------------------------------------------------------------
class LayerNorm2d(nn.LayerNorm):  # channels-first LayerNorm, as ConvNeXt's stem and downsampling use
    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class Block(nn.Module):  # ConvNeXt block: dwconv 7x7 -> LN -> 4x MLP with GELU -> layer scale -> residual
    def __init__(self, dim, layer_scale=1e-6):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(layer_scale * torch.ones(dim))

    def forward(self, x):
        h = self.dwconv(x).permute(0, 2, 3, 1)
        h = self.gamma * self.pwconv2(self.act(self.pwconv1(self.norm(h))))
        return x + h.permute(0, 3, 1, 2)


class ConvNeXtTiny(nn.Module):
    def __init__(self, classes=10, dim=32, depth=2):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, dim, 2, 2), LayerNorm2d(dim))
        self.stages = nn.Sequential(*[Block(dim) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.stages(self.stem(x))
        return self.head(self.norm(x.mean((2, 3))))


def pretrained_convnext(steps=60):
    """A ConvNeXtTiny "pretrained" on another sample of digits, with a fresh head for the new task."""
    m = ConvNeXtTiny()
    x, y = digit_images(seed=2)
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread is the fastest on a shared machine
    try:
        for _ in range(steps):
            opt.zero_grad()
            F.cross_entropy(m(x), y).backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    m.head = nn.Linear(32, 10)
    m.zero_grad(set_to_none=True)  # as if loaded from a checkpoint: no gradients left from the pretraining
    return m


# -- diabetes -----------------------------------------------------------------------------------------------------
def diabetes_mlp():
    return nn.Sequential(nn.Linear(10, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                         nn.Linear(64, 1))


def mse_flat(out, y):  # the healthy loss: the (N, 1) output against the (N,) target, shapes matched
    return F.mse_loss(out.squeeze(1), y)


# -- Lightning's LitAutoEncoder -----------------------------------------------------------------------------------
def lit_autoencoder(lr=1e-3):
    import lightning.pytorch as pl

    class LitAutoEncoder(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 3))
            self.decoder = nn.Sequential(nn.Linear(3, 64), nn.ReLU(), nn.Linear(64, 64))

        def training_step(self, batch, batch_idx):
            x, _ = batch
            x = x.view(x.size(0), -1)
            z = self.encoder(x)
            x_hat = self.decoder(z)
            loss = F.mse_loss(x_hat, x)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=lr)

    return LitAutoEncoder()


# -- the cases ------------------------------------------------------------------------------------------------------
def build(case_id):  # noqa: C901 - one branch per case, read top to bottom
    torch.manual_seed(0)
    if case_id == "wlm-labels-not-shifted":
        ntoken, data, _, source = wlm_data()
        m = RNNModel(ntoken)
        # get_batch written as target = source[i:i+seq_len]: the input itself, not the next character
        return dict(model=m, batch=(data, source[0:35].reshape(-1)), loss_fn=wlm_loss,
                    optimizer=torch.optim.Adam(m.parameters(), lr=3e-3))

    if case_id == "gpt2-loss-over-padding":
        m = gpt2()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.0)
        return dict(model=m, batch=gpt2_batch(labels_mask_padding=False), optimizer=opt)

    if case_id == "vae-log-of-zero":
        x, _ = digits()
        m = VAE()
        return dict(model=m, batch=(x, x), loss_fn=vae_loss_swapped, optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))

    if case_id.startswith("dcgan"):
        x, y = digit_images(size=32)
        if case_id == "dcgan-sigmoid-with-bce-logits":  # the discriminator's final Sigmoid kept, for "digit >= 5"
            m = Discriminator(out=1, sigmoid=True)
            m.apply(dcgan_init)
            return dict(model=m, batch=(x, (y >= 5).float()), loss_fn=nn.BCEWithLogitsLoss(),
                        optimizer=torch.optim.Adam(m.parameters(), lr=2e-4, betas=(0.5, 0.999)))
        if case_id == "dcgan-eval-left":  # a 10-class head; model.eval() from a validation cell left on
            m = Discriminator(out=10, sigmoid=False)
            m.apply(dcgan_init)
            m.eval()
            return dict(model=m, batch=(x, y), loss_fn=nn.CrossEntropyLoss(),
                        optimizer=torch.optim.Adam(m.parameters(), lr=2e-4, betas=(0.5, 0.999)))

    if case_id.startswith("vit"):
        x, y = digit_images()
        if case_id == "vit-healthy-warmup":
            m = ViT()
            opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.05)
            warmup(opt)  # the scheduler has set the group's lr to its warm-up value (0 at step 0)
            return dict(model=m, batch=(x, y), loss_fn=nn.CrossEntropyLoss(), optimizer=opt)
        if case_id == "vit-head-replaced-after-optimizer":
            m = ViT(classes=100)  # the "pretrained" model with its original head
            opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.05)
            m.head = nn.Linear(64, 10)  # the new head, swapped in after the optimizer was built
            return dict(model=m, batch=(x, y), loss_fn=nn.CrossEntropyLoss(), optimizer=opt)

    if case_id.startswith("convnext"):
        x, y = digit_images()
        sgd = dict(lr=0.05, momentum=0.9, weight_decay=5e-4)
        if case_id == "convnext-frozen-stem-intended":  # a pretrained stem frozen on purpose, and declared
            m = pretrained_convnext()
            for p in m.stem.parameters():
                p.requires_grad_(False)
            opt = torch.optim.SGD([p for p in m.parameters() if p.requires_grad], **sgd)
            return dict(model=m, batch=(x, y), loss_fn=nn.CrossEntropyLoss(), optimizer=opt, frozen="stem")
        m = ConvNeXtTiny()
        if case_id == "convnext-frozen-unintended":  # a linear-probe cell's freeze loop run before training from scratch
            for n, p in m.named_parameters():
                if not n.startswith("head"):
                    p.requires_grad_(False)
            return dict(model=m, batch=(x, y), loss_fn=nn.CrossEntropyLoss(),
                        optimizer=torch.optim.SGD(m.parameters(), **sgd))
        if case_id == "convnext-labels-shuffled":  # the labels shuffled on their own before the dataset was built
            xa, ya = digit_images(n=256)
            ya = ya[torch.randperm(len(ya), generator=torch.Generator().manual_seed(1))]
            dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xa, ya), batch_size=64, shuffle=True,
                                             generator=torch.Generator().manual_seed(0))
            return dict(model=m, batch=None, dataloader=dl, loss_fn=nn.CrossEntropyLoss(),
                        optimizer=torch.optim.SGD(m.parameters(), **sgd))

    if case_id.startswith("diabetes"):
        x, y = diabetes()
        m = diabetes_mlp()
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
        if case_id == "diabetes-healthy-sgd-momentum":
            return dict(model=m, batch=(x[:64], y[:64]), loss_fn=mse_flat, optimizer=opt)
        if case_id == "diabetes-mse-broadcast":  # (N, 1) output against an (N,) target
            return dict(model=m, batch=(x[:64], y[:64]), loss_fn=nn.MSELoss(), optimizer=opt)
        if case_id == "diabetes-weight-decay-typo":  # weight_decay=5e-1 typed for 5e-4
            return dict(model=m, batch=(x[:64], y[:64]), loss_fn=mse_flat,
                        optimizer=torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-1))
        if case_id == "diabetes-batchnorm-batch-of-one":  # 442 rows, batch_size=63: the last batch has 1 row
            dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=63)
            last = list(dl)[-1]
            return dict(model=m, batch=(last[0], last[1]), loss_fn=mse_flat, optimizer=opt)

    if case_id.startswith("litae"):
        x, y = digits()
        x = (x - 0.3) / 0.4
        if case_id == "litae-healthy":
            return dict(model=lit_autoencoder(), batch=(x, y))
        if case_id == "litae-lr-too-low":
            return dict(model=lit_autoencoder(lr=1e-7), batch=(x, y))
    raise KeyError(case_id)


CASES = (
    "wlm-labels-not-shifted", "gpt2-loss-over-padding", "vae-log-of-zero", "dcgan-sigmoid-with-bce-logits",
    "dcgan-eval-left", "vit-healthy-warmup", "vit-head-replaced-after-optimizer", "convnext-frozen-stem-intended",
    "convnext-frozen-unintended", "convnext-labels-shuffled", "diabetes-healthy-sgd-momentum",
    "diabetes-mse-broadcast", "diabetes-weight-decay-typo", "diabetes-batchnorm-batch-of-one", "litae-healthy",
    "litae-lr-too-low",
)
