"""Premise check for the fourteenth set, in plain torch loops (never the doctor): each planted bug has the effect its
thread reports on the case's one batch, its fixed twin learns, the healthy setups learn, and the healthy batches have
no duplicate rows.  ``python tests/data/doctor_cases14/premise.py``
"""

from __future__ import annotations

import math
import runpy
import time
from pathlib import Path

import torch

C = runpy.run_path(str(Path(__file__).resolve().parent / "cases.py"))
STEPS = 200


def train(case, steps=STEPS, warmup=0):
    m, opt, loss_fn, (x, y) = case["model"], case["optimizer"], case["loss_fn"], case["batch"]
    base = [g.get("initial_lr", g["lr"]) for g in opt.param_groups]
    losses, zero_grad_steps = [], 0
    for s in range(steps):
        if warmup:
            for g, lr in zip(opt.param_groups, base):
                g["lr"] = lr * min(1.0, s / warmup)
        opt.zero_grad()
        loss = loss_fn(m(x), y)
        loss.backward()
        gn = sum(float(p.grad.norm()) ** 2 for p in m.parameters() if p.grad is not None) ** 0.5
        zero_grad_steps += gn == 0.0
        losses.append(loss.item())
        opt.step()
    return losses, zero_grad_steps


def show(name, losses, extra=""):
    fin = [v for v in losses if math.isfinite(v)]
    nan_at = next((i for i, v in enumerate(losses) if not math.isfinite(v)), None)
    low = min(fin) if fin else float("nan")
    print(f"{name}: first {losses[0]:.4g} lowest {low:.4g} last {losses[-1]:.4g} non-finite from step {nan_at}"
          f"{extra}")
    return low, nan_at


def no_dup_rows(t):
    flat = t.reshape(t.shape[0], -1)
    return len(torch.unique(flat, dim=0)) == flat.shape[0]


def main():
    t0 = time.time()
    ok = True
    torch.set_num_threads(2)

    # keras#2975: softmax over one unit -> output always 1.0, no gradient, same class for every input
    c = C["build"]("kerascnn-softmax-on-one-unit")
    losses, zs = train(c)
    with torch.no_grad():
        out = c["model"](c["batch"][0])
    show("kerascnn softmax on one unit", losses, f"; zero-gradient steps {zs}/{STEPS}; distinct outputs "
         f"{out.unique().numel()}")
    ok &= zs == STEPS and losses[-1] == losses[0] and out.unique().numel() == 1
    torch.manual_seed(0)
    m = C["KerasCNN"]()
    twin = dict(model=m, batch=C["digits_binary"](), loss_fn=torch.nn.BCEWithLogitsLoss(),
                optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))
    losses, _ = train(twin)
    with torch.no_grad():
        acc = float(((m(twin["batch"][0]) > 0).float() == twin["batch"][1]).float().mean())
    show("  fixed twin (logit + BCEWithLogitsLoss)", losses, f"; accuracy {acc:.3f}")
    ok &= losses[-1] < 0.2 * losses[0] and acc > 0.95

    # nanoGPT#136: lr far too high for AdamW -> NaN / no learning; the twin at 3e-3 learns
    c = C["build"]("nanogpt-adamw-lr-too-high")
    losses, _ = train(c)
    low, nan_at = show("nanogpt AdamW lr 3.0", losses)
    ok &= nan_at is not None or losses[-1] > 0.5 * losses[0]
    torch.manual_seed(0)
    m = C["GPT"]()
    twin = dict(model=m, batch=C["counting"](), loss_fn=C["LMLoss"](), optimizer=C["gpt_adamw"](m, lr=3e-3))
    losses, _ = train(twin)
    show("  fixed twin (lr 3e-3)", losses)
    ok &= losses[-1] < 0.2 * losses[0]

    # dfdx#486: ReLU on the output -> negative targets unreachable, zero gradient on them
    c = C["build"]("dfdxmlp-relu-on-output")
    losses, _ = train(c, steps=600)
    with torch.no_grad():
        out = c["model"](c["batch"][0])
    y = c["batch"][1]
    floor = float((y.clamp(max=0) ** 2).mean())
    show("dfdxmlp ReLU on output", losses, f"; floor from negative targets {floor:.3f}; outputs at 0 "
         f"{float((out == 0).float().mean()):.2f}")
    ok &= losses[-1] >= 0.9 * floor
    torch.manual_seed(0)
    m = C["MLP"]()
    twin = dict(model=m, batch=C["regression"](), loss_fn=torch.nn.MSELoss(),
                optimizer=torch.optim.Adam(m.parameters(), lr=1e-3))
    losses, _ = train(twin, steps=600)
    show("  fixed twin (no output ReLU)", losses)
    ok &= losses[-1] < 0.2 * floor

    # healthy setups
    for cid, steps, warm in (("kerascnn-healthy-sgd-momentum", STEPS, 0), ("nanogpt-healthy-adamw-warmup", STEPS, 20),
                             ("dfdxmlp-healthy-first-layer-frozen-intended", 600, 0)):
        h = C["build"](cid)
        lr0 = h["optimizer"].param_groups[0]["lr"]
        dup_ok = no_dup_rows(h["batch"][0])
        losses, _ = train(h, steps, warm)
        show(cid, losses, f"; lr at step 0 {lr0}; no duplicate rows {dup_ok}")
        ok &= dup_ok and losses[-1] < 0.2 * losses[0] and (lr0 == 0.0 if warm else True)

    print(f"all premises hold: {ok} ({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
