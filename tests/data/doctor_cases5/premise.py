"""Check the premises of the cases with plain torch loops (never the doctor): ``python premise.py [case ...]``.

For every case and for a healthy twin of each base whose cases all carry a bug, train the case's own model with
its own optimizer on its own batch for 200 steps (a scheduler's lr restored from ``initial_lr`` and ramped over 20
steps, as the user's loop would) and print the loss at the first step, its lowest value and the last one, how many
trainable parameters got a gradient and how many had non-finite gradients at step 0.  A few cases print the one
fact their bug is about.  The labels do not depend on these numbers.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cases as C  # noqa: E402


def twins():
    """Healthy versions of the bases whose cases all carry a bug (or the bug's own fix)."""
    torch.manual_seed(0)
    m = C.TCN()
    yield "twin:tcn-inputs-in-volts", dict(model=m, batch=C.adding_problem(), loss_fn=nn.MSELoss(),
                                           optimizer=torch.optim.Adam(m.parameters(), lr=2e-3))
    torch.manual_seed(0)
    m = C.NCF()
    yield "twin:ncf-embeddings-16-factors", dict(model=m, batch=C.implicit_feedback(), loss_fn=nn.BCEWithLogitsLoss(),
                                                 optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))
    torch.manual_seed(0)
    m = C.PointNetCls()
    yield "twin:pointnet-adam-1e-3", dict(model=m, batch=C.point_clouds(), loss_fn=nn.NLLLoss(),
                                          optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))
    torch.manual_seed(0)
    m = C.UNet()
    yield "twin:unet-logits", dict(model=m, batch=C.shapes(), loss_fn=nn.BCEWithLogitsLoss(),
                                   optimizer=C.unet_optimizer(m.parameters()))
    torch.manual_seed(0)
    m = C.t5()
    yield "twin:t5-initializer-factor-1", dict(model=m, batch=C.copy_task(),
                                               optimizer=torch.optim.AdamW(m.parameters(), lr=3e-3))
    for convs, bn, lr in ((4, False, 0.01), (16, True, 0.1)):
        torch.manual_seed(0)
        m = C.vgg(convs=convs, batch_norm=bn)
        yield f"twin:vgg-{convs}-convs-batchnorm-{bn}", dict(model=m, batch=C.digits(), loss_fn=nn.CrossEntropyLoss(),
                                                             optimizer=C.imagenet_sgd(m.parameters(), lr=lr))
    torch.manual_seed(0)
    m = C.roberta()
    yield "twin:roberta-adamw-1e-3", dict(model=m, batch=C.lexicon_tokens(),
                                          optimizer=torch.optim.AdamW(m.parameters(), lr=1e-3))


def loss_of(model, batch, loss_fn):
    if isinstance(batch, dict):
        return model(**batch).loss
    inputs, targets = batch
    out = model(*inputs) if isinstance(inputs, tuple) else model(inputs)
    return loss_fn(out, targets)


def run(args, steps=200):
    model, loss_fn, opt = args["model"], args.get("loss_fn"), args["optimizer"]
    warm = [g.get("initial_lr") for g in opt.param_groups]
    losses, bad_grads = [], 0
    model.train()
    for step in range(steps):
        for g, lr0 in zip(opt.param_groups, warm):
            if lr0 is not None:
                g["lr"] = lr0 * min(1.0, (step + 1) / 20)
        opt.zero_grad()
        loss = loss_of(model, args["batch"], loss_fn)
        loss.backward()
        if step == 0:
            bad_grads = sum(p.grad is not None and not bool(torch.isfinite(p.grad).all())
                            for p in model.parameters())
        opt.step()
        losses.append(loss.item())
    params = [p for p in model.parameters() if p.requires_grad]
    got = sum(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in params)
    fin = [v for v in losses if math.isfinite(v)]
    low = f"{min(fin):.4g}" if fin else "none finite"
    return (f"loss {losses[0]:.4g} -> lowest {low} -> last {losses[-1]:.4g} ({len(losses)} steps; "
            f"trainable params with a non-zero grad {got}/{len(params)}, non-finite grads at step 0: {bad_grads})"
            ), losses


def facts(name, args, losses):
    """The one fact each such case is about, printed next to its losses."""
    if name == "tcn-raw-sensor-units":
        x, _ = args["batch"]
        t = C.adding_problem()[0][:, 0]
        return f"input channel 0 mean {x[:, 0].mean():.0f} std {x[:, 0].std():.0f} (the twin's: {t.mean():.2f}, {t.std():.2f})"
    if name == "unet-sigmoid-into-bce-with-logits":
        f = float(args["batch"][1].mean())  # mask pixels: best is p=1 (loss log(1+e^-1)), background p=0 (log 2)
        return f"floor of BCEWithLogits on probabilities for this batch: {f * math.log(1 + math.exp(-1)) + (1 - f) * math.log(2):.3f}"
    if name in ("t5-initializer-factor-0", "twin:t5-initializer-factor-1"):
        return f"-log(1/32) = {math.log(32):.3f}"
    if name == "pointnet-sqrt-distance-nan-grad":
        m = C.build(name)["model"]
        with torch.no_grad():
            out = m(C.point_clouds()[0])
        return f"the forward alone is finite: {bool(torch.isfinite(out).all())}"
    if name == "vgg16-plain-too-deep":
        g = [p.grad.norm().item() for p in args["model"].parameters() if p.dim() > 1]
        return f"gradient norm of the first conv {g[0]:.1e}, of the classifier {g[-1]:.1e} (after 200 steps)"
    if name == "ncf-one-factor":
        return f"trainable parameters {sum(p.numel() for p in args['model'].parameters())} " \
               f"(the twin's: {sum(p.numel() for p in C.NCF().parameters())})"
    return ""


def main(names):
    todo = [(n, None) for n in (names or C.CASES)]
    if not names:
        todo += list(twins())
    for name, args in todo:
        t0 = time.perf_counter()
        args = args or C.build(name)
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            result, losses = run(args)
            fact = facts(name, args, losses)
        print(f"{name:40} {result}  [{time.perf_counter() - t0:.1f}s]" + (f"\n{'':40} {fact}" if fact else ""),
              flush=True)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1:])
