"""An eighth, independent held-out set of planted bugs for the doctor (see README.md).

The bugs are the causes found in public "loss not decreasing" / "model not learning" threads, taken in the order
the searches returned them (the rule is in README.md).  Bases (data bundled with scikit-learn or synthetic, nothing
downloaded), none of them used in the seven earlier sets:
- ``deit``: ``DeiTForImageClassification`` from a tiny transformers config (image 8, patch 2, one channel; no
  download), its own loss from ``labels``, AdamW (+ ``get_linear_schedule_with_warmup``) as transformers'
  ``run_image_classification_no_trainer.py``, on scikit-learn digits;
- ``mistral``: ``MistralForCausalLM`` from a tiny transformers config (no download), its own loss from ``labels``,
  AdamW, as ``run_clm_no_trainer.py``;
- ``cifartut``: the ``Net`` of PyTorch's "Training a Classifier" (CIFAR-10) tutorial (conv 5x5 -> max-pool -> conv
  5x5 -> 120 -> 84 -> 10, ReLU), CrossEntropyLoss, SGD with momentum 0.9, on digits brought to 3 x 32 x 32;
- ``oft``: a small single-object detector written by hand after the head layout of tom-roddick/oft (``OftNet``:
  a conv trunk, then one head per target: score, position, dimension) and its ``compute_loss`` (a score loss plus
  L1 losses on position and dimension, summed), Adam, on synthetic 16x16 images of one square or disc;
- ``littransformer``: Lightning's own demo ``lightning.pytorch.demos.LightningTransformer`` (``nn.Transformer``
  encoder-decoder, ``log_softmax`` output, ``nll_loss`` in ``training_step``, SGD lr 0.1 in
  ``configure_optimizers``), small widths.

``build(case_id) -> dict`` of ``nbdebug.doctor`` arguments.  What each case should get first is in labels.json,
written before the doctor ran on any case.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


# -- data ------------------------------------------------------------------------------------------------------
def digits(n=64, offset=0, seed=81, size=8, channels=1):
    """scikit-learn digits standardised with the whole set's pixel mean and std, rows ``offset .. offset + n`` of
    one fixed shuffle (the batch is offset 0; other offsets are digits not in it); ``size`` > 8 upsamples
    (bilinear), ``channels`` repeats the grey channel."""
    from sklearn.datasets import load_digits

    d = load_digits()
    idx = torch.randperm(len(d.target), generator=torch.Generator().manual_seed(seed))[offset:offset + n]
    x = torch.tensor(d.data, dtype=torch.float32)
    x = ((x - x.mean()) / x.std())[idx].reshape(n, 1, 8, 8)
    if size != 8:
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    return x.repeat(1, channels, 1, 1), torch.tensor(d.target)[idx]


def wrongly_annotated(y, fraction=0.5, seed=82, classes=10):
    """A share of the labels annotated wrongly: each chosen label moved to another class at random (an annotation
    error, not a shuffle of the column)."""
    g = torch.Generator().manual_seed(seed)
    y = y.clone()
    pick = torch.randperm(len(y), generator=g)[: int(len(y) * fraction)]
    y[pick] = (y[pick] + torch.randint(1, classes, (len(pick),), generator=g)) % classes
    return y


def image_batch(labels=None):
    x, y = digits()
    return {"pixel_values": x, "labels": y if labels is None else labels}


def lm_batch(n=16, length=24, vocab=64, seed=83):
    """Sequences that repeat a random pattern of 6 tokens; labels = input_ids (the model shifts them)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (n, 6), generator=g).repeat(1, length // 6)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


def next_token_pairs(n=16, length=16, vocab=32, seed=84):
    """(inputs, target) as the Lightning demo's ``WikiText2`` gives them: target = inputs shifted by one."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (n, 6), generator=g).repeat(1, (length + 1) // 6 + 1)[:, : length + 1]
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


def shapes(n=64, seed=85, size=16):
    """One square or disc per image on a noisy background: score target = which shape, position = its centre
    (x, y scaled to 0..1), dimension = its half-width (scaled)."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32),
                            indexing="ij")
    kind = torch.randint(0, 2, (n,), generator=g)
    half = 2 + 3 * torch.rand(n, generator=g)
    cx = half + (size - 1 - 2 * half) * torch.rand(n, generator=g)
    cy = half + (size - 1 - 2 * half) * torch.rand(n, generator=g)
    imgs = 0.2 * torch.randn(n, 1, size, size, generator=g)
    for i in range(n):
        if kind[i] == 0:
            m = ((xx - cx[i]).abs() <= half[i]) & ((yy - cy[i]).abs() <= half[i])
        else:
            m = (xx - cx[i]) ** 2 + (yy - cy[i]) ** 2 <= half[i] ** 2
        imgs[i, 0][m] += 1.0
    targets = (kind, torch.stack([cx, cy], 1) / (size - 1), (half / 5).unsqueeze(1))
    return imgs, targets


# -- models ----------------------------------------------------------------------------------------------------
def deit():
    from transformers import DeiTConfig, DeiTForImageClassification

    torch.manual_seed(0)
    cfg = DeiTConfig(image_size=8, patch_size=2, num_channels=1, hidden_size=32, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=64, num_labels=10)
    return DeiTForImageClassification(cfg)


class DeiTProbabilities(nn.Module):
    """The classifier as the thread's users write it: the model's forward ends in ``softmax`` so that it "returns
    probabilities", and the training loop passes those to ``nn.CrossEntropyLoss``."""

    def __init__(self):
        super().__init__()
        self.deit = deit()

    def forward(self, pixel_values):
        return torch.softmax(self.deit(pixel_values=pixel_values).logits, dim=1)


def mistral():
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    cfg = MistralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                        sliding_window=None, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return MistralForCausalLM(cfg)


class MistralNoGradBody(nn.Module):
    """A causal LM whose forward runs the decoder body under ``torch.no_grad()`` (added there by mistake, as in the
    thread) and only the LM head on its output with grad: the embeddings and every decoder layer get no gradient
    although they require one and are in the optimizer."""

    def __init__(self):
        super().__init__()
        self.lm = mistral()

    def forward(self, input_ids, attention_mask=None, labels=None):
        from transformers.modeling_outputs import CausalLMOutputWithPast

        with torch.no_grad():
            hidden = self.lm.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        logits = self.lm.lm_head(hidden)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))
        return CausalLMOutputWithPast(loss=loss, logits=logits)


class TutorialNet(nn.Module):
    """PyTorch's CIFAR-10 tutorial ``Net`` as written there."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class OftLike(nn.Module):
    """Conv trunk (3 x conv 3x3 + GroupNorm + ReLU, stride 2 twice), global pooling, then OFT's separate heads:
    ``classifier`` (score logits), ``position`` (x, y) and ``dimension`` (size)."""

    def __init__(self, width=32):
        super().__init__()
        layers, cin = [], 1
        for stride in (1, 2, 2):
            layers += [nn.Conv2d(cin, width, 3, stride, 1), nn.GroupNorm(8, width), nn.ReLU()]
            cin = width
        self.frontend = nn.Sequential(*layers)
        self.classifier = nn.Linear(width, 2)
        self.position = nn.Linear(width, 2)
        self.dimension = nn.Linear(width, 1)

    def forward(self, x):
        h = self.frontend(x).mean(dim=(2, 3))
        return self.classifier(h), self.position(h), self.dimension(h)


def oft_loss(outputs, targets, score_only=False):
    """OFT's ``compute_loss`` shape: score loss + position loss + dimension loss.  ``score_only`` is the thread's
    bug: a line left in from a test returns the score loss alone, so the position and dimension heads are never
    trained (their losses are computed and logged, not optimised)."""
    score, pos, dim = outputs
    kind, pos_t, dim_t = targets
    score_loss = F.cross_entropy(score, kind)
    pos_loss = F.l1_loss(pos, pos_t)
    dim_loss = F.l1_loss(dim, dim_t)
    if score_only:
        return score_loss
    return score_loss + pos_loss + dim_loss


def oft_loss_score_only(outputs, targets):
    return oft_loss(outputs, targets, score_only=True)


def lit_transformer_smoothed_clipped(vocab=32):
    """Lightning's demo ``LightningTransformer`` (small widths: ninp 32, nhid 64, 2 heads, 1+1 layers, its dropout
    0.2), its SGD lr 0.1, with the two things an ordinary run adds: label smoothing 0.1 on its ``nll_loss``
    (written out, as ``nll_loss`` has no ``label_smoothing``: 0.9 * nll + 0.1 * mean over the vocabulary of
    -log p) and gradient clipping at norm 1.0 in ``configure_gradient_clipping`` (what ``Trainer(
    gradient_clip_val=1.0)`` does)."""
    from lightning.pytorch.demos import LightningTransformer, Transformer

    class SmoothedClipped(LightningTransformer):
        clip_val = 1.0

        def __init__(self):
            super().__init__(vocab_size=vocab)
            self.model = Transformer(vocab_size=vocab, ninp=32, nhead=2, nhid=64, nlayers=1, dropout=0.2)

        def training_step(self, batch, batch_idx):
            inputs, target = batch
            logp = self(inputs, target)
            loss = 0.9 * F.nll_loss(logp, target.view(-1)) - 0.1 * logp.mean(dim=-1).mean()
            return loss

        def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
            self.clip_gradients(optimizer, gradient_clip_val=self.clip_val, gradient_clip_algorithm="norm")

    torch.manual_seed(0)
    return SmoothedClipped()


# -- cases -----------------------------------------------------------------------------------------------------
def build(case_id):
    torch.manual_seed(0)
    if case_id == "deit-softmax-into-cross-entropy":  # T1
        m = DeiTProbabilities()
        x, y = digits()
        return dict(model=m, batch=(x, y), loss_fn=nn.CrossEntropyLoss(),
                    optimizer=torch.optim.AdamW(m.parameters(), lr=1e-3))
    if case_id == "deit-labels-wrongly-annotated":  # T2
        m = deit()
        return dict(model=m, batch=image_batch(labels=wrongly_annotated(digits()[1])),
                    optimizer=torch.optim.AdamW(m.parameters(), lr=1e-3))
    if case_id == "mistral-no-grad-around-the-body":  # T3
        m = MistralNoGradBody()
        return dict(model=m, batch=lm_batch(), optimizer=torch.optim.AdamW(m.parameters(), lr=1e-3))
    if case_id == "oft-loss-returns-score-only":  # T4
        torch.manual_seed(0)
        m = OftLike()
        return dict(model=m, batch=shapes(), loss_fn=oft_loss_score_only,
                    optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))

    if case_id == "cifartut-healthy-sgd-momentum":
        m = TutorialNet()
        return dict(model=m, batch=digits(size=32, channels=3), loss_fn=nn.CrossEntropyLoss(),
                    optimizer=torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9))
    if case_id == "deit-healthy-adamw-warmup":
        from transformers import get_linear_schedule_with_warmup

        m = deit()
        decay = [p for n, p in m.named_parameters() if not ("bias" in n or "layernorm" in n)]
        no_decay = [p for n, p in m.named_parameters() if "bias" in n or "layernorm" in n]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                 {"params": no_decay, "weight_decay": 0.0}], lr=1e-3)
        get_linear_schedule_with_warmup(opt, num_warmup_steps=20, num_training_steps=200)
        return dict(model=m, batch=image_batch(), optimizer=opt)
    if case_id == "mistral-healthy-frozen-embeddings-intended":
        m = mistral()
        m.model.embed_tokens.requires_grad_(False)
        opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-3)
        return dict(model=m, batch=lm_batch(), optimizer=opt, frozen=["model.embed_tokens"])
    if case_id == "littransformer-healthy-clip-label-smoothing":
        return dict(model=lit_transformer_smoothed_clipped(), batch=next_token_pairs())
    raise KeyError(case_id)


CASES = (
    "deit-softmax-into-cross-entropy", "deit-labels-wrongly-annotated", "mistral-no-grad-around-the-body",
    "oft-loss-returns-score-only",
    "cifartut-healthy-sgd-momentum", "deit-healthy-adamw-warmup", "mistral-healthy-frozen-embeddings-intended",
    "littransformer-healthy-clip-label-smoothing",
)
