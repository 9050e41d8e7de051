"""Snapshot engine speed and memory against a plain ``pickle.load`` of the same file, each in its own process.

A trace of 1,000,000 events is generated in the format of torch 2.5+ (alloc / free_requested / free_completed with
``time_us`` and frames; frame dicts shared between entries as in real dumps, where the pickle memo shares them).

    python benchmarks/bench_snapshot.py [--events 1000000] [--keep FILE]

Prints the wall time and peak RSS of ``python -m nbdebug snapshot FILE --json`` and of a process that only does
``pickle.load`` of FILE, and their ratios (targets: <= 1.5x time, <= 1.3x peak memory), for two shapes of trace
(``--shape``).  nbdebug pauses the garbage collector while it unpickles, which a plain ``pickle.load`` does not, so
the time against a load with the collector off is printed too.
"""

from __future__ import annotations

import argparse
import os
import pickle
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def make_trace(events: int = 1_000_000, *, seed: int = 0, frames_per_entry: int = 24, shape: str = "deep") -> dict:
    """A synthetic but realistic snapshot dict with ``events`` trace entries on device 0.

    ``shape="deep"``: 400 call paths of ``frames_per_entry`` frames (C++ allocator frames, torch, user code), as a
    CUDA trace recorded with C++ context looks.  ``shape="short"``: 20,000 call paths of 1 to 4 frames drawn from
    8,000 distinct Python frames, as ``context="alloc", stacks="python"`` records a large model: many small frames
    and short stacks, so the per-entry work weighs more than the per-frame work.
    """
    rng = random.Random(seed)
    cpp = [{"name": f"c10::cuda::CUDACachingAllocator::fn{i}()", "filename": "??", "line": 0} for i in range(40)]
    torch_py = [{"name": n, "filename": "/venv/lib/python3.12/site-packages/torch/nn/modules/module.py", "line": ln}
                for n, ln in (("_call_impl", 1790), ("_wrapped_call_impl", 1779), ("forward", 125))]
    user = [{"name": f"layer{i}", "filename": f"/home/u/proj/model_{i % 7}.py", "line": 10 + i} for i in range(60)]
    stacks = []
    if shape == "short":
        pool = [{"name": f"fn{i}", "filename": f"/home/u/proj/pkg{i % 97}/mod_{i % 501}.py", "line": 1 + i % 3000}
                for i in range(8000)]
        for _ in range(20_000):
            stacks.append(rng.sample(pool, rng.randint(1, 4)))
    else:
        for i in range(400):  # distinct call paths, reused like a training loop does
            s = rng.sample(cpp, frames_per_entry - 6) + torch_py + [user[i % 60], user[(i * 7) % 60], user[0]]
            stacks.append(s)
    trace = []
    live: list[tuple[int, int, list]] = []
    free_addrs = [0x7F0000000000 + i * (1 << 22) for i in range(200_000)]
    t = 1_750_000_000_000_000.0
    while len(trace) < events:
        t += rng.random() * 5
        if live and (len(live) > 3000 or rng.random() < 0.5):
            addr, size, frames = live.pop(rng.randrange(len(live)))
            free_addrs.append(addr)
            for action in ("free_requested", "free_completed"):
                trace.append({"action": action, "addr": addr, "size": size, "stream": 0, "time_us": int(t),
                              "frames": frames, "compile_context": "N/A", "user_metadata": ""})
        else:
            addr = free_addrs.pop(rng.randrange(len(free_addrs)))
            size = rng.choice((512, 4096, 1 << 20, 3 << 20, 8 << 20))
            frames = list(rng.choice(stacks))
            live.append((addr, size, frames))
            trace.append({"action": "alloc", "addr": addr, "size": size, "stream": 0, "time_us": int(t),
                          "frames": frames, "compile_context": "N/A", "user_metadata": ""})
    trace = trace[:events]
    segments = []
    for addr, size, frames in sorted(live)[:2000]:
        total = max(4 << 20, size)
        segments.append({"device": 0, "address": addr, "total_size": total, "allocated_size": size,
                         "active_size": size, "requested_size": size, "stream": 0, "segment_type": "large",
                         "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
                         "blocks": [{"address": addr, "size": size, "requested_size": size, "state": "active_allocated",
                                     "frames": frames},
                                    {"address": addr + size, "size": total - size, "requested_size": 0,
                                     "state": "inactive", "frames": []}]})
    return {"segments": segments, "device_traces": [trace], "allocator_settings": {}, "external_annotations": []}


_PLAIN = ("import pickle, sys, resource\n"
          "with open(sys.argv[1], 'rb') as fh: d = pickle.load(fh)\n")
# the floor: nbdebug pauses the garbage collector while it unpickles (a snapshot has no cycles), so a plain load
# that does the same is printed too
_PLAIN_NOGC = "import gc; gc.disable()\n" + _PLAIN


def _run(cmd: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of a child process."""
    t0 = time.perf_counter()
    with subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=str(REPO))) as p:
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if p.returncode:
        raise SystemExit(f"{cmd} failed with {p.returncode}")
    return wall, usage.ru_maxrss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--shape", choices=("deep", "short", "both"), default="both",
                    help="deep: 24-frame stacks (the default trace); short: many small frames and short stacks")
    ap.add_argument("--keep", help="folder to write the generated pickles to and keep them (reused when present)")
    args = ap.parse_args()
    for shape in ("deep", "short") if args.shape == "both" else (args.shape,):
        _bench(shape, args)


def _bench(shape: str, args: argparse.Namespace) -> None:
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp())
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"trace_{shape}_{args.events}.pickle"
    print(f"--- {shape} trace")
    if not path.exists():
        t0 = time.perf_counter()
        data = make_trace(args.events, shape=shape)
        with open(path, "wb") as fh:
            pickle.dump(data, fh, protocol=4)
        del data
        print(f"generated {args.events:,} events -> {path} ({path.stat().st_size / 1e6:.1f} MB) in "
              f"{time.perf_counter() - t0:.1f} s")
    plain = [sys.executable, "-c", _PLAIN, str(path)]
    plain_nogc = [sys.executable, "-c", _PLAIN_NOGC, str(path)]
    ours = [sys.executable, "-m", "nbdebug", "snapshot", str(path), "--json"]
    rows: dict[str, list[tuple[float, int]]] = {"pickle.load": [], "pickle.load, gc off": [],
                                                "nbdebug snapshot --json": []}
    for _ in range(args.repeat):  # interleaved, best of N
        rows["pickle.load"].append(_run(plain))
        rows["pickle.load, gc off"].append(_run(plain_nogc))
        rows["nbdebug snapshot --json"].append(_run(ours))
    best = {k: (min(w for w, _ in v), max(r for _, r in v)) for k, v in rows.items()}
    for k, (w, r) in best.items():
        print(f"{k:<26} {w:7.2f} s   peak RSS {r / 1024:8.1f} MiB")
    (pw, pr), (ow, orss) = best["pickle.load"], best["nbdebug snapshot --json"]
    print(f"time ratio   {ow / pw:.2f}x  (target <= 1.5x); {ow / best['pickle.load, gc off'][0]:.2f}x a load with "
          "the garbage collector off")
    print(f"memory ratio {orss / pr:.2f}x  (target <= 1.3x)")
    if not args.keep:
        path.unlink()


if __name__ == "__main__":
    main()
