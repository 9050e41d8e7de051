"""Distributed runner: costs measured side by side in one run (gloo on CPU, 2 ranks).

1. A healthy 2-rank script: ``torchrun --standalone`` vs ``nbdebug.dist.run_script`` (start-up overhead).
2. A rank that skips an all_reduce: torchrun with the process-group timeout T vs nbdebug's watchdog with the same
   T (time until the command returns; only nbdebug names the rank and line).
3. ``log_step`` per training step (its default, and with a Flight Recorder read every step) vs a bare step of one
   tiny all_reduce, in one rank; its default cost as a share of a 100 ms step (target: <= 1 %).

Run: ``python benchmarks/bench_dist.py`` from the repository root.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

OK_SCRIPT = """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
x = torch.ones(4)
dist.all_reduce(x)
dist.destroy_process_group()
"""

HANG_SCRIPT = """
import datetime, time, torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds={T}))
x = torch.ones(4)
dist.all_reduce(x)
if dist.get_rank() == 1:
    time.sleep(120)
dist.all_reduce(x)
"""

STEP_CODE = """
import time, torch, torch.distributed as dist
from nbdebug.dist import log_step
x = torch.ones(16)
for _ in range(20):
    dist.all_reduce(x)
n = 300
t0 = time.perf_counter()
for _ in range(n):
    dist.all_reduce(x)
bare = (time.perf_counter() - t0) / n
t0 = time.perf_counter()
for i in range(n):
    dist.all_reduce(x)
    log_step(1.0, step=i)
logged = (time.perf_counter() - t0) / n
t0 = time.perf_counter()
for i in range(n):
    dist.all_reduce(x)
    log_step(1.0, step=i, arrivals_every=1)
every = (time.perf_counter() - t0) / n
print(f"STEP {bare} {logged} {every}")
"""


def _torchrun(script: Path, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                    str(script)], env=env, capture_output=True, timeout=300)
    return time.perf_counter() - t0


def main() -> None:
    from nbdebug.dist import run, run_script

    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        ok = Path(tmp) / "ok.py"
        ok.write_text(textwrap.dedent(OK_SCRIPT))
        t_torchrun = _torchrun(ok, env)
        t0 = time.perf_counter()
        r = run_script(str(ok), 2, timeout=60, echo=False)
        t_nbd = time.perf_counter() - t0
        assert r.ok, str(r)
        print(f"healthy 2-rank script : torchrun {t_torchrun:6.2f} s | nbdebug {t_nbd:6.2f} s | "
              f"ratio nbdebug/torchrun {t_nbd / t_torchrun:.2f}")

        T = 8
        hang = Path(tmp) / "hang.py"
        hang.write_text(textwrap.dedent(HANG_SCRIPT).replace("{T}", str(T)))
        t_torchrun = _torchrun(hang, env)
        t0 = time.perf_counter()
        r = run_script(str(hang), 2, timeout=T, echo=False)
        t_nbd = time.perf_counter() - t0
        named = r.hang is not None and r.hang.missing_ranks == (1,)
        print(f"skipped all_reduce (T={T} s): torchrun {t_torchrun:6.2f} s (names no rank) | nbdebug {t_nbd:6.2f} s "
              f"(names rank 1: {named}) | ratio {t_nbd / t_torchrun:.2f}")

    seen: list[str] = []
    r = run(STEP_CODE, 1, timeout=60, echo=lambda rank, stream, line: seen.append(line))
    line = next(s for s in seen if s.startswith("STEP"))
    bare, logged, every = (float(v) for v in line.split()[1:])
    cost = logged - bare
    print(f"per step, 1 rank       : bare all_reduce {bare * 1e6:7.1f} us | + log_step (default) {logged * 1e6:7.1f} us "
          f"| + log_step(arrivals_every=1) {every * 1e6:7.1f} us")
    print(f"log_step default cost  : {max(cost, 0) * 1e6:7.1f} us a step = {max(cost, 0) / 0.1 * 100:.3f} % of a "
          f"100 ms step (target <= 1 %); reading arrivals every step: {(every - bare) / 0.1 * 100:.2f} %")


if __name__ == "__main__":
    main()
