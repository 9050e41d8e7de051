"""``python -m nbdebug explain [FILE|-] [--json]``: diagnose an error text or log from a job that ran elsewhere."""

from __future__ import annotations

import argparse
import json

from nbdebug.cli._io import read_text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the verb's arguments."""
    parser.add_argument("file", nargs="?", default="-", help="error text or log file; - (default) reads stdin")
    parser.add_argument("--json", action="store_true", help="print the diagnosis as JSON (kind, title, "
                        "summary, evidence, fixes, first_step, ...)")


def run(args: argparse.Namespace) -> int:
    """Explain the text and print the report (plain text, or JSON with ``--json``)."""
    from nbdebug.core.explain import explain

    # explain() reads at most the last 1,000,000 characters; 4 bytes each is the most UTF-8 needs
    diagnosis = explain(read_text(args.file, "a text file with an error or log", tail_bytes=4_000_000))
    print(json.dumps(diagnosis.to_dict(), indent=2) if args.json else str(diagnosis))
    return 0
