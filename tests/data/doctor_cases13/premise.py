"""Premises of the thirteenth set, with plain torch loops only (never the doctor): each bug has its effect on its
case's own model, optimizer and batch, its fixed twin learns, and each healthy batch has no duplicate rows and its
loss falls well below its start.  ``python tests/data/doctor_cases13/premise.py``
"""

from __future__ import annotations

import math
import runpy
import time
from pathlib import Path

import torch

C = runpy.run_path(str(Path(__file__).resolve().parent / "cases.py"))
STEPS = 200


def train(case, steps=STEPS):
    model, batch, opt = case["model"], case["batch"], case["optimizer"]
    loss_fn = case.get("loss_fn")
    sched = None
    if opt.param_groups[0].get("initial_lr") is not None:  # the warm-up case: step its scheduler
        from transformers import get_scheduler

        sched = get_scheduler("linear", optimizer=opt, num_warmup_steps=20, num_training_steps=steps)
    model.train()
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        if isinstance(batch, dict):
            loss = model(**batch).loss
        else:
            loss = loss_fn(model(batch[0]), batch[1])
        losses.append(loss.item())
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
    return losses


def show(name, losses, extra=""):
    finite = [v for v in losses if math.isfinite(v)]
    low = min(finite) if finite else float("nan")
    print(f"{name}: first {losses[0]:.4g} lowest {low:.4g} last {losses[-1]:.4g}"
          f" (non-finite losses {len(losses) - len(finite)}/{len(losses)}) {extra}")


def no_dup_rows(t):
    flat = t.reshape(t.shape[0], -1)
    return len({tuple(r.tolist()) for r in flat}) == flat.shape[0]


@torch.no_grad()
def seg_acc(m, b):
    m.eval()
    a = (m(b[0]).argmax(1) == b[1]).float().mean().item()
    m.train()
    return a


@torch.no_grad()
def loc_scores(m, b):
    m.eval()
    out = m(b[0])
    m.train()
    acc = (out[:, :10].argmax(1) == b[1][:, 0].long()).float().mean().item()
    err = (out[:, 10:] - b[1][:, 1:]).abs().mean().item() * 16
    return acc, err


@torch.no_grad()
def bin_acc(m, b):
    m.eval()
    a = ((m(b[0]) > 0).float() == b[1]).float().mean().item()
    m.train()
    return a


@torch.no_grad()
def lm_acc(m, b):
    m.eval()
    pred = m(**b).logits[:, 1:-1].argmax(-1)
    m.train()
    return (pred == b["input_ids"][:, 2:]).float().mean().item()


def main():
    torch.set_num_threads(1)
    ok = True
    t0 = time.time()

    # fcn-score-map-times-1000 and its twin (fcn-healthy-sgd-momentum is the twin)
    bug = C["build"]("fcn-score-map-times-1000")
    lb = train(bug)
    acc_b = seg_acc(bug["model"], bug["batch"])
    fg = bug["batch"][1].float().mean().item()
    show("fcn-score-map-times-1000", lb, f"pixel acc {acc_b:.3f} (foreground share {fg:.3f}; ln 2 = 0.6931)")
    good = C["build"]("fcn-healthy-sgd-momentum")
    lg = train(good)
    acc_g = seg_acc(good["model"], good["batch"])
    show("  twin / fcn-healthy-sgd-momentum", lg, f"pixel acc {acc_g:.3f}; no duplicate rows: "
         f"{no_dup_rows(good['batch'][0])}")
    ok &= acc_g > acc_b + 0.05 and lg[-1] < 0.5 * lg[0] and no_dup_rows(good["batch"][0])

    # locnet-loss-score-term-only and its twin
    bug = C["build"]("locnet-loss-score-term-only")
    acc0, err0 = loc_scores(bug["model"], bug["batch"])
    lb = train(bug)
    acc_b, err_b = loc_scores(bug["model"], bug["batch"])
    nograd = [n for n, p in bug["model"].named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    show("locnet-loss-score-term-only", lb, f"class acc {acc_b:.3f}, centre error {err0:.2f} -> {err_b:.2f} px; "
         f"parameters with no gradient: {nograd}")
    twin = C["build"]("locnet-loss-score-term-only")
    twin["loss_fn"] = C["LocLoss"]()
    lt = train(twin)
    acc_t, err_t = loc_scores(twin["model"], twin["batch"])
    show("  twin (both terms)", lt, f"class acc {acc_t:.3f}, centre error {err_t:.2f} px")
    ok &= bool(nograd) and err_t < 0.5 * err_b

    # kerasmlp2-one-nan-input and its twin
    bug = C["build"]("kerasmlp2-one-nan-input")
    lb = train(bug)
    finite = all(torch.isfinite(p).all() for p in bug["model"].parameters())
    show("kerasmlp2-one-nan-input", lb, f"NaN inputs {int(torch.isnan(bug['batch'][0]).sum())}; "
         f"parameters all finite after training: {finite}")
    twin = C["build"]("kerasmlp2-one-nan-input")
    twin["batch"] = C["cancer"]()
    lt = train(twin)
    show("  twin (no NaN)", lt, f"acc {bin_acc(twin['model'], twin['batch']):.3f}")
    ok &= (not math.isfinite(lb[-1])) and lt[-1] < 0.5 * lt[0]

    # supcon-features-not-normalised and its twin
    bug = C["build"]("supcon-features-not-normalised")
    lb = train(bug)
    first_nan = next((i for i, v in enumerate(lb) if not math.isfinite(v)), None)
    show("supcon-features-not-normalised", lb, f"first non-finite loss at step {first_nan}; ln(2n - 1) = "
         f"{math.log(2 * len(bug['batch'][1]) - 1):.4f} (every other view alike)")
    twin = C["build"]("supcon-features-not-normalised")
    twin["model"].normalize = True
    lt = train(twin)
    show("  twin (F.normalize)", lt, "")
    ok &= (first_nan is not None or lb[-1] > 0.9 * lb[0]) and lt[-1] < 0.6 * lt[0]

    # zerodce-color-loss-sqrt-at-zero and its twins
    bug = C["build"]("zerodce-color-loss-sqrt-at-zero")
    lb = train(bug)
    first_nan = next((i for i, v in enumerate(lb) if not math.isfinite(v)), None)
    finite = all(torch.isfinite(p).all() for p in bug["model"].parameters())
    show("zerodce-color-loss-sqrt-at-zero", lb, f"first non-finite loss at step {first_nan}; parameters all finite "
         f"after training: {finite}")
    twin = C["build"]("zerodce-color-loss-sqrt-at-zero")
    twin["loss_fn"] = C["ZeroDCELoss"](eps=1e-5)
    lt = train(twin)
    show("  twin (+1e-5 in the root, the thread's fix)", lt, "")
    ok &= first_nan is not None and lt[-1] < 0.5 * lt[0]

    # healthy: qwen2 AdamW + warm-up
    h = C["build"]("qwen2-healthy-adamw-warmup")
    print(f"qwen2 lr at step 0: {h['optimizer'].param_groups[0]['lr']}")
    lh = train(h)
    show("qwen2-healthy-adamw-warmup", lh, f"next-token acc from the third on {lm_acc(h['model'], h['batch']):.3f};"
         f" no duplicate rows: {no_dup_rows(h['batch']['input_ids'])}")
    ok &= lh[-1] < 0.3 * lh[0] and no_dup_rows(h["batch"]["input_ids"])

    # healthy: locnet with its first conv frozen on purpose
    h = C["build"]("locnet-healthy-first-conv-frozen-intended")
    lh = train(h)
    acc_h, err_h = loc_scores(h["model"], h["batch"])
    trainable = [p for p in h["model"].parameters() if p.requires_grad]
    with_grad = sum(1 for p in trainable if p.grad is not None and p.grad.abs().sum() > 0)
    show("locnet-healthy-first-conv-frozen-intended", lh, f"class acc {acc_h:.3f}, centre error {err_h:.2f} px, "
         f"{with_grad}/{len(trainable)} trainable tensors get a gradient; no duplicate rows: "
         f"{no_dup_rows(h['batch'][0])}")
    ok &= lh[-1] < 0.3 * lh[0] and with_grad == len(trainable) and no_dup_rows(h["batch"][0])

    print(f"all premises hold: {ok} ({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
