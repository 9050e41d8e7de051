"""Check the premises of the cases with plain torch loops (never the doctor): ``python premise.py [case ...]``.

For every case and for a twin with each bug's fix, train the case's own model with its own optimizer on its own
batch for 200 steps (an lr that a warm-up scheduler set to 0 is ramped from ``initial_lr`` over 20 steps, as the
user's loop would) and print the loss at the first step, its lowest finite value and the last one, how many
trainable parameters got a non-zero gradient, and the one fact each bug is about.  The labels do not depend on
these numbers.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cases as C  # noqa: E402


def twins():
    """The bug's own fix on the same base, model, optimizer and batch."""
    torch.manual_seed(0)
    m = C.DenseNetSmall()
    yield "twin:densenet-sgd-lr-0.1", dict(model=m, batch=C.digits(), loss_fn=nn.CrossEntropyLoss(),
                                           optimizer=C.imagenet_sgd(m, lr=0.1))
    torch.manual_seed(0)
    m = C.SNN()
    yield "twin:snn-selu", dict(model=m, batch=C.digits(flat=True), loss_fn=nn.CrossEntropyLoss(),
                                optimizer=torch.optim.SGD(m.parameters(), lr=0.05))
    torch.manual_seed(0)
    m = C.SNN()
    yield "twin:snn-lecun-init", dict(model=m, batch=C.digits(flat=True), loss_fn=nn.CrossEntropyLoss(),
                                      optimizer=torch.optim.SGD(m.parameters(), lr=0.05))
    torch.manual_seed(0)
    m = C.KerasMLP()
    yield "twin:kerasmlp-no-weight-decay", dict(model=m, batch=C.breast_cancer(), loss_fn=nn.CrossEntropyLoss(),
                                                optimizer=torch.optim.RMSprop(m.parameters(), lr=1e-3))
    torch.manual_seed(0)
    m = C.KerasMLP()
    yield "twin:kerasmlp-standardised", dict(model=m, batch=C.breast_cancer(), loss_fn=nn.CrossEntropyLoss(),
                                             optimizer=torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9))
    torch.manual_seed(0)
    m = C.SNN(n_in=10, n_out=1)
    x, y = C.diabetes()
    yield "twin:snn-target-n1", dict(model=m, batch=(x, y.unsqueeze(1)), loss_fn=nn.MSELoss(),
                                     optimizer=torch.optim.SGD(m.parameters(), lr=0.01))
    torch.manual_seed(0)
    m = C.AlbertLogits()
    yield "twin:albert-logits", dict(model=m, batch=C.marker_sequences(), loss_fn=nn.CrossEntropyLoss(),
                                     optimizer=torch.optim.AdamW(m.parameters(), lr=1e-3))


def loss_of(model, batch, loss_fn):
    if isinstance(batch, dict):
        return model(**batch).loss
    inputs, targets = batch
    return loss_fn(model(inputs), targets)


def run(args, steps=200):
    model, loss_fn, opt = args["model"], args.get("loss_fn"), args["optimizer"]
    model.train()
    warm = [g.get("initial_lr") if g["lr"] == 0 else None for g in opt.param_groups]
    losses = []
    for step in range(steps):
        for g, lr0 in zip(opt.param_groups, warm):
            if lr0 is not None:
                g["lr"] = lr0 * min(1.0, (step + 1) / 20)
        opt.zero_grad()
        loss = loss_of(model, args["batch"], loss_fn)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    params = [p for p in model.parameters() if p.requires_grad]
    got = sum(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in params)
    fin = [v for v in losses if math.isfinite(v)]
    low = f"{min(fin):.4g}" if fin else "none finite"
    first_bad = next((i for i, v in enumerate(losses) if not math.isfinite(v)), None)
    bad = f"; first non-finite loss at step {first_bad}" if first_bad is not None else ""
    return (f"loss {losses[0]:.4g} -> lowest {low} -> last {losses[-1]:.4g} ({len(losses)} steps{bad}; "
            f"trainable params with a non-zero grad {got}/{len(params)})")


def predict(model, x, mode="eval"):
    was = model.training
    model.train(mode == "train")
    with torch.no_grad():
        out = model(x)
    model.train(was)
    return out


def first_grad_norm(name, args):
    """The gradient norm of the first layer's weight and of the output layer's weight on a fresh copy of the
    case (a vanishing gradient shows as a first layer far below the last)."""
    torch.manual_seed(0)
    fresh = C.build(name) if not name.startswith("twin:") else None
    if fresh is None:
        return ""
    m, (x, y) = fresh["model"], fresh["batch"]
    fresh["loss_fn"](m(x), y).backward()
    return (f"first-step grad norm: first layer {float(m.body[0].weight.grad.norm()):.2e}, output layer "
            f"{float(m.out.weight.grad.norm()):.2e}")


def facts(name, args):
    model, batch = args["model"], args["batch"]
    if "albert" in name and not isinstance(batch, dict):
        ids, y = batch
        out = predict(model, ids)
        return f"batch accuracy {float((out.argmax(1) == y).float().mean()):.0%}"
    if "albert" in name:
        logits = predict(model, batch["input_ids"]).logits
        return f"batch accuracy {float((logits.argmax(1) == batch['labels']).float().mean()):.0%}"
    if "densenet" in name or "kerasmlp" in name:
        x, y = batch
        out = predict(model, x)
        dead = ""
        if "kerasmlp" in name:
            h = predict(model.net[:2], x)
            dead = f"first hidden layer's ReLUs zero on every sample: {int((h == 0).all(0).sum())}/512; "
        return (dead + f"batch accuracy {float((out.argmax(1) == y).float().mean()):.0%}; parameters finite: "
                f"{all(bool(torch.isfinite(p).all()) for p in model.parameters())}; weight norm "
                f"{float(sum(p.detach().norm() ** 2 for p in model.parameters()) ** 0.5):.3g}")
    if "snn" in name and ("mse" in name or "target" in name):
        x, t = batch
        p = predict(model, x)
        t1 = t.reshape(-1, 1)
        return (f"prediction spread (std over the batch) {float(p.std()):.3f} against the target's "
                f"{float(t1.std()):.3f}; MSE on matching shapes {float(F.mse_loss(p, t1)):.3f} (predicting the "
                f"mean: {float(t1.var(unbiased=False)):.3f})")
    if "snn" in name:
        x, y = batch
        h = predict(model.body, x)
        extra = first_grad_norm(name, args)
        return (f"batch accuracy {float((predict(model, x).argmax(1) == y).float().mean()):.0%}; last hidden "
                f"layer's activation spread over the batch {float(h.std(0).mean()):.2e}" + (f"; {extra}" if extra
                                                                                            else ""))
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
            result = run(args)
            fact = facts(name, args)
        print(f"{name:42} {result}  [{time.perf_counter() - t0:.1f}s]" + (f"\n{'':42} {fact}" if fact else ""),
              flush=True)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1:])
