"""Overhead of GradMonitor and nan_sentinel on real training steps (CPU), side by side.

Models: a small transformer LM (4 layers, d_model 128, batch 8 x 64 tokens; also inside an accelerate loop),
ResNet-18 (batch 32 of 32x32 images; the transformers
implementation built from its config: 11.2 M parameters, the torchvision layout) and a tiny BERT classifier
(transformers, from a config).  Every variant trains its own copy of the same model.  Each round runs every
variant right next to a run of the bare step (bare first in even rounds, the variant first in odd ones), so the two
see the same load on a shared machine; a figure is the median over rounds of those pairs' ratios of thread CPU time
(with the spread between the rounds' quartiles, and the median wall-clock ratio beside it).

    python benchmarks/bench_training.py [--rounds 11] [--steps 6] [--models transformer,accelerate,resnet18,bert,doctor]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nbdebug.core.training.grads import GradMonitor  # noqa: E402
from nbdebug.core.training.nan import nan_sentinel  # noqa: E402
from nbdebug.ipython._live import LivePanel  # noqa: E402

VOCAB, D, HEADS, LAYERS, SEQ, BATCH = 512, 128, 4, 4, 64, 8  # issue 24: 4 layers, d_model 128, 8 x 64 tokens


class TinyTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.pos = nn.Parameter(torch.zeros(SEQ, D))
        layer = nn.TransformerEncoderLayer(D, HEADS, 4 * D, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB)

    def forward(self, idx):  # (B, T) -> (B, T, V)
        return self.head(self.norm(self.blocks(self.emb(idx) + self.pos)))


def naive_checks(model):
    """The seeds' hand-written loop: a host sync per parameter per step."""
    for name, p in model.named_parameters():
        if p.grad is not None:
            if torch.isnan(p.grad).any():
                raise FloatingPointError(name)
            _ = p.grad.norm().item()


def lm_loss(out, y):
    return F.cross_entropy(out.reshape(-1, VOCAB), y.reshape(-1))


def hf_loss(out, y):
    return F.cross_entropy(out.logits, y)


def real_models():
    """(name, model, inputs, targets, loss) of the real architectures; None when transformers is missing."""
    try:
        import transformers
    except ImportError:
        print("transformers is not installed: ResNet-18 and BERT skipped (pip install transformers)")
        return []
    torch.manual_seed(0)
    resnet = transformers.ResNetForImageClassification(transformers.ResNetConfig(
        layer_type="basic", depths=[2, 2, 2, 2], hidden_sizes=[64, 128, 256, 512], embedding_size=64, num_labels=10))
    bert = transformers.BertForSequenceClassification(transformers.BertConfig(
        vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512,
        max_position_embeddings=128, num_labels=3))
    return [
        ("resnet18", resnet, torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,)), hf_loss),
        ("bert", bert, torch.randint(0, 1000, (16, 64)), torch.randint(0, 3, (16,)), hf_loss),
    ]


class Variant:
    def __init__(self, name, base, kind, loss_fn=lm_loss):
        self.name, self.kind = name, kind
        self.loss_fn = loss_fn
        self.model = copy.deepcopy(base)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.stack = ExitStack()
        if kind in ("monitor", "live", "monitor_backward"):
            self.mon = GradMonitor(self.model, optimizer=self.opt, refresh_hz=2.0,
                                   record_at="backward" if kind == "monitor_backward" else "optimizer")
            if kind == "live":  # what the live panel does between steps, minus the display-update message
                self.renders = []
                panel = LivePanel(self.mon)  # outside IPython: no display, so only its bundle is built below
                self.mon.remove_listener(panel.update)

                def render(mon):
                    panel.bundle(running=True)
                    self.renders.append(time.perf_counter())

                self.mon.add_listener(render)
            self.stack.enter_context(self.mon)
        elif kind == "sentinel":
            self.stack.enter_context(nan_sentinel(self.model, optimizer=self.opt))

    def step(self, x, y):
        ctx = torch.autograd.detect_anomaly() if self.kind == "anomaly" else ExitStack()
        with ctx:
            loss = self.loss_fn(self.model(x), y)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
        if self.kind == "naive":
            naive_checks(self.model)
        self.opt.step()
        if self.kind in ("monitor", "live", "monitor_backward"):
            self.mon.log_loss(loss)

    def run(self, x, y, steps):
        """(wall seconds, main-thread CPU seconds) per step; with 1 intra-op thread all CPU work is on this thread."""
        t, c = time.perf_counter(), time.thread_time()
        for _ in range(steps):
            self.step(x, y)
        return (time.perf_counter() - t) / steps, (time.thread_time() - c) / steps


def paired_ratios(bare, others, rounds, run):
    """``run(variant)`` -> (wall, cpu) seconds per step.  Per round, each variant next to its own bare run (bare
    first in even rounds, second in odd ones; the variants' order reversed too): {name: ([cpu ratios], [wall
    ratios], [cpu seconds])}, with the bare step's own cpu seconds under its name."""
    out = {v.name: ([], [], []) for v in others}
    out[bare.name] = ([], [], [])
    for r in range(rounds):
        for v in (others if r % 2 == 0 else others[::-1]):
            pair = (bare, v) if r % 2 == 0 else (v, bare)
            got = {u.name: run(u) for u in pair}
            (bw, bc), (vw, vc) = got[bare.name], got[v.name]
            out[v.name][0].append(vc / bc)
            out[v.name][1].append(vw / bw)
            out[v.name][2].append(vc)
            out[bare.name][2].append(bc)
    return out


def spread(ratios):
    """The median ratio and the interquartile range of the rounds' ratios, as text."""
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return f"{statistics.median(ratios):6.3f}x [{q[0]:.3f}-{q[2]:.3f}]"


def verdict(ratios, target):
    """``target`` ("<= 1.10") with ok or MISSED for the median ratio (make bench lists the missed ones); "" for
    none."""
    if not target.startswith("<="):
        return target
    return f"target {target} {'ok' if statistics.median(ratios) <= float(target[2:]) else 'MISSED'}"


def bench_real(name, model, x, y, loss_fn, rounds, steps):
    """GradMonitor and nan_sentinel on one real architecture: CPU-time ratios to the bare step."""
    variants = [Variant(n, model, k, loss_fn) for n, k in [
        ("bare step", "bare"), ("GradMonitor (every step)", "monitor"), ("nan_sentinel", "sentinel")]]
    for v in variants:
        v.model.train()
        v.run(x, y, 1)
    got = paired_ratios(variants[0], variants[1:], rounds, lambda v: v.run(x, y, steps))
    bare = statistics.median(got["bare step"][2])
    n = sum(p.numel() for p in model.parameters())
    print(f"\n{name}: {n / 1e6:.2f} M parameters, batch {tuple(x.shape)}, median of {rounds} rounds x {steps} steps, "
          f"each variant paired with a bare run; load average {os.getloadavg()[0]:.1f}")
    print(f"  {'bare step':<28} {bare * 1e3:9.2f} ms/step  1.000x")
    targets = {"GradMonitor (every step)": "<= 1.05", "nan_sentinel": "<= 1.15"}
    for v in variants[1:]:
        cpu, wall, secs = got[v.name]
        print(f"  {v.name:<28} {statistics.median(secs) * 1e3:9.2f} ms/step {spread(cpu)} cpu "
              f"{statistics.median(wall):6.3f}x wall  {verdict(cpu, targets.get(v.name, ''))}")
    for v in variants:
        v.stack.close()


def bench_doctor(model, x, y):
    """Wall time of doctor() on ResNet-18 (batch 32, 32x32, steps=200) against its default 60 s budget: a healthy
    model (the overfit run stops once the batch is fitted) and one that cannot learn (lr=1e-8: every phase runs
    to its deadline)."""
    from nbdebug.core.doctor import doctor

    batch = {"pixel_values": x, "labels": y}
    print("\ndoctor on resnet18, batch 32 of 32x32 images, steps=200, time_budget=60 s (default)")
    for label, opt in [("healthy (Adam 3e-3)", None),
                       ("cannot learn (Adam lr=1e-8)", torch.optim.Adam(model.parameters(), lr=1e-8))]:
        t, c = time.perf_counter(), time.process_time()
        r = doctor(model, batch, None, opt, steps=200, progress=False)
        took, cpu = time.perf_counter() - t, time.process_time() - c
        tried = "; ".join(f"{e.change}: {'restores' if e.restores else 'no better'}" for e in r.experiments)
        print(f"  {label:<30} {took:6.1f} s = {took / 60:.2f}x the budget (process CPU {cpu:.1f} s, load average "
              f"{os.getloadavg()[0]:.1f}); {len(r.losses)} overfit steps; "
              f"findings: {', '.join(f'{f.severity}:{f.kind}' for f in r.findings) or 'none'}"
              + (f"; experiments: {tried}" if tried else ""))


def bench_accelerate(rounds, steps):
    """nan_sentinel inside an accelerate loop (accelerate_watch) against the same loop bare, on the small
    transformer: thread CPU-time ratio, interleaved rounds."""
    try:
        import accelerate
    except ImportError:
        print("accelerate is not installed: skipped (pip install accelerate)")
        return
    from nbdebug.integrations import accelerate_watch

    torch.manual_seed(0)
    base = TinyTransformer()
    x = torch.randint(0, VOCAB, (BATCH, SEQ))
    y = torch.randint(0, VOCAB, (BATCH, SEQ))
    acc = accelerate.Accelerator(cpu=True)
    loops = []
    for kind in ("bare", "sentinel"):
        model = copy.deepcopy(base)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        model, opt = acc.prepare(model, opt)
        loops.append((kind, model, opt))

    def run(kind, model, opt, n):
        stack = ExitStack()
        if kind == "sentinel":
            stack.enter_context(accelerate_watch(acc, model, grad_monitor=False, nan_sentinel=True, live=False))
        c = time.thread_time()
        with stack:
            for _ in range(n):
                loss = lm_loss(model(x), y)
                acc.backward(loss)
                opt.step()
                opt.zero_grad()
        return (time.thread_time() - c) / n

    for loop in loops:
        run(*loop, 2)
    ratios, secs = [], {k: [] for k, _, _ in loops}
    for r in range(rounds):
        got = {kind: run(kind, model, opt, steps) for kind, model, opt in (loops if r % 2 == 0 else loops[::-1])}
        ratios.append(got["sentinel"] / got["bare"])
        for k, v in got.items():
            secs[k].append(v)
    print(f"\naccelerate loop, small transformer (batch {BATCH}x{SEQ}), median of {rounds} rounds x {steps} steps, "
          f"the two loops run next to each other in each round; load average {os.getloadavg()[0]:.1f}")
    print(f"  bare accelerate step          {statistics.median(secs['bare']) * 1e3:8.2f} ms/step  1.000x")
    print(f"  accelerate_watch(nan_sentinel) {statistics.median(secs['sentinel']) * 1e3:8.2f} ms/step "
          f"{spread(ratios)}  {verdict(ratios, '<= 1.15')}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models", default="transformer,accelerate,resnet18,bert,doctor",
                    help="comma-separated: transformer (the small LM), accelerate (the sentinel in an accelerate "
                         "loop), resnet18, bert, doctor (doctor's wall time on resnet18)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    chosen = {m.strip() for m in args.models.split(",") if m.strip()}
    for name, model, x, y, loss_fn in real_models():
        if name in chosen:
            bench_real(name, model, x, y, loss_fn, max(3, args.rounds // 2), max(2, args.steps // 3))
        if name == "resnet18" and "doctor" in chosen:
            bench_doctor(model, x, y)
    if "accelerate" in chosen:
        bench_accelerate(args.rounds, args.steps)
    if "transformer" not in chosen:
        return
    torch.manual_seed(0)
    base = TinyTransformer()
    x = torch.randint(0, VOCAB, (BATCH, SEQ))
    y = torch.randint(0, VOCAB, (BATCH, SEQ))
    variants = [Variant(n, base, k) for n, k in [
        ("bare step", "bare"),
        ("GradMonitor (every step)", "monitor"),
        ("GradMonitor, norms read before clipping (integrations)", "monitor_backward"),
        ("GradMonitor + live panel rendering (<= 2 Hz)", "live"),
        ("naive loop: isnan().any() + norm().item() per parameter", "naive"),
        ("nan_sentinel", "sentinel"),
        ("torch.autograd.detect_anomaly", "anomaly"),
    ]]
    import warnings

    warnings.filterwarnings("ignore", message=".*[Aa]nomaly.*")
    for v in variants:  # warm-up
        v.run(x, y, 2)
    got = paired_ratios(variants[0], variants[1:], args.rounds, lambda v: v.run(x, y, args.steps))
    n_params = sum(1 for _ in base.parameters())
    bare_cpu = statistics.median(got["bare step"][2])
    print(f"small transformer: {sum(p.numel() for p in base.parameters()) / 1e6:.2f} M parameters in {n_params} tensors, "
          f"batch {BATCH}x{SEQ}, torch {torch.__version__}, {args.threads} thread(s), "
          f"median of {args.rounds} rounds x {args.steps} steps, each variant paired with a bare run; "
          f"load average {os.getloadavg()[0]:.1f}")
    print("ratio: thread CPU time (robust to other processes on a shared machine), median of the rounds' paired "
          "ratios [their quartiles]; wall-clock ratio beside it")
    print(f"{'variant':<58} {'ms/step':>8} {'ratio':>7} {'[quartiles]':>13} {'wall':>7}  target")
    targets = {"GradMonitor (every step)": "<= 1.05", "nan_sentinel": "<= 1.10",
               "GradMonitor, norms read before clipping (integrations)": "<= 1.05",
               "GradMonitor + live panel rendering (<= 2 Hz)": "(no target; see the renders count)"}
    print(f"{'bare step':<58} {bare_cpu * 1e3:8.2f}  1.000x {'':>13}  1.000x")
    for v in variants[1:]:
        cpu, wall, secs = got[v.name]
        print(f"{v.name:<58} {statistics.median(secs) * 1e3:8.2f} {spread(cpu)} {statistics.median(wall):6.3f}x  "
              f"{verdict(cpu, targets.get(v.name, ''))}")
    # the monitor's own per-step work, timed alone (no training noise): norms + stack + batched host copies
    mon = next(v for v in variants if v.kind == "monitor").mon
    n = 200
    c = time.thread_time()
    for _ in range(n):
        mon._record()
    alone = (time.thread_time() - c) / n
    print(f"GradMonitor per-step work timed alone: {alone * 1e3:.3f} ms = {alone / bare_cpu:.2%} of the bare step "
          f"(ratio {1 + alone / bare_cpu:.3f}x)")
    live = next(v for v in variants if v.kind == "live")
    gaps = [b - a for a, b in zip(live.renders, live.renders[1:])]
    print(f"live panel: {len(live.renders)} renders over {len(live.mon.history.steps)} steps; "
          f"shortest gap between renders {min(gaps) if gaps else float('nan'):.2f} s (bound: 0.5 s)")
    for v in variants:
        v.stack.close()


if __name__ == "__main__":
    main()
