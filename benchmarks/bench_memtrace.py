"""``%%memtrace`` on CPU around a training step, against the plain step and against the bare profiler.

    python benchmarks/bench_memtrace.py [--dim 512] [--layers 2] [--runs 9]

Five variants run interleaved, best of N each:
  plain      the training step alone
  profiler   the step inside torch.profiler(profile_memory, with_stack): the bare profiler, the floor the target is
             measured against.  It records every allocation and free and the Python calls above each, which is
             what the attribution to lines needs, and also an event per ATen operator, which it does not
  +shapes    the same with record_shapes, which memtrace adds only for --categories (the memory profile needs the
             shapes); memtrace recorded with it before, so it is the earlier floor
  recording  what memtrace records on CPU, and nothing else: the profiler switched on for memory and Python calls
             only (no per-operator callbacks), no conversion.  This is what a traced cell pays while it runs
  memtrace   the step inside nbdebug.memtrace("cpu"), including the conversion into a MemTrace and its text and
             HTML reports
Target: nbdebug's own share, memtrace / profiler, <= 1.10x.  Also printed: the recording alone against the
profiler (the cost inside the cell), and the conversion and reports in ms and per recorded event.
"""

from __future__ import annotations

import argparse
import os
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
    from nbdebug.core.memory._cpu_record import CpuRecording
    from nbdebug.render.memory import memtrace_html, memtrace_text

    def plain() -> None:
        step()

    def profiler() -> None:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, with_stack=True):
            step()

    def shapes() -> None:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True):
            step()

    def recording() -> None:
        rec = CpuRecording()
        rec.start()
        try:
            step()
        finally:
            rec.stop()

    last: list[object] = []

    # the compiled walk of the event tree, built (and checked against the Python walk) before timing; memtrace
    # uses it once it is built, and the Python walk before that or where no compiler is
    from nbdebug.core.memory import _compiled

    if not _compiled.enabled():
        built = "off"
    elif _compiled.compiled_walker(start=False) is not None:
        built = "ok"
    else:
        built = _compiled.build()
    if built not in ("ok",) and not built.startswith("busy"):
        print(f"  (compiled walk: {built}; memtrace and 'memtrace py' both walk in Python)")

    def python_walk() -> None:
        os.environ[_compiled.SWITCH] = "0"
        try:
            traced()
        finally:
            os.environ.pop(_compiled.SWITCH)

    def traced() -> None:
        with memtrace("cpu") as rec:
            step()
        memtrace_text(rec.result)
        memtrace_html(rec.result)
        last[:] = [rec.result]  # counted after the timings: the snapshot model is built only when asked for

    os.environ.setdefault("KINETO_LOG_LEVEL", "99")  # the same quiet profiler for every variant
    variants = {"plain": plain, "profiler": profiler, "+shapes": shapes, "recording": recording, "memtrace": traced,
                "memtrace py": python_walk}
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
        print(f"  {k:<11} {v * 1e3:8.1f} ms   {v / best['plain']:.2f}x plain")
    print(f"  nbdebug's own share, memtrace / profiler: {best['memtrace'] / best['profiler']:.2f}x  (target <= 1.10x)")
    print(f"  inside the cell, recording / profiler: {best['recording'] / best['profiler']:.2f}x")
    after = best["memtrace"] - best["recording"]
    entries = last[0].snapshot.events  # type: ignore[attr-defined]
    print(f"  conversion and reports after the cell: {after * 1e3:.2f} ms for {entries} trace entries "
          f"({after / max(entries, 1) * 1e6:.1f} us each)")
    print(f"  the same with the walk in Python (no compiler, or before the compiled walk is built): "
          f"{best['memtrace py'] / best['profiler']:.2f}x, conversion and reports "
          f"{(best['memtrace py'] - best['recording']) * 1e3:.2f} ms")
    walker = _compiled.compiled_walker(start=False)
    if walker is not None:  # a longer cell: the walk alone, both ways, on one recording of 20 steps
        from nbdebug.core.memory._cpu_record import _walk_compiled, _walk_python

        rec = CpuRecording()
        rec.start()
        try:
            for _ in range(20):
                step()
        finally:
            rec.stop()
        walks = {"python": [], "compiled": []}
        for _ in range(3):
            for name, walk in (("python", _walk_python), ("compiled", lambda r: _walk_compiled(r, walker))):
                t0 = time.perf_counter()
                a = walk(rec.results)
                walks[name].append(time.perf_counter() - t0)
        py, c = min(walks["python"]), min(walks["compiled"])
        print(f"  a cell of 20 steps ({a.t_ns.size} allocations and frees): the walk takes {py * 1e3:.1f} ms in "
              f"Python, {c * 1e3:.2f} ms compiled ({py / c:.0f}x)")
    print(f"  memtrace / profiler with shapes (the earlier floor): {best['memtrace'] / best['+shapes']:.2f}x")


if __name__ == "__main__":
    main()
