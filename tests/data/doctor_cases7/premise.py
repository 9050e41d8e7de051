"""Check the premises of the cases with plain torch loops (never the doctor): ``python premise.py [case ...]``.

For every case and for a twin with each bug's fix, train the case's own model with its own optimizer on its own
batch for 200 steps (a scheduler's lr restored from ``initial_lr`` and ramped over 20 steps, as the user's loop
would; a LightningModule through its ``training_step`` with the optimizer of its ``configure_optimizers``) and
print the loss at the first step, its lowest value and the last one, how many trainable parameters got a non-zero
gradient and how many had non-finite gradients at step 0.  A few cases print the one fact their bug is about.  The
labels do not depend on these numbers.
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
    """The bug's own fix on the same base, model, optimizer and batch."""
    torch.manual_seed(0)
    m = C.lenet()
    yield "twin:lenet-centred-cross-entropy", dict(model=m, batch=C.digits(), loss_fn=nn.CrossEntropyLoss(),
                                                   optimizer=torch.optim.SGD(m.parameters(), lr=0.9))
    yield "twin:llama-adamw-at-its-lr", (lambda m: dict(model=m, batch=C.lm_batch(),
                                                        optimizer=torch.optim.AdamW(m.parameters(), lr=1e-3)))(
        C.llama_lm())
    torch.manual_seed(0)
    yield "twin:litclf-labels-aligned", dict(model=C.lit_classifier(), batch=C.digits())
    torch.manual_seed(0)
    m = C.sk_mlp(inputs=13, classes=3)
    yield "twin:skmlp-wine-centred", dict(model=m, batch=C.wine(centre=True), loss_fn=nn.CrossEntropyLoss(),
                                          optimizer=torch.optim.Adam(m.parameters(), lr=1e-2))
    torch.manual_seed(0)
    m = C.sk_mlp(inputs=13, classes=3)
    yield "twin:skmlp-wine-standardised", dict(model=m, batch=C.wine(scale=True), loss_fn=nn.CrossEntropyLoss(),
                                               optimizer=torch.optim.Adam(m.parameters(), lr=1e-2))
    torch.manual_seed(0)
    m = C.sk_mlp()
    yield "twin:skmlp-hidden-10-10-circles", dict(model=m, batch=C.circles(), loss_fn=nn.CrossEntropyLoss(),
                                                  optimizer=torch.optim.Adam(m.parameters(), lr=1e-2))


def optimizer_of(args):
    if args.get("optimizer") is not None:
        return args["optimizer"]
    return args["model"].configure_optimizers()


def loss_of(model, batch, loss_fn):
    if isinstance(batch, dict):
        return model(**batch).loss
    if loss_fn is None:  # a LightningModule
        return model.training_step(batch, 0)
    inputs, targets = batch
    return loss_fn(model(inputs), targets)


def run(args, steps=200):
    model, loss_fn = args["model"], args.get("loss_fn")
    opt = optimizer_of(args)
    warm = [g.get("initial_lr") for g in opt.param_groups]
    losses, bad_grads = [], 0
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
    first_bad = next((i for i, v in enumerate(losses) if not math.isfinite(v)), None)
    return (f"loss {losses[0]:.4g} -> lowest {low} -> last {losses[-1]:.4g} ({len(losses)} steps; "
            f"trainable params with a non-zero grad {got}/{len(params)}, non-finite grads at step 0: {bad_grads}"
            + (f"; first non-finite loss at step {first_bad}" if first_bad is not None else "") + ")"), losses


def accuracy(model, batch):
    x, y = batch
    was = model.training
    model.eval()
    with torch.no_grad():
        acc = float((model(x).argmax(1) == y).float().mean())
    model.train(was)
    return acc


def facts(name, args, losses):
    """The one fact each such case is about, printed next to its losses."""
    if "wine" in name:
        x = args["batch"][0]
        return (f"input column means {x.mean(0).abs().min():.3g} .. {x.mean(0).abs().max():.4g}; batch accuracy "
                f"at the end {accuracy(args['model'], args['batch']):.0%}")
    if "lenet" in name:
        return f"batch accuracy at the end {accuracy(args['model'], args['batch']):.0%}"
    if "litclf" in name:
        other = C.digits(n=256, offset=320)
        return (f"batch accuracy at the end {accuracy(args['model'], args['batch']):.0%}; on 256 other digits "
                f"{accuracy(args['model'], other):.0%}")
    if "skmlp" in name:
        return f"batch accuracy at the end {accuracy(args['model'], args['batch']):.0%}"
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
        print(f"{name:46} {result}  [{time.perf_counter() - t0:.1f}s]" + (f"\n{'':46} {fact}" if fact else ""),
              flush=True)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1:])
