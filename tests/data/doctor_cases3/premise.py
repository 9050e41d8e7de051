"""Check the premises of the cases with plain torch loops (never the doctor): ``python premise.py [case ...]``.

For every case and for a healthy twin of each base whose cases all carry a bug, train the case's own model with
its own optimizer on its own batch for 200 steps (a warm-up scheduler's lr restored from ``initial_lr`` and
ramped over 20 steps, as the user's loop would) and print the loss at the first step, its lowest value and the
last one, and how many parameters got finite gradients.  A healthy setup must fall clearly; the numbers of the
bug cases are printed as they come (the labels do not depend on them).
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
    m = C.Sequence()
    yield "twin:tsp-outputs-kept", dict(model=m, batch=C.sine_waves(), loss_fn=nn.MSELoss(),
                                        optimizer=torch.optim.Adam(m.parameters(), lr=1e-2))
    torch.manual_seed(0)
    m = C.SiameseNetwork()
    yield "twin:siamese-bce-adadelta (the example)", dict(model=m, batch=C.digit_pairs(), loss_fn=nn.BCELoss(),
                                                          optimizer=torch.optim.Adadelta(m.parameters(), lr=1.0))
    torch.manual_seed(0)
    m = C.SiameseNetwork(embed_only=True)

    def contrastive_eps(out, same, margin=2.0):
        d = F.pairwise_distance(*out)  # adds eps inside the norm
        return (same * d**2 + (1 - same) * F.relu(margin - d) ** 2).mean()

    yield "twin:siamese-contrastive-pairwise-distance", dict(model=m, batch=C.digit_pairs(), loss_fn=contrastive_eps,
                                                             optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))
    torch.manual_seed(0)
    m = C.RowLSTM()
    yield "twin:rnn-log-softmax", dict(model=m, batch=C.digits(), loss_fn=F.nll_loss,
                                       optimizer=torch.optim.Adadelta(m.parameters(), lr=1.0))
    torch.manual_seed(0)
    m = C.LinnerudNet()
    yield "twin:linnerud-whole-model", dict(model=m, batch=C.linnerud(), loss_fn=nn.MSELoss(),
                                            optimizer=torch.optim.Adam(m.parameters(), lr=1e-2))
    torch.manual_seed(0)
    m = C.cnn1d()
    yield "twin:cnn1d-lr-3e-3", dict(model=m, batch=C.waves(), loss_fn=nn.CrossEntropyLoss(),
                                     optimizer=torch.optim.Adam(m.parameters(), lr=3e-3))


def loss_of(model, batch, loss_fn):
    if loss_fn is None and hasattr(model, "training_step"):
        return model.training_step(batch, 0)
    if isinstance(batch, dict):
        return model(**batch).loss
    inputs, targets = batch
    out = model(*inputs) if isinstance(inputs, tuple) else model(inputs)
    return loss_fn(out, targets)


def run(args, steps=200):
    model, loss_fn, opt = args["model"], args.get("loss_fn"), args.get("optimizer")
    if opt is None:
        opt = model.configure_optimizers()
    warm = [g.get("initial_lr") for g in opt.param_groups]
    losses, bad_grads = [], 0
    try:
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
    except Exception as e:  # a case whose premise is that torch raises
        return f"raised {type(e).__name__}: {str(e)[:90]}"
    params = [p for p in model.parameters() if p.requires_grad]
    got = sum(p.grad is not None for p in params)
    fin = [v for v in losses if math.isfinite(v)]
    low = f"{min(fin):.4g}" if fin else "none finite"
    return (f"loss {losses[0]:.4g} -> lowest {low} -> last {losses[-1]:.4g} ({len(losses)} steps; "
            f"trainable params with a grad {got}/{len(params)}, non-finite grads at step 0: {bad_grads})")


def main(names):
    todo = [(n, None) for n in (names or C.CASES)]
    if not names:
        todo += list(twins())
    for name, args in todo:
        t0 = time.perf_counter()
        args = args or C.build(name)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = run(args)
        seen = sorted({str(w.message)[:70] for w in caught if "broadcast" in str(w.message) or "size" in str(w.message)})
        print(f"{name:44} {result}  [{time.perf_counter() - t0:.1f}s]" + (f"  warned: {seen}" if seen else ""),
              flush=True)
    if not names:
        x, y = C.digit_pairs()
        same_img = sum(bool(torch.equal(a, b)) for a, b in zip(*x))
        print(f"siamese batch: {len(y)} pairs, {int(y.sum())} same-class, {same_img} with the same image twice")
        print(f"wine softmax-before-CE floor: {-math.log(math.e / (math.e + 2)):.3f} (3 classes)")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1:])
