"""Check the premises of the cases with plain torch loops (never the doctor): ``python premise.py [case ...]``.

For every case and for a healthy twin of each base, train the case's own model with its own optimizer on its
own batch for 200 steps (a warm-up scheduler's lr restored from ``initial_lr`` and ramped over 10 steps, as the
user's loop would) and print the loss at the first step, its lowest value and the last one.  A healthy setup
must fall clearly; the numbers of the bug cases are printed as they come (the label does not depend on them).
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cases as C  # noqa: E402


def twins():
    """Healthy versions of the bases whose cases all carry a bug (and of the convnext base, trained whole)."""
    ntoken, data, target, _ = C.wlm_data()
    torch.manual_seed(0)
    m = C.RNNModel(ntoken)
    yield "twin:wlm-healthy", dict(model=m, batch=(data, target), loss_fn=C.wlm_loss,
                                   optimizer=torch.optim.Adam(m.parameters(), lr=3e-3))
    torch.manual_seed(0)
    m = C.gpt2()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.0)
    C.warmup(opt)
    yield "twin:gpt2-healthy-warmup", dict(model=m, batch=C.gpt2_batch(), optimizer=opt)
    x, _ = C.digits()
    torch.manual_seed(0)
    m = C.VAE()
    yield "twin:vae-healthy", dict(model=m, batch=(x, x), loss_fn=C.vae_loss,
                                   optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))
    x, y = C.digit_images(size=32)
    torch.manual_seed(0)
    m = C.Discriminator(out=1, sigmoid=False)
    m.apply(C.dcgan_init)
    yield "twin:dcgan-binary-logits", dict(model=m, batch=(x, (y >= 5).float()), loss_fn=nn.BCEWithLogitsLoss(),
                                           optimizer=torch.optim.Adam(m.parameters(), lr=2e-4, betas=(0.5, 0.999)))
    torch.manual_seed(0)
    m = C.Discriminator(out=10, sigmoid=False)
    m.apply(C.dcgan_init)
    yield "twin:dcgan-10class-train-mode", dict(model=m, batch=(x, y), loss_fn=nn.CrossEntropyLoss(),
                                                optimizer=torch.optim.Adam(m.parameters(), lr=2e-4, betas=(0.5, 0.999)))
    x, y = C.digit_images()
    torch.manual_seed(0)
    m = C.ViT()
    yield "twin:vit-head-built-before-optimizer", dict(
        model=m, batch=(x, y), loss_fn=nn.CrossEntropyLoss(),
        optimizer=torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.05))
    torch.manual_seed(0)
    m = C.ConvNeXtTiny()
    yield "twin:convnext-healthy", dict(model=m, batch=(x, y), loss_fn=nn.CrossEntropyLoss(),
                                        optimizer=torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9,
                                                                  weight_decay=5e-4))


def loss_of(model, batch, loss_fn):
    if loss_fn is None and hasattr(model, "training_step"):
        return model.training_step(batch, 0)
    if isinstance(batch, dict):
        return model(**batch).loss
    inputs, targets = batch
    return loss_fn(model(inputs), targets)


def run(args, steps=200):
    model, loss_fn, opt = args["model"], args.get("loss_fn"), args.get("optimizer")
    batch = args["batch"] if args.get("batch") is not None else next(iter(args["dataloader"]))
    if opt is None:
        opt = model.configure_optimizers()
    warm = [g.get("initial_lr") for g in opt.param_groups]
    losses = []
    try:
        for step in range(steps):
            for g, lr0 in zip(opt.param_groups, warm):
                if lr0 is not None:
                    g["lr"] = lr0 * min(1.0, (step + 1) / 10)
            opt.zero_grad()
            loss = loss_of(model, batch, loss_fn)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    except Exception as e:  # a case whose premise is that torch raises
        return f"raised {type(e).__name__}: {str(e)[:90]}"
    grads = sum(p.grad is not None and bool(torch.isfinite(p.grad).all()) for p in model.parameters())
    fin = [v for v in losses if math.isfinite(v)]
    low = f"{min(fin):.4g}" if fin else "none finite"
    return (f"loss {losses[0]:.4g} -> lowest {low} -> last {losses[-1]:.4g} ({len(losses)} steps; "
            f"params with finite grads {grads}/{sum(1 for _ in model.parameters())})")


def heldout_after_fit(args, steps=200):
    """For the shuffled-labels case: fit the first batch, then the loss and accuracy on the next (eval mode)."""
    model, loss_fn, opt = args["model"], args["loss_fn"], args["optimizer"]
    it = iter(args["dataloader"])
    b1, b2 = next(it), next(it)
    for _ in range(steps):
        opt.zero_grad()
        loss_fn(model(b1[0]), b1[1]).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        out = model(b2[0])
        acc = (out.argmax(1) == b2[1]).float().mean().item()
        return loss_fn(model(b1[0]), b1[1]).item(), loss_fn(out, b2[1]).item(), acc


def main(names):
    todo = [(n, None) for n in (names or C.CASES)]
    if not names:
        todo += list(twins())
    for name, args in todo:
        t0 = time.perf_counter()
        args = args or C.build(name)
        print(f"{name:40} {run(args)}  [{time.perf_counter() - t0:.1f}s]", flush=True)
    if not names:  # the shuffled labels against the same loader in order: fit one batch, score the next
        xa, ya = C.digit_images(n=256)
        for label, yy in (("convnext labels in order", ya), ("convnext labels shuffled (the case)", None)):
            if yy is None:
                args = C.build("convnext-labels-shuffled")
            else:
                torch.manual_seed(0)
                m = C.ConvNeXtTiny()
                dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xa, yy), batch_size=64,
                                                 shuffle=True, generator=torch.Generator().manual_seed(0))
                args = dict(model=m, loss_fn=nn.CrossEntropyLoss(), dataloader=dl,
                            optimizer=torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4))
            fit, nxt, acc = heldout_after_fit(args)
            print(f"{label:40} CE on the fitted batch {fit:.3f}, on the next batch {nxt:.3f} "
                  f"(accuracy {acc:.2f}; chance CE 2.303, accuracy 0.10)")

if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1:])
