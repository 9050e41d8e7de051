"""Score the doctor on the third held-out set: ``python tests/data/doctor_cases3/run.py [heldout|all]``.

The scoring is tests/data/doctor_cases/run.py's own ``score`` and ``main``, imported by path and pointed at this
folder's ``cases.py`` and ``labels.json`` (nothing copied, so both sets are scored by one rule): right / wrong /
unknown for the top warning-or-error finding and its first fix, misleading for a forbidden phrase in any
finding, and whether the caller's model was left untouched.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def scorer():
    """doctor_cases' run module, reading this folder's labels and building this folder's cases."""
    base = _load("doctor_cases_run", HERE.parent / "doctor_cases" / "run.py")
    base.HERE = HERE  # main() reads HERE / "labels.json"
    sys.modules["cases"] = _load("cases", HERE / "cases.py")  # score() does `import cases`
    return base


def main(which: str = "heldout") -> list[dict]:
    return scorer().main(which)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "heldout")
