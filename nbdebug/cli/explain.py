"""``python -m nbdebug explain [FILE|-] [--json]``: diagnose an error text or log from a job that ran elsewhere."""

from __future__ import annotations

import argparse
import json
import sys

from nbdebug.errors import NbdebugError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the verb's arguments."""
    parser.add_argument("file", nargs="?", default="-", help="error text or log file; - (default) reads stdin")
    parser.add_argument("--json", action="store_true", help="print the diagnosis as JSON (category, title, "
                        "summary, facts, fixes, first_step, ...)")


def run(args: argparse.Namespace) -> int:
    """Explain the text and print the report (plain text, or JSON with ``--json``)."""
    from nbdebug.core.fixes import explain

    if args.file == "-":
        text = sys.stdin.buffer.read().decode("utf-8", errors="replace")
    else:
        try:
            with open(args.file, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError as e:
            raise NbdebugError(f"cannot read {args.file!r}: {e.strerror}; expected a text file with an error or log") from e
    diagnosis = explain(text)
    print(json.dumps(diagnosis.to_dict(), indent=2) if args.json else str(diagnosis))
    return 0
