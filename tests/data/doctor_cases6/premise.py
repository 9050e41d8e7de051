"""Check the premises of the cases with plain torch loops (never the doctor): ``python premise.py [case ...]``.

For every case and for a healthy twin of each bug, train the case's own model with its own optimizer on its own
batch for 200 steps (a scheduler's lr restored from ``initial_lr`` and ramped over 20 steps, as the user's loop
would; the model left in the mode it was handed over in, as a loop that forgets ``model.train()`` does) and print
the loss at the first step, its lowest value and the last one, how many trainable parameters got a gradient and
how many had non-finite gradients at step 0.  A few cases print the one fact their bug is about.  The labels do
not depend on these numbers.
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
    m = C.ConformerClassifier()
    yield "twin:conformer-train-mode-logits", dict(model=m, batch=C.tones(), loss_fn=nn.CrossEntropyLoss(),
                                                   optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))
    torch.manual_seed(0)
    m = C.MLPMixer()
    yield "twin:mixer-logits-adam", dict(model=m, batch=C.digits(), loss_fn=nn.CrossEntropyLoss(),
                                         optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))
    torch.manual_seed(0)
    m = C.Tagger()
    yield "twin:tagger-transpose", dict(model=m, batch=C.tag_sequences(), loss_fn=nn.CrossEntropyLoss(),
                                        optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))
    torch.manual_seed(0)
    m = C.DeepFM()
    yield "twin:deepfm-bce-with-logits", dict(model=m, batch=C.clicks(), loss_fn=nn.BCEWithLogitsLoss(),
                                              optimizer=torch.optim.Adam(m.parameters(), lr=1e-2))
    torch.manual_seed(0)
    m = C.EmbeddingNet()
    yield "twin:metric-default-init", dict(model=m, batch=C.digits(flat=True), loss_fn=C.batch_hard_triplet,
                                           optimizer=torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9))


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


def cross_talk(model, x):
    """How much the outputs of the other samples move when only sample 0 of the input changes (0: none)."""
    model.eval()
    with torch.no_grad():
        a = model(x)
        x2 = x.clone()
        x2[0] = x2[0].flip(0)
        b = model(x2)
    return float((a[1:] - b[1:]).abs().max())


def facts(name, args, losses):
    """The one fact each such case is about, printed next to its losses."""
    if name in ("conformer-left-in-eval-mode", "twin:conformer-train-mode-logits"):
        bn = args["model"].block.bn
        return (f"model.training={args['model'].training}; BatchNorm running_mean max |.| after 200 steps "
                f"{bn.running_mean.abs().max():.3g}, running_var mean {bn.running_var.mean():.3g}")
    if name in ("tagger-view-for-transpose", "twin:tagger-transpose", "tagger-healthy-frozen-embeddings-intended",
                "conformer-log-softmax-over-batch"):
        x = args["batch"][0]
        return f"the other samples' outputs move by {cross_talk(args['model'], x):.3g} when only sample 0's input changes"
    if name == "mixer-softmax-into-cross-entropy":
        return "floor of CrossEntropyLoss on probabilities over 10 classes: " \
               f"{-math.log(math.e / (math.e + 9)):.3f}"
    if name in ("deepfm-hand-written-bce-log-zero", "twin:deepfm-bce-with-logits"):
        (ids, dense), _ = args["batch"]
        with torch.no_grad():
            z = args["model"](ids, dense)
        return f"largest |logit| at the end {z.abs().max():.3g} (sigmoid is exactly 0 or 1 in float32 past ~17)"
    if name in ("metric-init-std-1e-4", "twin:metric-default-init"):
        g = [p.grad.norm().item() for p in args["model"].parameters() if p.dim() > 1]
        x = args["batch"][0]
        with torch.no_grad():
            e = args["model"](x)
        return f"embedding norm {e.norm(dim=1).mean():.2e}; grad norm of first / last Linear {g[0]:.1e} / {g[-1]:.1e}"
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
        print(f"{name:42} {result}  [{time.perf_counter() - t0:.1f}s]" + (f"\n{'':42} {fact}" if fact else ""),
              flush=True)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1:])
