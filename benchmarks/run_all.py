"""`make bench`: run every benchmarks/bench_*.py in its own process and print what each measured, then the targets
a benchmark reported as missed (its lines that name a target and say FAIL or MISSED)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    failed, missed = [], []
    for script in sorted(HERE.glob("bench_*.py")):
        print(f"== {script.name}", flush=True)
        start = time.perf_counter()
        with subprocess.Popen([sys.executable, str(script)], cwd=HERE.parent, stdout=subprocess.PIPE,
                              text=True, bufsize=1) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                print(line, end="", flush=True)
                if "target" in line and (" FAIL" in line or " MISSED" in line):
                    missed.append(f"{script.name}: {line.strip()}")
        rc = proc.returncode
        print(f"   ({time.perf_counter() - start:.0f} s, exit {rc})", flush=True)
        if rc:
            failed.append(script.name)
    if missed:
        print("targets missed:\n  " + "\n  ".join(missed))
    if failed:
        print("benchmarks that failed to run: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
