"""Check the premises of the cases with plain torch loops (never the doctor): ``python premise.py [case ...]``.

For every case and for a healthy twin of each base whose cases all carry a bug, train the case's own model with
its own optimizer on its own batch for 200 steps (a scheduler's lr restored from ``initial_lr`` and ramped over 20
steps, as the user's loop would) and print the loss at the first step, its lowest value and the last one, how many
trainable parameters got a gradient and how many had non-finite gradients at step 0.  A case given a DataLoader
trains on its first batch (as the doctor does) and, separately, on the loader's batches in turn, with the loss on
the next unseen batch.  A few cases print the one fact their bug is about (the mode, two seeded runs, a sample's
output against another sample's input, outputs of distinct inputs).  The labels do not depend on these numbers.
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
    """Healthy versions of the bases whose cases all carry a bug."""
    torch.manual_seed(0)
    m = C.ESPCN()
    yield "twin:sr-without-noise", dict(model=m, batch=C.lowres_digits(), loss_fn=nn.MSELoss(),
                                        optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))
    torch.manual_seed(0)
    m = C.vit()
    yield "twin:vit-initializer-range-0.02", dict(model=m, batch=C.vit_batch(),
                                                  optimizer=torch.optim.AdamW(m.parameters(), lr=1e-3))
    torch.manual_seed(0)
    m = C.SNLIClassifier()
    yield "twin:snli-returns-ht-adam-1e-3", dict(model=m, batch=C.snli_batch(), loss_fn=nn.CrossEntropyLoss(),
                                                 optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))
    torch.manual_seed(0)
    m = C.Translator()
    yield "twin:seq2seq-transpose-adam", dict(model=m, batch=C.reverse_task(), loss_fn=C.TokenCrossEntropy(),
                                              optimizer=torch.optim.Adam(m.parameters(), lr=3e-3, betas=(0.9, 0.98),
                                                                         eps=1e-9))
    torch.manual_seed(0)
    yield "twin:litft-labels-with-their-images", dict(model=C.lit_transfer(), batch=C.digit_loader())
    torch.manual_seed(0)
    m = C.nn.Linear(C.POLY_DEGREE, 1)
    with torch.no_grad():
        m.bias.fill_(50.0)  # Karpathy's fix: the final bias at the targets' mean
    yield "twin:regression-mean-50-bias-50", dict(model=m, batch=C.poly_batch(offset=50.0), loss_fn=F.smooth_l1_loss,
                                                  optimizer=torch.optim.SGD(m.parameters(), lr=0.1))


def loss_of(model, batch, loss_fn):
    if loss_fn is None and hasattr(model, "training_step"):
        return model.training_step(batch, 0)
    if isinstance(batch, dict):
        return model(**batch).loss
    inputs, targets = batch
    out = model(*inputs) if isinstance(inputs, tuple) else model(inputs)
    return loss_fn(out, targets)


def optimizer_of(args):
    opt = args.get("optimizer")
    return opt if opt is not None else args["model"].configure_optimizers()


def run(args, steps=200, batches=None):
    """200 steps on one batch, or on ``batches`` in turn (then the last number is the loss on an unseen batch)."""
    model, loss_fn, opt = args["model"], args.get("loss_fn"), optimizer_of(args)
    warm = [g.get("initial_lr") for g in opt.param_groups]
    losses, bad_grads = [], 0
    try:
        for step in range(steps):
            for g, lr0 in zip(opt.param_groups, warm):
                if lr0 is not None:
                    g["lr"] = lr0 * min(1.0, (step + 1) / 20)
            batch = batches[step % (len(batches) - 1)] if batches else args["batch"]
            opt.zero_grad()
            loss = loss_of(model, batch, loss_fn)
            loss.backward()
            if step == 0:
                bad_grads = sum(p.grad is not None and not bool(torch.isfinite(p.grad).all())
                                for p in model.parameters())
            opt.step()
            losses.append(loss.item())
    except Exception as e:  # a case whose premise is that torch raises
        return f"raised {type(e).__name__}: {str(e)[:90]}", []
    params = [p for p in model.parameters() if p.requires_grad]
    got = sum(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in params)
    fin = [v for v in losses if math.isfinite(v)]
    low = f"{min(fin):.4g}" if fin else "none finite"
    tail = ""
    if batches:
        with torch.no_grad():
            tail = f"; loss on an unseen batch {loss_of(model, batches[-1], loss_fn).item():.4g}"
    return (f"loss {losses[0]:.4g} -> lowest {low} -> last {losses[-1]:.4g} ({len(losses)} steps; "
            f"trainable params with a non-zero grad {got}/{len(params)}, non-finite grads at step 0: {bad_grads})"
            + tail), losses


def facts(name, args, losses):
    """The one fact each such case is about, printed next to its losses."""
    model = args["model"]
    if name == "distilbert-eval-left":
        return f"model.training={model.training} during the whole run (dropout off)"
    if name == "sr-unseeded-noise-generator":
        again = C.build(name)  # the same torch seed, the same initial weights; the numpy noise differs
        _, l2 = run(again)
        same = l2 == losses
        return f"two runs with the same torch seed end at {losses[-1]:.6g} and {l2[-1]:.6g} (identical: {same})"
    if name in ("seq2seq-view-for-transpose", "twin:seq2seq-transpose-adam"):
        (src, tgt_in), _ = args["batch"]
        model.eval()
        with torch.no_grad():
            a = model(src, tgt_in)
            src2 = src.clone()
            src2[1] = src2[1].flip(0)  # change sample 1 only
            b = model(src2, tgt_in)
        model.train()
        return f"sample 0's logits change when only sample 1's source changes: {not torch.allclose(a[0], b[0])}"
    if name == "snli-encoder-returns-initial-state":
        inputs, _ = args["batch"]
        model.eval()
        with torch.no_grad():
            out = model(*inputs)
        model.train()
        return f"outputs identical for all {len(out)} distinct inputs: {bool(torch.allclose(out, out[:1].expand_as(out)))}"
    if name == "vit-initializer-range-1":
        return f"-log(1/10) = {math.log(10):.3f}"
    if name == "gcn-softmax-into-cross-entropy":
        return f"floor of CE on probabilities, 3 classes: {-math.log(math.e / (math.e + 2)):.3f}"
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
            loader = args["batch"] if isinstance(args["batch"], torch.utils.data.DataLoader) else None
            if loader is not None:
                batches = list(loader)
                model_state = {k: v.clone() for k, v in args["model"].state_dict().items()}
                one, _ = run(dict(args, batch=batches[0]))
                args["model"].load_state_dict(model_state)
                many, _ = run(args, batches=batches)
                result = f"first batch only: {one}\n{'':46}the loader's batches in turn: {many}"
            else:
                result, losses = run(args)
            fact = facts(name, args, losses if loader is None else [])
        print(f"{name:46} {result}  [{time.perf_counter() - t0:.1f}s]" + (f"\n{'':46}{fact}" if fact else ""),
              flush=True)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1:])
