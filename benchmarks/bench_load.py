"""`%load_ext nbdebug` in a kernel that already imported torch, against `import torch` itself.

Each measurement runs in a fresh interpreter (imports are cached per process), alternating the two so that
machine noise hits both alike.  Target: loading adds at most 10% of the time `import torch` takes.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROBE = r"""
import json, time
t0 = time.perf_counter()
import torch  # noqa: F401
t1 = time.perf_counter()
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
t2 = time.perf_counter()
ip.run_line_magic("load_ext", "nbdebug")
t3 = time.perf_counter()
print(json.dumps({"import_torch": t1 - t0, "load_ext": t3 - t2}))
"""


def main(repeats: int = 7) -> dict[str, float]:
    torch_times, load_times = [], []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=REPO, check=True)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        torch_times.append(row["import_torch"])
        load_times.append(row["load_ext"])
    t_torch, t_load = statistics.median(torch_times), statistics.median(load_times)
    ratio = t_load / t_torch
    print(f"load_ext: import torch {t_torch * 1e3:.0f} ms, %load_ext nbdebug {t_load * 1e3:.1f} ms "
          f"-> ratio {ratio:.3f} (target <= 0.10) {'OK' if ratio <= 0.10 else 'MISSED'}")
    return {"import_torch_s": t_torch, "load_ext_s": t_load, "ratio": ratio}


if __name__ == "__main__":
    main()
