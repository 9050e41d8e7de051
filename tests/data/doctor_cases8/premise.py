"""Check the premises of the cases with plain torch loops (never the doctor): ``python premise.py [case ...]``.

For every case and for a twin with each bug's fix, train the case's own model with its own optimizer on its own
batch for 200 steps (a scheduler's lr restored from ``initial_lr`` and ramped over 20 steps, as the user's loop
would; a LightningModule through its ``training_step`` with the optimizer of its ``configure_optimizers`` and the
gradient clipping of its ``clip_val``) and print the loss at the first step, its lowest value and the last one,
how many trainable parameters got a non-zero gradient and how many had non-finite gradients at step 0.  A few cases
print the one fact their bug is about.  The labels do not depend on these numbers.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cases as C  # noqa: E402


def twins():
    """The bug's own fix on the same base, model, optimizer and batch."""
    torch.manual_seed(0)
    m = C.deit()
    yield "twin:deit-logits-and-right-labels", dict(
        model=m, batch=C.image_batch(), optimizer=torch.optim.AdamW(m.parameters(), lr=1e-3))
    torch.manual_seed(0)
    m = C.OftLike()
    yield "twin:oft-loss-all-three-terms", dict(model=m, batch=C.shapes(), loss_fn=C.oft_loss,
                                                optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))
    torch.manual_seed(0)
    m = C.mistral()
    yield "twin:mistral-body-with-grad", dict(
        model=m, batch=C.lm_batch(), optimizer=torch.optim.AdamW(m.parameters(), lr=1e-3))


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
    model.train()
    opt = optimizer_of(args)
    clip = getattr(model, "clip_val", None)
    warm = [g.get("initial_lr") for g in opt.param_groups]
    losses, bad_grads = [], 0
    for step in range(steps):
        for g, lr0 in zip(opt.param_groups, warm):
            if lr0 is not None:
                g["lr"] = lr0 * min(1.0, (step + 1) / 20)
        opt.zero_grad()
        loss = loss_of(model, args["batch"], loss_fn)
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
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


def accuracy(model, x, y):
    was = model.training
    model.eval()
    with torch.no_grad():
        if hasattr(model, "config"):  # a transformers image classifier
            pred = model(pixel_values=x).logits.argmax(1)
        else:
            pred = model(x).argmax(1)
        acc = float((pred == y).float().mean())
    model.train(was)
    return acc


def facts(name, args):
    """The one fact each such case is about, printed next to its losses."""
    model, batch = args["model"], args["batch"]
    if "deit" in name:
        x = batch["pixel_values"] if isinstance(batch, dict) else batch[0]
        y = batch["labels"] if isinstance(batch, dict) else batch[1]
        true_y = C.digits()[1]
        ox, oy = C.digits(n=256, offset=64)
        return (f"accuracy on the batch's labels {accuracy(model, x, y):.0%}, on its true digits "
                f"{accuracy(model, x, true_y):.0%}, on 256 other digits {accuracy(model, ox, oy):.0%}")
    if "oft" in name:
        x, (kind, pos_t, dim_t) = batch
        model.eval()
        with torch.no_grad():
            score, pos, dim = model(x)
        model.train()
        heads = [p for n, p in model.named_parameters() if n.startswith(("position", "dimension"))]
        moved = sum(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in heads)
        return (f"score accuracy {float((score.argmax(1) == kind).float().mean()):.0%}, position L1 "
                f"{float(F.l1_loss(pos, pos_t)):.3f}, dimension L1 {float(F.l1_loss(dim, dim_t)):.3f} "
                f"(predicting the means: {float((pos_t - pos_t.mean(0)).abs().mean()):.3f} / "
                f"{float((dim_t - dim_t.mean()).abs().mean()):.3f}); position/dimension parameters with a "
                f"non-zero grad {moved}/{len(heads)}")
    if "cifartut" in name:
        return f"batch accuracy at the end {accuracy(model, *batch):.0%}"
    if "mistral" in name:
        body = [p for n, p in model.named_parameters() if p.requires_grad and "lm_head" not in n]
        moved = sum(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in body)
        return f"trainable parameters outside lm_head with a non-zero grad at the end: {moved}/{len(body)}"
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
            result, _ = run(args)
            fact = facts(name, args)
        print(f"{name:46} {result}  [{time.perf_counter() - t0:.1f}s]" + (f"\n{'':46} {fact}" if fact else ""),
              flush=True)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1:])
