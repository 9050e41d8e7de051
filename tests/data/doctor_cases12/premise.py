"""Check the premises of the cases with plain torch loops (never the doctor): ``python premise.py [case ...]``.

For every case and for a twin with each bug's fix, train the case's own model with its own optimizer on its own
batch for 200 steps (dropout drawn from seed 0; an lr that a warm-up scheduler set to 0 is ramped from
``initial_lr`` over 20 steps, as the user's loop would) and print the loss at the first step, its lowest finite
value and the last one, how many trainable parameters got a non-zero gradient, the batch accuracy after training
and the one fact each bug is about.  The labels do not depend on these numbers.
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
    m = C.bloom()
    yield "twin:bloom-adam-lr-1e-3", dict(model=m, batch=C.lm_batch(),
                                          optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))
    torch.manual_seed(0)
    m = C.LSTMTagger()
    yield "twin:tagger-not-detached", dict(model=m, batch=C.tagged(), loss_fn=nn.NLLLoss(), optimizer=C.tagger_sgd(m))
    torch.manual_seed(0)
    m = C.WideDeep()
    yield "twin:widedeep-standardised", dict(model=m, batch=C.cancer(), loss_fn=nn.CrossEntropyLoss(),
                                             optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))
    torch.manual_seed(0)
    m = C.LSTMTagger(hidden_dim=32)
    yield "twin:tagger-default-init", dict(model=m, batch=C.tagged(), loss_fn=nn.NLLLoss(),
                                           optimizer=C.tagger_sgd(m))
    torch.manual_seed(0)
    m = C.WideResNet()
    yield "twin:wrn-sgd-lr-0.1", dict(model=m, batch=C.digit_images(), loss_fn=nn.CrossEntropyLoss(),
                                      optimizer=C.wrn_sgd(m))
    torch.manual_seed(0)
    m = C.TransformerClassifier()
    yield "twin:tfenc-fp32", dict(model=m, batch=C.digits(), loss_fn=nn.CrossEntropyLoss(),
                                  optimizer=C.tfenc_adamw(m))


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
        losses.append(float(loss.item()))
    params = [p for p in model.parameters() if p.requires_grad]
    got = sum(p.grad is not None and bool(p.grad.float().abs().sum() > 0) for p in params)
    fin = [v for v in losses if math.isfinite(v)]
    low = f"{min(fin):.4g}" if fin else "none finite"
    first_bad = next((i for i, v in enumerate(losses) if not math.isfinite(v)), None)
    bad = f"; first non-finite loss at step {first_bad}" if first_bad is not None else ""
    return (f"loss {losses[0]:.4g} -> lowest {low} -> last {losses[-1]:.4g} ({len(losses)} steps{bad}; "
            f"trainable params with a non-zero grad {got}/{len(params)})")


def predict(model, x):
    was = model.training
    model.eval()
    with torch.no_grad():
        out = model(x)
    model.train(was)
    return out


def first_step_grads(model, batch, loss_fn):
    """Gradient norms of every trainable tensor at one step on the trained model's current weights."""
    model.zero_grad()
    loss_of(model, batch, loss_fn).backward()
    return {n: float(p.grad.float().norm()) if p.grad is not None else None
            for n, p in model.named_parameters() if p.requires_grad}


def facts(name, args):
    model, batch = args["model"], args["batch"]
    finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    if isinstance(batch, dict):
        logits = predict(model, batch["input_ids"]).logits[:, 1:-1]
        right = (logits.argmax(-1) == batch["input_ids"][:, 2:]).float().mean()
        return f"next-token accuracy from the third token on {float(right):.0%}; parameters finite: {finite}"
    x, y = batch
    out = predict(model, x)
    acc = f"batch accuracy {float((out.argmax(1) == y).float().mean()):.0%}; parameters finite: {finite}"
    if "tagger" in name:
        fresh = C.build(name) if not name.startswith("twin:") else None
        if fresh is not None:
            g = first_step_grads(fresh["model"], fresh["batch"], fresh["loss_fn"])
            shown = {k: (None if v is None else f"{v:.1e}") for k, v in g.items()
                     if k in ("word_embeddings.weight", "lstm.weight_ih_l0", "hidden2tag.weight")}
            acc += f"; first-step grad norms (fresh case) {shown}"
    if "widedeep" in name:
        acc += f"; input column means {float(x.mean(0).min()):.3g}..{float(x.mean(0).max()):.3g}"
    if name == "tfenc-fp16-adam":
        fresh = C.build(name)
        m, opt, (xb, yb) = fresh["model"], fresh["optimizer"], fresh["batch"]
        m.train()
        torch.manual_seed(0)
        loss = fresh["loss_fn"](m(xb), yb)
        loss.backward()
        g = [p.grad for p in m.parameters()]
        tiny = sum(int(((gi != 0) & ((0.001 * gi.float() ** 2) < 6e-8)).sum()) for gi in g)
        opt.step()
        bad = sum(not bool(torch.isfinite(p).all()) for p in m.parameters())
        acc += (f"; first step (fresh case): loss {float(loss):.4g} finite, {tiny} non-zero gradient entries whose "
                f"(1 - beta2) * g^2 is below FP16's smallest value, eps 1e-8 in FP16 = {float(torch.tensor(1e-8).half())}; "
                f"after the first AdamW step {bad}/{len(g)} parameter tensors hold inf or NaN")
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
