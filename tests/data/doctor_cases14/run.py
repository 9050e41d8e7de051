"""Score the doctor on the fourteenth held-out set: ``python tests/data/doctor_cases14/run.py [heldout|all]``.

The scoring is tests/data/doctor_cases/run.py's own (``run_folder``), pointed at this folder's ``cases.py`` and
``labels.json``, so every set is scored by one rule: right / wrong / unknown for the top warning-or-error finding
and its first fix, misleading for a forbidden phrase in any finding, and whether the caller's model was left
untouched.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    runpy.run_path(str(HERE.parent / "doctor_cases" / "run.py"))["run_folder"](
        HERE, sys.argv[1] if len(sys.argv) > 1 else "heldout")
