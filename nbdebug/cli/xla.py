"""``python -m nbdebug xla REPORT [--debug-log FILE] [--steps N] [--json]``."""

from __future__ import annotations

import argparse
import json

from nbdebug.cli._io import read_text
from nbdebug.errors import NbdebugError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the verb's arguments."""
    parser.add_argument("report", help="a saved torch_xla metrics report (metrics_report() text, XLA_METRICS_FILE); - reads stdin")
    parser.add_argument("--debug-log", metavar="FILE", help="PT_XLA_DEBUG_LEVEL / PT_XLA_DEBUG output of the same run")
    parser.add_argument("--steps", type=int, metavar="N", help="training steps the report covers (default: MarkStep)")
    parser.add_argument("--json", action="store_true", help="print the diagnosis as JSON")


def run(args: argparse.Namespace) -> int:
    """Diagnose the report and print the findings."""
    from nbdebug.core.xla import diagnose, parse_report

    if args.steps is not None and args.steps < 0:
        raise NbdebugError(f"--steps {args.steps}: expected a count of training steps >= 0")
    report = parse_report(read_text(args.report, "a torch_xla metrics report text file"))
    log = read_text(args.debug_log, "a PT_XLA_DEBUG log file") if args.debug_log else None
    diagnosis = diagnose(report, debug_log=log, steps=args.steps)
    if args.json:
        print(json.dumps(diagnosis.to_dict(), indent=2))
    else:
        print(diagnosis)
    return 0
