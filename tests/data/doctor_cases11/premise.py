"""Check the premises of the cases with plain torch loops (never the doctor): ``python premise.py [case ...]``.

For every case and for a twin with each bug's fix, train the case's own model with its own optimizer on its own
batch for 200 steps (dropout drawn from seed 0; an lr that a warm-up scheduler set to 0 is ramped from ``initial_lr`` over 20 steps, as the
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cases as C  # noqa: E402


def twins():
    """The bug's own fix on the same base, model, optimizer and batch."""
    torch.manual_seed(0)
    m = C.ShuffleNetV2Small()
    yield "twin:shufflenet-sgd-lr-0.1", dict(model=m, batch=C.digits(), loss_fn=nn.CrossEntropyLoss(),
                                             optimizer=C.reference_sgd(m))
    torch.manual_seed(0)
    m = C.NiN()
    yield "twin:nin-he-init", dict(model=m, batch=C.digits(), loss_fn=nn.CrossEntropyLoss(),
                                       optimizer=torch.optim.SGD(m.parameters(), lr=0.05))
    torch.manual_seed(0)
    m = C.RtdlMLP(13, 3)
    yield "twin:rtdl-standardised", dict(model=m, batch=C.wine(), loss_fn=nn.CrossEntropyLoss(),
                                         optimizer=C.rtdl_adamw(m))
    m = C.gptneox()
    yield "twin:gptneox-adamw", dict(model=m, batch=C.lm_batch(), optimizer=torch.optim.AdamW(m.parameters(),
                                                                                              lr=1e-3))
    torch.manual_seed(0)
    m = C.ShuffleNetV2Small()
    yield "twin:shufflenet-cross-entropy", dict(model=m, batch=C.digits(), loss_fn=nn.CrossEntropyLoss(),
                                                optimizer=C.reference_sgd(m))
    torch.manual_seed(0)
    m = C.RtdlMLP(2, 2, n_blocks=2)
    yield "twin:rtdl-two-blocks", dict(model=m, batch=C.circles(), loss_fn=nn.CrossEntropyLoss(),
                                       optimizer=C.rtdl_adamw(m, lr=1e-2))
    torch.manual_seed(0)
    m = C.RtdlMLP(13, 3)
    yield "twin:rtdl-default-bias", dict(model=m, batch=C.wine(), loss_fn=nn.CrossEntropyLoss(),
                                         optimizer=C.rtdl_adamw(m))


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
    torch.manual_seed(0)  # dropout's draws the same whatever ran before
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


def weight_norm(model):
    return float(sum(p.detach().norm() ** 2 for p in model.parameters()) ** 0.5)


def first_grad_norms(name):
    """The gradient norm of the first and of the last conv's weight at the first step, on a fresh copy of the
    case (a vanishing gradient shows as both far below the healthy init's)."""
    torch.manual_seed(0)
    fresh = C.build(name) if not name.startswith("twin:") else None
    if fresh is None:
        torch.manual_seed(0)
        fresh = dict(model=C.NiN(), batch=C.digits(), loss_fn=nn.CrossEntropyLoss())
    m, (x, y) = fresh["model"], fresh["batch"]
    fresh["loss_fn"](m(x), y).backward()
    convs = [mod for mod in m.modules() if isinstance(mod, nn.Conv2d)]
    out = predict(m, x)
    return (f"first-step grad norm: first conv {float(convs[0].weight.grad.norm()):.2e}, last conv "
            f"{float(convs[-1].weight.grad.norm()):.2e}; output spread over the batch at init "
            f"{float(out.std(0).mean()):.2e}")


def facts(name, args):
    model, batch = args["model"], args["batch"]
    if "gptneox" in name:
        logits = predict(model, batch["input_ids"]).logits[:, 1:-1]
        right = (logits.argmax(-1) == batch["input_ids"][:, 2:]).float().mean()
        return f"next-token accuracy from the third token on {float(right):.0%}"
    x, y = batch
    out = predict(model, x)
    acc = f"batch accuracy {float((out.argmax(1) == y).float().mean()):.0%}"
    if "shufflenet" in name:
        extra = ""
        if "nll" in name or "cross-entropy" in name:
            extra = (f"; cross-entropy of the final logits {float(nn.functional.cross_entropy(out, y)):.4g}, "
                     f"logit range {float(out.min()):.3g}..{float(out.max()):.3g}")
        return (f"{acc}; parameters finite: {all(bool(torch.isfinite(p).all()) for p in model.parameters())}; "
                f"weight norm {weight_norm(model):.3g}" + extra)
    if "nin" in name:
        return f"{acc}; {first_grad_norms(name)}"
    if "rtdl" in name:
        extra = ""
        if len(model.blocks):
            h = predict(model.blocks[0][:2], x)
            extra = f"; first block's ReLUs zero on every sample: {int((h == 0).all(0).sum())}/{h.shape[1]}"
        return f"{acc}{extra}"
    return acc


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
        print(f"{name:44} {result}  [{time.perf_counter() - t0:.1f}s]" + (f"\n{'':44} {fact}" if fact else ""),
              flush=True)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1:])
