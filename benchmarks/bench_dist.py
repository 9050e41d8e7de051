"""Distributed runner: costs measured side by side in one run (gloo on CPU, 2 ranks).

1. A healthy 2-rank script: ``torchrun --standalone`` vs ``nbdebug.dist.run_script`` (start-up overhead).
2. A rank that skips an all_reduce: torchrun with the process-group timeout T vs nbdebug's watchdog with the same
   T (time until the command returns; only nbdebug names the rank and line).
3. ``log_step`` per training step (its default, and with a Flight Recorder read every step) vs a bare step of one
   tiny all_reduce, in one rank; its default cost as a share of a 100 ms step (target: <= 1 %).

4. Post-mortem of 4,096 ranks (a folder built from a real 4-rank torchrun/gloo job with ``instrument()`` by
   relabelling ranks and hosts, tests/dist_scale.py): nbdebug's time and peak memory (targets <= 10 s, <= 2 GB),
   side by side with torch's ``fr_trace`` on the same Flight Recorder dumps, and whether both name the same
   missing ranks.  gloo dumps key ``pg_config`` by ``''``, which ``fr_trace`` cannot read (``KeyError``); it is run
   on the raw dumps (to show that) and on a copy with that one key renamed.

5. The post-mortem's reading speed: a folder of 4 rank logs of 8 MiB of short ``[rankN]:`` lines, in MiB/s, side
   by side with a bare read and ``splitlines`` of the same files (target >= 20 MiB/s).

Run: ``python benchmarks/bench_dist.py`` from the repository root (``--postmortem`` runs only part 4).
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


def per_step(every):
    # the best of 5 rounds (timeit's rule): on a shared machine one descheduling adds 100+ ms to a round
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for i in range(n):
            dist.all_reduce(x)
            if every is not None:
                log_step(1.0, step=i, arrivals_every=every)
        best = min(best, (time.perf_counter() - t0) / n)
    return best


print(f"STEP {per_step(None)} {per_step(50)} {per_step(1)}")
"""


def _torchrun(script: Path, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                    str(script)], env=env, capture_output=True, timeout=300)
    return time.perf_counter() - t0


PM_CHILD = """
import json, resource, sys, time
from nbdebug.dist import postmortem
t0 = time.perf_counter()
pm = postmortem(sys.argv[1])
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "missing": list(pm.divergence.missing) if pm.divergence else [], "primary": pm.primary_rank,
                  "bad_hosts": list(pm.bad_hosts)}))
"""


def _child(cmd: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float, int]:
    """Run a command; its wall time and the peak RSS (KiB) of that child alone."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    dt = time.perf_counter() - t0
    # ru_maxrss of children is the largest child so far: report it when this child raised it
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return out, dt, peak if peak > before else -1


def bench_postmortem(env: dict[str, str], nranks: int = 4096) -> None:
    import json
    import pickle
    import re
    import shutil

    sys.path.insert(0, str(REPO))
    from tests.dist_scale import build_scaled

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "job"
        src.mkdir()
        job_env = {**env, "ARTIFACTS": str(src), "MODE": "skip", "PG_TIMEOUT": "10", "HANG_AFTER": "2",
                   "SKIP_SLEEP": "60"}
        with open(src / "torchrun.log", "w") as log:
            subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
                            str(REPO / "tests" / "data" / "dist" / "faulty_job.py")], env=job_env, stdout=log,
                           stderr=subprocess.STDOUT, timeout=300)
        (src / "torchrun.log").unlink()  # one launcher log for 4 ranks: not relabelled
        big = Path(tmp) / f"r{nranks}"
        t0 = time.perf_counter()
        info = build_scaled(src, big, nranks, ranks_per_host=8, bad_host=5)
        t_build = time.perf_counter() - t0
        files = sum(1 for _ in big.iterdir())
        out, wall, _ = _child([sys.executable, "-c", PM_CHILD, str(big)], env)
        res = json.loads(out.stdout.strip().splitlines()[-1])
        ok = res["missing"] == info["bad_ranks"] and res["bad_hosts"] == [info["bad_host"]]
        print(f"post-mortem, {nranks} ranks ({files} files, built in {t_build:.1f} s): nbdebug {res['seconds']:.2f} s "
              f"in-process ({wall:.2f} s with start-up), peak {res['peak_kb'] / 2**20:.2f} GiB "
              f"(targets <= 10 s, <= 2 GiB); missing ranks {res['missing'][:3]}... bad node {res['bad_hosts']}: "
              f"{'right' if ok else 'WRONG'}")
        fr_dir = Path(tmp) / "fr_only"
        fr_dir.mkdir()
        for f in big.glob("fr_rank_*"):
            shutil.copy(f, fr_dir / f.name)
        frt = [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(fr_dir), "-p", "fr_rank_"]
        raw, t_raw, _ = _child(frt, env)
        err = (raw.stderr.strip().splitlines() or ["?"])[-1]
        print(f"fr_trace on the same {nranks} raw gloo dumps: exit {raw.returncode} after {t_raw:.2f} s ({err[:100]})")
        for f in fr_dir.iterdir():  # rename the '' process-group key the way the dumps' entries name it
            doc = pickle.loads(f.read_bytes())
            cfg = doc["pg_config"]
            if "" in cfg:
                cfg["0"] = {**cfg.pop(""), "name": "0", "desc": "default_pg"}
            f.write_bytes(pickle.dumps(doc))
        fixed, t_fixed, peak = _child(frt, env)
        m = re.search(r"missing ranks: \{([0-9, ]*)\}", fixed.stdout + fixed.stderr)
        theirs = sorted(int(x) for x in m.group(1).split(",")) if m else None
        agree = theirs == res["missing"]
        print(f"fr_trace on the renamed copy: exit {fixed.returncode}, {t_fixed:.2f} s"
              + (f", peak {peak / 2**20:.2f} GiB" if peak > 0 else "")
              + f"; missing ranks {theirs[:3] if theirs else theirs}...: "
              + ("agrees with nbdebug" if agree else "DISAGREES with nbdebug")
              + f" | time ratio nbdebug/fr_trace {wall / t_fixed:.2f}")


def bench_log_throughput(nranks: int = 4, mib: int = 8) -> None:
    """The post-mortem's reading speed on a folder of short-line rank logs, side by side with a bare read and
    splitlines of the same bytes (target >= 20 MiB/s)."""
    from nbdebug.dist import postmortem

    with tempfile.TemporaryDirectory() as tmp:
        total = 0
        for r in range(nranks):
            head = f"[rank{r}]: # nbdebug: rank {r} of {nranks} (local rank {r}) host node0 pid {1000 + r}\n"
            line = f"[rank{r}]: step 1234 loss 0.123456\n"
            body = head + line * ((mib << 20) // len(line))
            if r == 1:  # one rank fails, so the post-mortem has something to say
                body += (f"[rank{r}]: Traceback (most recent call last):\n"
                         f"[rank{r}]:   File \"train.py\", line 3, in <module>\n[rank{r}]: ValueError: boom\n")
            Path(tmp, f"rank{r}.log").write_text(body)
            total += len(body)
        t0 = time.perf_counter()
        for f in sorted(Path(tmp).iterdir()):
            f.read_bytes().decode().splitlines()
        bare = time.perf_counter() - t0
        t0 = time.perf_counter()
        pm = postmortem(tmp)
        ours = time.perf_counter() - t0
        mb = total / 2**20
        print(f"post-mortem reading {nranks} x {mib} MiB of short-line logs: nbdebug {mb / ours:6.1f} MiB/s "
              f"({ours:.2f} s, primary rank {pm.primary_rank}) | bare read + splitlines {mb / bare:6.1f} MiB/s | "
              f"ratio {ours / bare:.1f} (target >= 20 MiB/s)")


def main() -> None:
    from nbdebug.dist import run, run_script

    if "--postmortem" in sys.argv:
        bench_log_throughput()
        bench_postmortem({**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"})
        return

    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        ok = Path(tmp) / "ok.py"
        ok.write_text(textwrap.dedent(OK_SCRIPT))
        t_torchrun = _torchrun(ok, env)
        t0 = time.perf_counter()
        r = run_script(str(ok), 2, timeout=60, echo=False)
        t_nbd = time.perf_counter() - t0
        assert r.succeeded, str(r)
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
    bench_log_throughput()
    bench_postmortem(env)


if __name__ == "__main__":
    main()
