"""Check the premises of the cases with plain torch loops (never the doctor): ``python premise.py [case ...]``.

For every case and for a twin with each bug's fix, train the case's own model with its own optimizer on its own
batch for 200 steps (an lr that a warm-up scheduler set to 0 is ramped from ``initial_lr`` over 20 steps, as the
user's loop would; other schedulers' lr is left as set) and print the loss at the first step, its lowest value and
the last one, how many trainable parameters got a non-zero gradient, and the one fact each bug is about.  The
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
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cases as C  # noqa: E402


def twins():
    """The bug's own fix on the same base, model, optimizer and batch."""
    torch.manual_seed(0)
    m = C.ElectraOneUnitSigmoid()
    ids, y = C.marker_sequences()
    yield "twin:electra-sigmoid-on-the-unit", dict(model=m, batch=(ids, y.float().unsqueeze(1)),
                                                   loss_fn=nn.BCELoss(),
                                                   optimizer=torch.optim.AdamW(m.parameters(), lr=1e-3))
    torch.manual_seed(0)
    m = C.BiFPNNet()
    opt = C.grouped_by_module_type(m)
    held = {id(p) for g in opt.param_groups for p in g["params"]}
    opt.add_param_group({"params": [p for p in m.parameters() if id(p) not in held]})
    yield "twin:bifpn-fusion-weights-in-optimizer", dict(model=m, batch=C.digits(), loss_fn=nn.CrossEntropyLoss(),
                                                         optimizer=opt)
    torch.manual_seed(0)
    m = C.SqueezeNetRegressor()
    x, v = C.digit_values()
    yield "twin:squeezenet-target-n1", dict(model=m, batch=(x, v.unsqueeze(1)), loss_fn=nn.MSELoss(),
                                            optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))
    torch.manual_seed(0)
    m = C.AlexNetSmall()
    yield "twin:alexnet-sgd-lr-0.02", dict(model=m, batch=C.digits(), loss_fn=nn.CrossEntropyLoss(),
                                           optimizer=torch.optim.SGD(m.parameters(), lr=0.02, momentum=0.9))


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
    return (f"loss {losses[0]:.4g} -> lowest {low} -> last {losses[-1]:.4g} ({len(losses)} steps; "
            f"trainable params with a non-zero grad {got}/{len(params)})")


def predict(model, x, mode="eval"):
    was = model.training
    model.train(mode == "train")
    with torch.no_grad():
        out = model(x)
    model.train(was)
    return out


def facts(name, args):
    model, batch = args["model"], args["batch"]
    if "electra" in name and not isinstance(batch, dict):
        ids, y = batch
        p = predict(model, ids)
        return (f"outputs min {float(p.min()):.4f} max {float(p.max()):.4f}; batch accuracy "
                f"{float(((p > 0.5).float() == y).float().mean()):.0%}")
    if "electra" in name:
        logits = predict(model, batch["input_ids"])
        logits = logits.logits if hasattr(logits, "logits") else logits
        return f"batch accuracy {float((logits.argmax(1) == batch['labels']).float().mean()):.0%}"
    if "bifpn" in name:
        x, y = batch
        acc = float((predict(model, x, "train").argmax(1) == y).float().mean())
        return (f"fusion weights p3_w1 {[round(v, 3) for v in model.p3_w1.tolist()]} p4_w2 "
                f"{[round(v, 3) for v in model.p4_w2.tolist()]} (start [1, 1]), their last grad norm "
                f"{float(model.p3_w1.grad.norm() + model.p4_w2.grad.norm()):.2e}; batch accuracy {acc:.0%} (BatchNorm "
                f"on batch statistics)")
    if "squeezenet" in name:
        x, t = batch
        p = predict(model, x)
        t1 = t.reshape(-1, 1)
        return (f"prediction spread (std over the batch) {float(p.std()):.3f} against the target's "
                f"{float(t1.std()):.3f}; MSE on matching shapes {float(F.mse_loss(p, t1)):.3f} (predicting the "
                f"mean: {float(t1.var(unbiased=False)):.3f})")
    if "alexnet" in name:
        x, y = batch
        return f"batch accuracy {float((predict(model, x).argmax(1) == y).float().mean()):.0%}"
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
