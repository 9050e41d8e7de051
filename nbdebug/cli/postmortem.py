"""``python -m nbdebug postmortem DIR [DIR|FILE|GLOB ...] [--json] [--ranks]``: what a job's per-rank artifacts say."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nbdebug.core.dist import PostMortem


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the verb's arguments."""
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="folders (walked), files or globs of per-rank artifacts: Flight Recorder dumps, "
                             "torchelastic error files, stack dumps, NCCL_DEBUG logs, [rankN]: logs")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--ranks", action="store_true", help="also list every rank, one line each")


def run(args: argparse.Namespace) -> int:
    """Print the post-mortem; exit 1 when a failure, a hang or a mismatch was found."""
    from nbdebug.core.dist import postmortem

    pm = postmortem(args.paths)
    try:
        _print(pm, args)
    except BrokenPipeError:  # `... | head`: the reader has gone, which is not an error of ours
        import os
        import sys

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 1 if pm.errors() else 0  # exit 1 when an error was found (a failure, a hang, a bad node, ...)


def _print(pm: PostMortem, args: argparse.Namespace) -> None:
    if args.json:
        print(json.dumps(pm.to_dict(), indent=2))
    else:
        print(str(pm))
        if args.ranks:
            print("\nRanks:")
            for r in pm.ranks:
                print(f"  rank {r.rank} ({r.host or '?'}): {r.state}" + (f" - {r.error}" if r.error else "")
                      + (f" [{r.where}]" if r.where else ""))
