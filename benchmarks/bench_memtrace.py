"""``%%memtrace`` on CPU around a training step, against the plain step and against the bare profiler.

    python benchmarks/bench_memtrace.py [--dim 512] [--layers 2] [--runs 9]

Four variants run interleaved, best of N each:
  plain      the training step alone
  profiler   the step inside torch.profiler(profile_memory, with_stack): the floor.  These are the events memtrace
             needs for the same attribution to lines (every allocation and free, and the Python calls above it);
             no recording of CPU allocations with stacks costs less in PyTorch today
  +shapes    the same with record_shapes, which memtrace adds only for --categories (the memory profile needs the
             shapes); memtrace recorded with it before, so it is the earlier floor
  memtrace   the step inside nbdebug.memtrace("cpu"), including the conversion into a MemTrace and its text and
             HTML reports
Target: nbdebug's own share, memtrace / profiler, <= 1.10x.
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--runs", type=int, default=9)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.dim, args.dim), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(args.dim, 1))
    opt = torch.optim.Adam(model.parameters())
    x, y = torch.randn(args.batch, args.dim), torch.randn(args.batch, 1)

    def step() -> None:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()

    from torch.profiler import ProfilerActivity, profile

    from nbdebug.core.memory import memtrace
    from nbdebug.render.memory import memtrace_html, memtrace_text

    def plain() -> None:
        step()

    def profiler() -> None:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, with_stack=True):
            step()

    def shapes() -> None:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True):
            step()

    def traced() -> None:
        with memtrace("cpu") as rec:
            step()
        memtrace_text(rec.result)
        memtrace_html(rec.result)

    import os

    os.environ.setdefault("KINETO_LOG_LEVEL", "99")  # the same quiet profiler for every variant
    variants = {"plain": plain, "profiler": profiler, "+shapes": shapes, "memtrace": traced}
    for fn in variants.values():  # warm-up (optimizer state, profiler init)
        fn()
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(args.runs):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    best = {k: min(v) for k, v in times.items()}
    params = sum(p.numel() for p in model.parameters())
    print(f"MLP {args.layers}x{args.dim} ({params / 1e6:.2f}M params), batch {args.batch}, 1 thread, best of {args.runs}")
    for k, v in best.items():
        print(f"  {k:<9} {v * 1e3:8.1f} ms   {v / best['plain']:.2f}x plain")
    print(f"  nbdebug's own share, memtrace / profiler: {best['memtrace'] / best['profiler']:.2f}x  (target <= 1.10x)")
    print(f"  memtrace / profiler with shapes (the earlier floor): {best['memtrace'] / best['+shapes']:.2f}x")


if __name__ == "__main__":
    main()
