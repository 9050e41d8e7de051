"""`make bench`: run every benchmarks/bench_*.py in its own process and print what each measured."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    failed = []
    for script in sorted(HERE.glob("bench_*.py")):
        print(f"== {script.name}", flush=True)
        start = time.perf_counter()
        rc = subprocess.run([sys.executable, str(script)], cwd=HERE.parent).returncode
        print(f"   ({time.perf_counter() - start:.0f} s, exit {rc})", flush=True)
        if rc:
            failed.append(script.name)
    if failed:
        print("benchmarks that failed to run: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
