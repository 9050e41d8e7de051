"""A fifth, independent held-out set of planted bugs for the doctor (see README.md).

The bugs follow Daniel Holden's checklist "My Neural Network isn't working! What should I do?" in its order (the
rule is in README.md). Bases (the architecture and loop each case copies; data bundled with scikit-learn or
synthetic, nothing downloaded), none of them used in the four earlier sets:
- ``tcn``: locuslab/TCN ``TCN/tcn.py`` (``Chomp1d``, ``TemporalBlock`` with weight-normed causal dilated convs,
  ReLU, dropout and a residual, ``TemporalConvNet``) and ``adding_problem`` (a ``Linear`` on the last step, MSE,
  Adam), scaled down, on the adding problem;
- ``ncf``: guoyang9/NCF ``model.py`` (``NCF``: GMF and MLP embeddings of users and items, an MLP tower with
  dropout, a predict layer on the concatenation, ``BCEWithLogitsLoss``, Adam lr=1e-3) on synthetic implicit
  feedback from rank-3 user/item preferences;
- ``roberta``: ``RobertaForSequenceClassification`` from a tiny transformers config (no download), AdamW;
- ``pointnet``: fxia22/pointnet.pytorch ``pointnet/model.py`` (``PointNetfeat``: shared 1x1 convs with
  BatchNorm, max-pool; ``PointNetCls``: fc 3 layers with BatchNorm and dropout 0.3, ``log_softmax`` + NLL, Adam),
  widths scaled down, the input transform (STN) left out, on synthetic sphere / cube / cylinder point clouds;
- ``unet``: milesial/Pytorch-UNet ``unet/unet_parts.py`` + ``unet_model.py`` (``DoubleConv`` conv-BN-ReLU x2,
  ``Down``, bilinear ``Up`` with skip concatenation, ``OutConv``; one class: ``BCEWithLogitsLoss``; RMSprop as
  ``train.py``), base width 8, on synthetic 16x16 disc / square masks;
- ``t5``: ``T5ForConditionalGeneration`` from a tiny transformers config, loss from ``labels``, on a
  copy-the-sequence task;
- ``vgg``: a VGG-style conv stack (torchvision ``vgg.py``'s ``make_layers`` shape, written out by hand since
  torchvision is not installable) trained with pytorch/examples ``imagenet/main.py``'s loop (CrossEntropyLoss,
  SGD lr=0.1 momentum 0.9 weight_decay 1e-4), on scikit-learn digits 8x8.

``build(case_id) -> dict`` of ``nbdebug.doctor`` arguments.  What each case should get first is in labels.json,
written and committed before the doctor ran on any case.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.parametrizations import weight_norm


# -- data ------------------------------------------------------------------------------------------------------
def digits(n=64, seed=51):
    from sklearn.datasets import load_digits

    d = load_digits()
    idx = torch.randperm(len(d.target), generator=torch.Generator().manual_seed(seed))[:n]
    x = torch.tensor(d.data, dtype=torch.float32)[idx] / 16.0
    return ((x - 0.3) / 0.4).reshape(n, 1, 8, 8), torch.tensor(d.target)[idx]


def adding_problem(n=32, length=40, seed=52, raw_units=False):
    """locuslab/TCN ``adding_problem/utils.py`` ``data_generator``: channel 0 values in [0, 1), channel 1 marks two
    positions; the target is the sum of the two marked values.  ``raw_units``: channel 0 as the sensor logs it
    (millivolts on a 2 V bias: 2000..3000), never centred or scaled -- the target is still the sum in volts."""
    g = torch.Generator().manual_seed(seed)
    values = torch.rand(n, 1, length, generator=g)
    marks = torch.zeros(n, 1, length)
    for i in range(n):
        a, b = torch.randperm(length, generator=g)[:2].tolist()
        marks[i, 0, a] = marks[i, 0, b] = 1.0
    y = (values * marks).sum(dim=(1, 2)).unsqueeze(1)
    x = torch.cat([values * 1000.0 + 2000.0 if raw_units else values, marks], 1)
    return x, y


def implicit_feedback(n=256, users=40, items=30, seed=53):
    """(user, item) pairs with label 1 when the user's rank-3 taste agrees with the item's profile."""
    g = torch.Generator().manual_seed(seed)
    pu, qi = torch.randn(users, 3, generator=g), torch.randn(items, 3, generator=g)
    u = torch.randint(0, users, (n,), generator=g)
    i = torch.randint(0, items, (n,), generator=g)
    y = ((pu[u] * qi[i]).sum(1) > 0).float()
    return (u, i), y


def point_clouds(n=48, points=32, seed=54):
    """Sphere (0), cube surface (1), cylinder (2): ``n`` clouds of ``points`` points, (n, 3, points) as PointNet."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 3
    clouds = []
    for k in y.tolist():
        p = torch.randn(points, 3, generator=g)
        if k == 0:
            p = p / p.norm(dim=1, keepdim=True)
        elif k == 1:
            p = torch.rand(points, 3, generator=g) * 2 - 1
            axis = torch.randint(0, 3, (points,), generator=g)
            p[torch.arange(points), axis] = torch.sign(p[torch.arange(points), axis])
        else:
            t = torch.rand(points, generator=g) * 6.2832
            p = torch.stack([t.cos(), t.sin(), torch.rand(points, generator=g) * 2 - 1], 1)
        p = p * (0.8 + 0.4 * torch.rand(1, generator=g))  # random scale
        clouds.append(p.t())
    return torch.stack(clouds), y


def shapes(n=24, size=16, seed=55):
    """Grey images with a disc or a square at a random place; the mask is the shape (1, size, size)."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    imgs, masks = [], []
    for k in range(n):
        cy, cx = torch.randint(4, size - 4, (2,), generator=g).tolist()
        r = int(torch.randint(2, 5, (1,), generator=g))
        if k % 2:
            m = ((yy - cy) ** 2 + (xx - cx) ** 2 <= r * r).float()
        else:
            m = (((yy - cy).abs() <= r) & ((xx - cx).abs() <= r)).float()
        img = 0.6 * m + 0.2 * torch.randn(size, size, generator=g)
        imgs.append(img[None])
        masks.append(m[None])
    return torch.stack(imgs), torch.stack(masks)


def lexicon_tokens(n=32, length=16, vocab=64, seed=56):
    """Label 1 when tokens 5..12 outnumber tokens 13..20 (a tiny sentiment lexicon); RoBERTa's pad id 1 unused."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (n, length), generator=g)
    ids[:, 0] = 0  # <s>
    y = (((ids >= 5) & (ids <= 12)).sum(1) > ((ids >= 13) & (ids <= 20)).sum(1)).long()
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": y}


def copy_task(n=24, length=8, vocab=32, seed=57):
    """T5: the target is the source sequence (tokens 3..vocab-1) followed by EOS (1)."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, vocab, (n, length), generator=g)
    labels = torch.cat([src, torch.ones(n, 1, dtype=torch.long)], 1)
    return {"input_ids": src, "attention_mask": torch.ones_like(src), "labels": labels}


# -- locuslab TCN --------------------------------------------------------------------------------------------------
class Chomp1d(nn.Module):
    def __init__(self, chomp_size):
        super().__init__()
        self.chomp_size = chomp_size

    def forward(self, x):
        return x[:, :, :-self.chomp_size].contiguous()


class TemporalBlock(nn.Module):
    def __init__(self, n_inputs, n_outputs, kernel_size, stride, dilation, padding, dropout=0.2):
        super().__init__()
        self.conv1 = weight_norm(nn.Conv1d(n_inputs, n_outputs, kernel_size, stride=stride, padding=padding,
                                           dilation=dilation))
        self.chomp1 = Chomp1d(padding)
        self.relu1 = nn.ReLU()
        self.dropout1 = nn.Dropout(dropout)
        self.conv2 = weight_norm(nn.Conv1d(n_outputs, n_outputs, kernel_size, stride=stride, padding=padding,
                                           dilation=dilation))
        self.chomp2 = Chomp1d(padding)
        self.relu2 = nn.ReLU()
        self.dropout2 = nn.Dropout(dropout)
        self.net = nn.Sequential(self.conv1, self.chomp1, self.relu1, self.dropout1,
                                 self.conv2, self.chomp2, self.relu2, self.dropout2)
        self.downsample = nn.Conv1d(n_inputs, n_outputs, 1) if n_inputs != n_outputs else None
        self.relu = nn.ReLU()
        self.init_weights()

    def init_weights(self):
        # the original also draws conv1/conv2.weight from N(0, 0.01), which weight_norm recomputes from g and v on
        # the next forward (a no-op kept out here)
        if self.downsample is not None:
            self.downsample.weight.data.normal_(0, 0.01)

    def forward(self, x):
        out = self.net(x)
        res = x if self.downsample is None else self.downsample(x)
        return self.relu(out + res)


class TemporalConvNet(nn.Module):
    def __init__(self, num_inputs, num_channels, kernel_size=2, dropout=0.2):
        super().__init__()
        layers = []
        for i, out_channels in enumerate(num_channels):
            dilation_size = 2 ** i
            in_channels = num_inputs if i == 0 else num_channels[i - 1]
            layers += [TemporalBlock(in_channels, out_channels, kernel_size, stride=1, dilation=dilation_size,
                                     padding=(kernel_size - 1) * dilation_size, dropout=dropout)]
        self.network = nn.Sequential(*layers)

    def forward(self, x):
        return self.network(x)


class TCN(nn.Module):  # adding_problem/model.py
    def __init__(self, input_size=2, output_size=1, num_channels=(24,) * 4, kernel_size=5, dropout=0.0):
        super().__init__()
        self.tcn = TemporalConvNet(input_size, list(num_channels), kernel_size=kernel_size, dropout=dropout)
        self.linear = nn.Linear(num_channels[-1], output_size)
        self.linear.weight.data.normal_(0, 0.01)

    def forward(self, x):
        y1 = self.tcn(x)
        return self.linear(y1[:, :, -1])


# -- guoyang9 NCF ---------------------------------------------------------------------------------------------------
class NCF(nn.Module):
    def __init__(self, user_num=40, item_num=30, factor_num=16, num_layers=3, dropout=0.0, ids_as_numbers=False):
        super().__init__()
        self.ids_as_numbers = ids_as_numbers
        self.dropout = dropout
        if ids_as_numbers:
            # the bug: "user 17" and "item 4" fed as the numbers 17.0 and 4.0 into the MLP tower (no embedding,
            # no one-hot): user 17 is treated as "more" than user 16 and nothing per-user can be learned
            self.embed_user_MLP = nn.Linear(1, factor_num * (2 ** (num_layers - 1)))
            self.embed_item_MLP = nn.Linear(1, factor_num * (2 ** (num_layers - 1)))
        else:
            self.embed_user_GMF = nn.Embedding(user_num, factor_num)
            self.embed_item_GMF = nn.Embedding(item_num, factor_num)
            self.embed_user_MLP = nn.Embedding(user_num, factor_num * (2 ** (num_layers - 1)))
            self.embed_item_MLP = nn.Embedding(item_num, factor_num * (2 ** (num_layers - 1)))
        mlp = []
        for i in range(num_layers):
            input_size = factor_num * (2 ** (num_layers - i))
            mlp += [nn.Dropout(p=self.dropout), nn.Linear(input_size, input_size // 2), nn.ReLU()]
        self.MLP_layers = nn.Sequential(*mlp)
        self.predict_layer = nn.Linear(factor_num if ids_as_numbers else factor_num * 2, 1)
        self._init_weight_()

    def _init_weight_(self):
        if not self.ids_as_numbers:
            for e in (self.embed_user_GMF, self.embed_item_GMF, self.embed_user_MLP, self.embed_item_MLP):
                nn.init.normal_(e.weight, std=0.01)
        for m in self.MLP_layers:
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
        nn.init.kaiming_uniform_(self.predict_layer.weight, a=1, nonlinearity="sigmoid")
        for m in self.modules():
            if isinstance(m, nn.Linear) and m.bias is not None:
                m.bias.data.zero_()

    def forward(self, user, item):
        if self.ids_as_numbers:
            u = self.embed_user_MLP(user.float().unsqueeze(1))
            i = self.embed_item_MLP(item.float().unsqueeze(1))
            return self.predict_layer(self.MLP_layers(torch.cat((u, i), -1))).view(-1)
        output_GMF = self.embed_user_GMF(user) * self.embed_item_GMF(item)
        interaction = torch.cat((self.embed_user_MLP(user), self.embed_item_MLP(item)), -1)
        output_MLP = self.MLP_layers(interaction)
        return self.predict_layer(torch.cat((output_GMF, output_MLP), -1)).view(-1)


# -- tiny transformers models -----------------------------------------------------------------------------------
def roberta():
    from transformers import RobertaConfig, RobertaForSequenceClassification

    cfg = RobertaConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=40, num_labels=2, pad_token_id=1,
                        bos_token_id=0, eos_token_id=2)
    return RobertaForSequenceClassification(cfg)


def t5(initializer_factor=1.0):
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(vocab_size=32, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, initializer_factor=initializer_factor)
    return T5ForConditionalGeneration(cfg)


def warmup(opt, steps=200):
    from transformers import get_linear_schedule_with_warmup

    return get_linear_schedule_with_warmup(opt, num_warmup_steps=20, num_training_steps=steps)


# -- fxia22 PointNet ----------------------------------------------------------------------------------------------
class PointNetfeat(nn.Module):
    def __init__(self, distance_feature=False):
        super().__init__()
        self.conv1 = nn.Conv1d(3, 32, 1)
        self.conv2 = nn.Conv1d(32 + distance_feature, 64, 1)
        self.conv3 = nn.Conv1d(64, 128, 1)
        self.bn1, self.bn2, self.bn3 = nn.BatchNorm1d(32), nn.BatchNorm1d(64), nn.BatchNorm1d(128)
        self.distance_feature = distance_feature

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        if self.distance_feature:
            # a "local density" feature (DGCNN-style, in feature space): each point's mean Euclidean distance to
            # the others, sqrt of the summed squares -- including its distance 0 to itself, where sqrt's gradient
            # is infinite: the forward is finite, the gradient NaN
            diff = x.unsqueeze(3) - x.unsqueeze(2)  # (B, C, N, N)
            dist = torch.sqrt((diff ** 2).sum(1))  # (B, N, N), 0 on the diagonal
            x = torch.cat([x, dist.mean(2, keepdim=True).transpose(1, 2)], 1)
        x = F.relu(self.bn2(self.conv2(x)))
        x = self.bn3(self.conv3(x))
        return torch.max(x, 2)[0]


class PointNetCls(nn.Module):
    def __init__(self, k=3, distance_feature=False):
        super().__init__()
        self.feat = PointNetfeat(distance_feature)
        self.fc1, self.fc2, self.fc3 = nn.Linear(128, 64), nn.Linear(64, 32), nn.Linear(32, k)
        self.dropout = nn.Dropout(p=0.3)
        self.bn1, self.bn2 = nn.BatchNorm1d(64), nn.BatchNorm1d(32)

    def forward(self, x):
        x = self.feat(x)
        x = F.relu(self.bn1(self.fc1(x)))
        x = F.relu(self.bn2(self.dropout(self.fc2(x))))
        return F.log_softmax(self.fc3(x), dim=1)


# -- milesial U-Net ----------------------------------------------------------------------------------------------
class DoubleConv(nn.Module):
    def __init__(self, in_channels, out_channels, mid_channels=None):
        super().__init__()
        mid_channels = mid_channels or out_channels
        self.double_conv = nn.Sequential(
            nn.Conv2d(in_channels, mid_channels, kernel_size=3, padding=1, bias=False), nn.BatchNorm2d(mid_channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(mid_channels, out_channels, kernel_size=3, padding=1, bias=False), nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True))

    def forward(self, x):
        return self.double_conv(x)


class Down(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.maxpool_conv = nn.Sequential(nn.MaxPool2d(2), DoubleConv(in_channels, out_channels))

    def forward(self, x):
        return self.maxpool_conv(x)


class Up(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
        self.conv = DoubleConv(in_channels, out_channels, in_channels // 2)

    def forward(self, x1, x2):
        x1 = self.up(x1)
        return self.conv(torch.cat([x2, x1], dim=1))


class UNet(nn.Module):  # unet_model.py, bilinear, two levels, base width 8
    def __init__(self, n_channels=1, n_classes=1, sigmoid_out=False):
        super().__init__()
        self.inc = DoubleConv(n_channels, 8)
        self.down1 = Down(8, 16)
        self.down2 = Down(16, 16)
        self.up1 = Up(32, 8)
        self.up2 = Up(16, 8)
        self.outc = nn.Conv2d(8, n_classes, kernel_size=1)
        self.sigmoid_out = sigmoid_out

    def forward(self, x):
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        x = self.up2(self.up1(x3, x2), x1)
        logits = self.outc(x)
        # the bug: predict.py's sigmoid moved into forward "so the outputs are masks", and train.py still uses
        # BCEWithLogitsLoss, which applies a sigmoid again
        return torch.sigmoid(logits) if self.sigmoid_out else logits


def unet_optimizer(params):  # train.py: RMSprop(weight_decay=1e-8, momentum=...), lr raised for the small net
    return torch.optim.RMSprop(params, lr=1e-3, weight_decay=1e-8, momentum=0.9)


# -- VGG-style stack with imagenet/main.py's loop -------------------------------------------------------------------
def vgg(convs=4, batch_norm=True, width=16):
    layers, c = [], 1
    for _ in range(convs):
        layers += [nn.Conv2d(c, width, kernel_size=3, padding=1)]
        layers += [nn.BatchNorm2d(width), nn.ReLU(inplace=True)] if batch_norm else [nn.ReLU(inplace=True)]
        c = width
    # VGG's classifier reads the flattened feature map (its AdaptiveAvgPool2d((7, 7)) is the identity at 8x8 here)
    return nn.Sequential(nn.Sequential(*layers), nn.Flatten(), nn.Linear(width * 64, 10))


def imagenet_sgd(params, lr=0.1):  # imagenet/main.py defaults; its README: lr 0.01 for VGG (no batch norm)
    return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=1e-4)


# -- the cases ------------------------------------------------------------------------------------------------------
def build(case_id):  # noqa: C901 - one branch per case, read top to bottom
    torch.manual_seed(0)
    if case_id == "tcn-raw-sensor-units":  # H1
        m = TCN()
        return dict(model=m, batch=adding_problem(raw_units=True), loss_fn=nn.MSELoss(),
                    optimizer=torch.optim.Adam(m.parameters(), lr=2e-3))
    if case_id == "tcn-healthy-weightnorm-dropout":
        m = TCN(dropout=0.1)
        return dict(model=m, batch=adding_problem(), loss_fn=nn.MSELoss(),
                    optimizer=torch.optim.Adam(m.parameters(), lr=2e-3))

    if case_id == "ncf-ids-as-numbers":  # H3
        m = NCF(ids_as_numbers=True)
        return dict(model=m, batch=implicit_feedback(), loss_fn=nn.BCEWithLogitsLoss(),
                    optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))
    if case_id == "ncf-one-factor":  # H11
        m = NCF(factor_num=1, num_layers=1)
        return dict(model=m, batch=implicit_feedback(), loss_fn=nn.BCEWithLogitsLoss(),
                    optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))

    if case_id == "roberta-adamw-lr-0.5":  # H6, too high
        m = roberta()
        return dict(model=m, batch=lexicon_tokens(), optimizer=torch.optim.AdamW(m.parameters(), lr=0.5))
    if case_id == "roberta-healthy-warmup":
        m = roberta()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.01)
        warmup(opt)  # the scheduler has set the group's lr to its warm-up value (0 at step 0)
        return dict(model=m, batch=lexicon_tokens(), optimizer=opt)

    if case_id == "pointnet-adam-lr-1e-6":  # H6, too low
        m = PointNetCls()
        return dict(model=m, batch=point_clouds(), loss_fn=nn.NLLLoss(),
                    optimizer=torch.optim.Adam(m.parameters(), lr=1e-6, betas=(0.9, 0.999)))
    if case_id == "pointnet-sqrt-distance-nan-grad":  # H8
        m = PointNetCls(distance_feature=True)
        return dict(model=m, batch=point_clouds(), loss_fn=nn.NLLLoss(),
                    optimizer=torch.optim.Adam(m.parameters(), lr=1e-3, betas=(0.9, 0.999)))

    if case_id == "unet-sigmoid-into-bce-with-logits":  # H7
        m = UNet(sigmoid_out=True)
        return dict(model=m, batch=shapes(), loss_fn=nn.BCEWithLogitsLoss(), optimizer=unet_optimizer(m.parameters()))
    if case_id == "unet-healthy-frozen-encoder-intended":
        m = UNet()
        for part in (m.inc, m.down1, m.down2):
            part.requires_grad_(False)
        opt = unet_optimizer([p for p in m.parameters() if p.requires_grad])
        return dict(model=m, batch=shapes(), loss_fn=nn.BCEWithLogitsLoss(), optimizer=opt,
                    frozen=["inc", "down1", "down2"])

    if case_id == "t5-initializer-factor-0":  # H9
        m = t5(initializer_factor=0.0)
        return dict(model=m, batch=copy_task(), optimizer=torch.optim.AdamW(m.parameters(), lr=3e-3))

    if case_id == "vgg16-plain-too-deep":  # H10
        m = vgg(convs=16, batch_norm=False)
        return dict(model=m, batch=digits(), loss_fn=nn.CrossEntropyLoss(),
                    optimizer=imagenet_sgd(m.parameters(), lr=0.01))
    if case_id == "vgg-healthy-imagenet-sgd-momentum":
        m = vgg(convs=4, batch_norm=True)
        return dict(model=m, batch=digits(), loss_fn=nn.CrossEntropyLoss(), optimizer=imagenet_sgd(m.parameters()))
    raise KeyError(case_id)


CASES = (
    "tcn-raw-sensor-units", "ncf-ids-as-numbers", "roberta-adamw-lr-0.5", "pointnet-adam-lr-1e-6",
    "unet-sigmoid-into-bce-with-logits", "pointnet-sqrt-distance-nan-grad", "t5-initializer-factor-0",
    "vgg16-plain-too-deep", "ncf-one-factor",
    "vgg-healthy-imagenet-sgd-momentum", "roberta-healthy-warmup", "unet-healthy-frozen-encoder-intended",
    "tcn-healthy-weightnorm-dropout",
)
