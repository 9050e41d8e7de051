"""Run every scenario under ``nbdebug.xla.watch()`` in one process and save what the tests check.

``python tests/xla/collect.py OUTDIR [SCENARIO]`` writes (one process per scenario), per scenario:
``<name>.report.txt`` (``metrics_report()`` of that scenario alone), ``<name>.short.txt``,
``<name>.debug.txt`` (the debug output that ``watch`` captured) and ``<name>.live.json`` (the live diagnosis).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def collect_all(outdir: str | Path, names: list[str] | None = None, *, timeout: float = 240) -> None:
    """Run each scenario in a fresh process (torch_xla's debug switches are per process) with PT_XLA_DEBUG=1."""
    import os
    import subprocess

    from tests.xla.scenarios import SCENARIOS

    env = dict(os.environ, PJRT_DEVICE="CPU", PT_XLA_DEBUG="1")
    env.pop("PT_XLA_DEBUG_FILE", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH")]))
    wanted = names or list(SCENARIOS)
    # torch_xla's own `pt-xla-profiler` analysis counts fallbacks for the whole process, so the scenarios with
    # a CPU fallback get a process each; the others share one (a torch_xla start costs ~10 s)
    alone = [n for n in wanted if n in ("boolean_mask", "fft_fallback")]
    groups = [[n for n in wanted if n not in alone]] + [[n] for n in alone]
    for group in filter(None, groups):
        proc = subprocess.run([sys.executable, __file__, str(outdir), *group], env=env, capture_output=True,
                              text=True, timeout=timeout)
        if proc.returncode:
            raise RuntimeError(f"scenarios {group} failed:\n{proc.stderr[-3000:]}")


def main(outdir: str) -> int:
    import torch_xla  # noqa: F401
    import torch_xla.debug.metrics as met

    from nbdebug.xla import watch
    from tests.xla.scenarios import SCENARIOS

    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    names = sys.argv[2:] or list(SCENARIOS)
    for name in names:
        met.clear_all()
        with watch() as w:
            SCENARIOS[name]()
        (out / f"{name}.report.txt").write_text(met.metrics_report())
        (out / f"{name}.short.txt").write_text(met.short_metrics_report())
        (out / f"{name}.debug.txt").write_text(w.result.debug_log)
        (out / f"{name}.live.json").write_text(json.dumps(
            {"diagnosis": w.result.diagnosis.to_dict(), "debug_status": w.result.debug_status}, indent=1))
        print(name, w.result.diagnosis.kinds, [(f.kind, f.severity) for f in w.result.diagnosis.findings], flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 2:  # all scenarios, one process each
        collect_all(sys.argv[1])
        sys.exit(0)
    sys.exit(main(sys.argv[1]))
