"""A sixth, independent held-out set of planted bugs for the doctor (see README.md).

The bugs follow Andrej Karpathy's "most common neural net mistakes" list, then a second public list, in their
order (the rule is in README.md).  Bases (data bundled with scikit-learn or synthetic, nothing downloaded), none
of them used in the five earlier sets:
- ``mixer``: an MLP-Mixer (patch embedding, token-mixing and channel-mixing MLPs with LayerNorm and GELU, global
  average pool, linear head) on scikit-learn digits 8x8, patches 2x2;
- ``conformer``: a one-block Conformer-style audio classifier (half-step feed-forward, self-attention, convolution
  module with GLU, depthwise conv, BatchNorm and SiLU, feed-forward, LayerNorm; mean pool, linear head) on
  framed spectra of synthetic tones;
- ``tagger``: a small decoder-only Transformer (causal mask, sequence-first ``nn.TransformerEncoder`` as its
  default layout) tagging each token of a synthetic sequence;
- ``deepfm``: DeepFM (first-order weights, factorisation-machine pairwise term over field embeddings, a deep MLP
  with BatchNorm and dropout) on synthetic clicks;
- ``metric``: an embedding MLP trained with a batch-hard triplet loss (squared L2) on scikit-learn digits;
- ``opt``: ``OPTForCausalLM`` from a tiny transformers config (no download), AdamW + linear warm-up.

``build(case_id) -> dict`` of ``nbdebug.doctor`` arguments.  What each case should get first is in labels.json,
written before anything ran on any case.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


# -- data ------------------------------------------------------------------------------------------------------
def digits(n=64, seed=61, flat=False):
    from sklearn.datasets import load_digits

    d = load_digits()
    idx = torch.randperm(len(d.target), generator=torch.Generator().manual_seed(seed))[:n]
    x = torch.tensor(d.data, dtype=torch.float32)[idx] / 16.0
    x = (x - 0.3) / 0.4
    return (x if flat else x.reshape(n, 1, 8, 8)), torch.tensor(d.target)[idx]


def tones(n=48, frames=16, hop=32, seed=62):
    """Three classes of noisy tones (frequency bins 3, 6 and 10 of a 32-sample frame, random phase and amplitude),
    framed and turned into standardised log-magnitude spectra: (n, frames, 17)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 3
    t = torch.arange(frames * hop, dtype=torch.float32)
    freq = torch.tensor([3.0, 6.0, 10.0])[y] / hop
    amp = 0.5 + torch.rand(n, 1, generator=g)
    phase = 6.283 * torch.rand(n, 1, generator=g)
    wave = amp * torch.sin(6.283 * freq[:, None] * t[None] + phase) + 0.3 * torch.randn(n, t.numel(), generator=g)
    spec = torch.fft.rfft(wave.reshape(n, frames, hop), dim=-1).abs().add(1e-3).log()
    return (spec - spec.mean()) / spec.std(), y


def tag_sequences(n=32, length=12, vocab=20, seed=63):
    """Token ids (n, length), batch-first as a DataLoader gives them; the tag of a token is (token + previous token)
    mod 3."""
    g = torch.Generator().manual_seed(seed)
    tok = torch.randint(0, vocab, (n, length), generator=g)
    prev = torch.cat([torch.zeros(n, 1, dtype=torch.long), tok[:, :-1]], 1)
    return tok, (tok + prev) % 3


FIELDS = (10, 8, 6, 5)


def clicks(n=256, seed=64):
    """Four categorical fields and three dense features; a click when a latent score (field effects, one pairwise
    interaction, a dense term) is above its median.  Returns ((ids, dense), labels as float (n, 1))."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.stack([torch.randint(0, c, (n,), generator=g) for c in FIELDS], 1)
    dense = torch.randn(n, 3, generator=g)
    effects = [torch.randn(c, generator=g) for c in FIELDS]
    inter = torch.randn(FIELDS[0], FIELDS[1], generator=g)
    score = sum(e[ids[:, i]] for i, e in enumerate(effects)) + inter[ids[:, 0], ids[:, 1]] + dense[:, 0]
    return (ids, dense), (score > score.median()).float().unsqueeze(1)


def lm_batch(n=16, length=16, vocab=40, seed=65):
    """Sequences that repeat a random pattern of 4 tokens; labels = input_ids (the model shifts them)."""
    g = torch.Generator().manual_seed(seed)
    pat = torch.randint(4, vocab, (n, 4), generator=g)
    ids = pat.repeat(1, length // 4)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


# -- models ----------------------------------------------------------------------------------------------------
class MixerBlock(nn.Module):
    def __init__(self, tokens, dim, token_hidden, channel_hidden):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.token_mlp = nn.Sequential(nn.Linear(tokens, token_hidden), nn.GELU(), nn.Linear(token_hidden, tokens))
        self.norm2 = nn.LayerNorm(dim)
        self.channel_mlp = nn.Sequential(nn.Linear(dim, channel_hidden), nn.GELU(), nn.Linear(channel_hidden, dim))

    def forward(self, x):  # (B, tokens, dim)
        x = x + self.token_mlp(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.norm2(x))


class MLPMixer(nn.Module):
    def __init__(self, classes=10, patch=2, dim=32, depth=2, softmax_head=False):
        super().__init__()
        tokens = (8 // patch) ** 2
        self.stem = nn.Conv2d(1, dim, patch, stride=patch)
        self.blocks = nn.Sequential(*[MixerBlock(tokens, dim, 32, 64) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)
        self.softmax = nn.Softmax(dim=1) if softmax_head else nn.Identity()

    def forward(self, x):
        x = self.stem(x).flatten(2).transpose(1, 2)
        x = self.norm(self.blocks(x)).mean(dim=1)
        return self.softmax(self.head(x))


class ConformerBlock(nn.Module):
    def __init__(self, dim=32, heads=4, kernel=7, dropout=0.1):
        super().__init__()
        self.ff1 = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.SiLU(), nn.Dropout(dropout),
                                 nn.Linear(4 * dim, dim), nn.Dropout(dropout))
        self.attn_norm = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, dropout=dropout, batch_first=True)
        self.conv_norm = nn.LayerNorm(dim)
        self.pointwise1 = nn.Conv1d(dim, 2 * dim, 1)
        self.depthwise = nn.Conv1d(dim, dim, kernel, padding=kernel // 2, groups=dim)
        self.bn = nn.BatchNorm1d(dim)
        self.pointwise2 = nn.Conv1d(dim, dim, 1)
        self.conv_drop = nn.Dropout(dropout)
        self.ff2 = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.SiLU(), nn.Dropout(dropout),
                                 nn.Linear(4 * dim, dim), nn.Dropout(dropout))
        self.out_norm = nn.LayerNorm(dim)

    def forward(self, x):  # (B, T, dim)
        x = x + 0.5 * self.ff1(x)
        h = self.attn_norm(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        h = self.conv_norm(x).transpose(1, 2)
        h = F.glu(self.pointwise1(h), dim=1)
        h = self.pointwise2(F.silu(self.bn(self.depthwise(h))))
        x = x + self.conv_drop(h).transpose(1, 2)
        return self.out_norm(x + 0.5 * self.ff2(x))


class ConformerClassifier(nn.Module):
    def __init__(self, features=17, dim=32, classes=3, softmax_dim=None):
        super().__init__()
        self.proj = nn.Linear(features, dim)
        self.block = ConformerBlock(dim)
        self.head = nn.Linear(dim, classes)
        self.softmax_dim = softmax_dim

    def forward(self, x):
        logits = self.head(self.block(self.proj(x)).mean(dim=1))
        return logits if self.softmax_dim is None else F.log_softmax(logits, dim=self.softmax_dim)


class Tagger(nn.Module):
    """Decoder-only tagger; batch-first tokens in, the encoder run sequence-first (``nn.TransformerEncoder``'s
    default), tag logits (B, tags, T) out for ``CrossEntropyLoss``."""

    def __init__(self, vocab=20, dim=32, tags=3, layers=2, view_bug=False):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(16, 1, dim) * 0.1)
        layer = nn.TransformerEncoderLayer(dim, 4, 64, dropout=0.0)
        self.decoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, tags)
        self.view_bug = view_bug

    def forward(self, tokens):  # (B, T)
        b, t = tokens.shape
        x = self.embed(tokens.transpose(0, 1)) + self.pos[:t]  # (T, B, dim)
        mask = nn.Transformer.generate_square_subsequent_mask(t)
        x = self.decoder(x, mask=mask, is_causal=True)  # (T, B, dim)
        x = x.view(b, t, -1) if self.view_bug else x.transpose(0, 1)  # back to (B, T, dim)
        return self.head(x).transpose(1, 2)  # (B, tags, T)


class DeepFM(nn.Module):
    def __init__(self, fields=FIELDS, dense=3, k=8, hidden=(64, 32), dropout=0.0):
        super().__init__()
        total = sum(fields)
        self.register_buffer("offsets", torch.tensor([0, *torch.tensor(fields).cumsum(0)[:-1].tolist()]))
        self.first = nn.Embedding(total, 1)
        self.dense_first = nn.Linear(dense, 1)
        self.emb = nn.Embedding(total, k)
        nn.init.normal_(self.emb.weight, std=0.1)
        layers, width = [], len(fields) * k + dense
        for h in hidden:
            layers += [nn.Linear(width, h), nn.BatchNorm1d(h), nn.ReLU(), nn.Dropout(dropout)]
            width = h
        self.deep = nn.Sequential(*layers, nn.Linear(width, 1))

    def forward(self, ids, dense):
        idx = ids + self.offsets
        e = self.emb(idx)  # (B, fields, k)
        fm = 0.5 * (e.sum(1).pow(2) - e.pow(2).sum(1)).sum(1, keepdim=True)
        first = self.first(idx).sum(1) + self.dense_first(dense)
        return first + fm + self.deep(torch.cat([e.flatten(1), dense], 1))


def hand_written_bce(logits, y):
    """Binary cross-entropy written out from its formula, on probabilities."""
    p = torch.sigmoid(logits)
    return -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()


class EmbeddingNet(nn.Module):
    def __init__(self, init_std=None):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                                 nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 32))
        if init_std is not None:
            for m in self.net:
                if isinstance(m, nn.Linear):
                    nn.init.normal_(m.weight, std=init_std)
                    nn.init.zeros_(m.bias)

    def forward(self, x):
        return self.net(x)


def batch_hard_triplet(emb, labels, margin=1.0):
    """Batch-hard triplet loss on squared L2 distances (hardest positive, hardest negative per anchor)."""
    d = (emb[:, None] - emb[None]).pow(2).sum(-1)
    same = labels[:, None] == labels[None]
    hardest_pos = (d * same).max(1).values
    hardest_neg = (d + same * 1e9).min(1).values
    return F.relu(hardest_pos - hardest_neg + margin).mean()


def opt_lm():
    from transformers import OPTConfig, OPTForCausalLM

    torch.manual_seed(0)
    cfg = OPTConfig(vocab_size=40, hidden_size=32, num_hidden_layers=2, ffn_dim=64, num_attention_heads=4,
                    max_position_embeddings=32, word_embed_proj_dim=32, pad_token_id=1, bos_token_id=2,
                    eos_token_id=2, dropout=0.1, attention_dropout=0.0)
    return OPTForCausalLM(cfg)


# -- cases -----------------------------------------------------------------------------------------------------
def build(case_id):
    torch.manual_seed(0)
    if case_id == "conformer-left-in-eval-mode":  # K2
        m = ConformerClassifier()
        m.eval()
        return dict(model=m, batch=tones(), loss_fn=nn.CrossEntropyLoss(),
                    optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))
    if case_id == "mixer-softmax-into-cross-entropy":  # K4
        m = MLPMixer(softmax_head=True)
        return dict(model=m, batch=digits(), loss_fn=nn.CrossEntropyLoss(),
                    optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))
    if case_id == "tagger-view-for-transpose":  # K6
        m = Tagger(view_bug=True)
        return dict(model=m, batch=tag_sequences(), loss_fn=nn.CrossEntropyLoss(),
                    optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))
    if case_id == "conformer-log-softmax-over-batch":  # S1
        m = ConformerClassifier(softmax_dim=0)
        return dict(model=m, batch=tones(), loss_fn=nn.NLLLoss(),
                    optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))
    if case_id == "deepfm-hand-written-bce-log-zero":  # S5
        m = DeepFM()
        return dict(model=m, batch=clicks(), loss_fn=hand_written_bce,
                    optimizer=torch.optim.Adam(m.parameters(), lr=1e-2))
    if case_id == "metric-init-std-1e-4":  # S6
        m = EmbeddingNet(init_std=1e-4)
        return dict(model=m, batch=digits(flat=True), loss_fn=batch_hard_triplet,
                    optimizer=torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9))

    if case_id == "mixer-healthy-sgd-momentum":
        m = MLPMixer()
        return dict(model=m, batch=digits(), loss_fn=nn.CrossEntropyLoss(),
                    optimizer=torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-5))
    if case_id == "opt-healthy-adamw-warmup":
        from transformers import get_linear_schedule_with_warmup

        m = opt_lm()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.01)
        get_linear_schedule_with_warmup(opt, num_warmup_steps=20, num_training_steps=200)
        return dict(model=m, batch=lm_batch(), optimizer=opt)
    if case_id == "tagger-healthy-frozen-embeddings-intended":
        m = Tagger()
        m.embed.requires_grad_(False)
        return dict(model=m, batch=tag_sequences(), loss_fn=nn.CrossEntropyLoss(),
                    optimizer=torch.optim.Adam([p for p in m.parameters() if p.requires_grad], lr=1e-3),
                    frozen=["embed"])
    if case_id == "deepfm-healthy-dropout-weight-decay":
        m = DeepFM(dropout=0.2)
        return dict(model=m, batch=clicks(), loss_fn=nn.BCEWithLogitsLoss(),
                    optimizer=torch.optim.Adam(m.parameters(), lr=1e-3, weight_decay=1e-5))
    raise KeyError(case_id)


CASES = (
    "conformer-left-in-eval-mode", "mixer-softmax-into-cross-entropy", "tagger-view-for-transpose",
    "conformer-log-softmax-over-batch", "deepfm-hand-written-bce-log-zero", "metric-init-std-1e-4",
    "mixer-healthy-sgd-momentum", "opt-healthy-adamw-warmup", "tagger-healthy-frozen-embeddings-intended",
    "deepfm-healthy-dropout-weight-decay",
)
