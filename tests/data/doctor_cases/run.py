"""Score the doctor on the planted-bug cases: ``python tests/data/doctor_cases/run.py [tune|heldout|all]``.

Scoring (fixed before the doctor ran on any case; see README.md):
- right: a bug case whose top finding (the worst severity first, warnings and errors only) is one of the
  labelled kinds and whose first fix says the labelled words; a healthy case with no warning or error;
- wrong: a top finding of another kind, or a right kind with a first fix that does not say the words, or a
  healthy case with a warning or error, or an exception raised by the doctor;
- unknown: a bug case with no warning or error at all (missed, but nothing claimed);
- misleading: any finding's text (message, fixes) that contains a forbidden phrase of the case.
Each run also checks that the caller's model and optimizer state are untouched.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def score(case_id: str, label: dict) -> dict:
    import cases
    import torch

    import nbdebug
    from nbdebug.core._findings import sort_findings

    args = cases.build(case_id)
    model = args["model"]
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    t0 = time.perf_counter()
    try:
        r = nbdebug.doctor(progress=False, **args)
    except Exception as e:  # a raised doctor is a wrong answer
        return {"case": case_id, "verdict": "wrong", "top": f"raised {type(e).__name__}: {e}", "seconds": 0.0,
                "misleading": False, "untouched": True}
    secs = time.perf_counter() - t0
    untouched = all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    loud = [f for f in sort_findings(r.findings) if f.severity != "info"]
    text = " ".join(f.message + " " + " ".join(x.title + " " + x.code for x in f.fixes) for f in r.findings)
    misleading = any(p.lower() in text.lower() for p in label["forbid"])
    top = loud[0] if loud else None
    if not label["expect"]:
        verdict = "right" if top is None else "wrong"
    elif top is None:
        verdict = "unknown"
    else:
        fix = (top.fixes[0].title + " " + top.fixes[0].code).lower() if top.fixes else ""
        # a label may list other words a right first fix could use (set 12 onwards: `first_fix_also`)
        phrases = [label["first_fix"], *label.get("first_fix_also", ())]
        verdict = "right" if top.kind in label["expect"] and any(p.lower() in fix for p in phrases) else "wrong"
    return {"case": case_id, "verdict": verdict, "top": f"{top.severity.value} {top.kind}: {top.fix}" if top else "-",
            "seconds": round(secs, 1), "misleading": misleading, "untouched": untouched}


def main(which: str = "tune", folder: Path = HERE) -> list[dict]:
    labels = json.loads((folder / "labels.json").read_text())
    rows = [score(k, v) for k, v in labels.items() if which == "all" or v["split"] == which]
    for row in rows:
        print(f"{row['verdict']:8} {row['case']:32} {row['seconds']:6.1f}s  misleading={row['misleading']}  "
              f"untouched={row['untouched']}  {row['top'][:120]}")
    n = {v: sum(r["verdict"] == v for r in rows) for v in ("right", "wrong", "unknown")}
    print(f"{which}: {n['right']} right, {n['wrong']} wrong, {n['unknown']} unknown of {len(rows)}; "
          f"misleading claims in {sum(r['misleading'] for r in rows)}")
    return rows


def run_folder(folder: Path, which: str) -> list[dict]:
    """Score another set's ``cases.py`` and ``labels.json`` (the later held-out sets) by this same rule."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("cases", folder / "cases.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["cases"] = module  # score() does `import cases`
    return main(which, folder)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tune")
