"""``python -m nbdebug snapshot PATH [--json] [--html OUT] [--device N]``."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the verb's arguments."""
    parser.add_argument("path", help="a pickle written by torch.cuda.memory._dump_snapshot (any torch version)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--html", metavar="OUT", help="also write the self-contained offline viewer to OUT")
    parser.add_argument("--device", type=int, default=None, help="device index (default: the longest trace)")
    parser.add_argument("--top", type=int, default=10, help="number of allocation sites listed (default 10)")


def run(args: argparse.Namespace) -> int:
    """Load the snapshot safely and print its summary."""
    import os

    from nbdebug.core.memory import load_snapshot
    from nbdebug.errors import NbdebugError, SnapshotError

    if args.html:  # a usage error before minutes of loading, not after
        folder = os.path.dirname(os.path.abspath(args.html))
        if not os.path.isdir(folder):
            raise NbdebugError(f"--html {args.html!r}: the folder {folder!r} does not exist; expected a file path in "
                               "an existing folder")
    if args.top < 0:
        raise NbdebugError(f"--top {args.top}: expected a number of sites, 0 or more")
    snap = load_snapshot(args.path)
    try:
        summary = snap.summary(args.device, top=args.top)
    except (ArithmeticError, RecursionError, ValueError) as e:  # a value the loader let through: still one line
        raise SnapshotError(f"{args.path!r} could not be summarized ({type(e).__name__}: {e}); expected a snapshot "
                            "written by torch.cuda.memory._dump_snapshot") from e
    if args.html:
        try:
            snap.to_html(args.html, device=summary.device)
        except OSError as e:
            raise NbdebugError(f"cannot write the viewer to {args.html!r}: {e.strerror}") from e
    if args.json:
        data = summary.to_dict()
        data["top_sites"] = [{"site": s.site, "bytes": s.bytes, "count": s.count} for s in summary.top_sites]
        print(json.dumps(data, indent=2))
    else:
        from nbdebug.render.memory import snapshot_text

        print(snapshot_text(snap) if args.device is None else str(summary))
        if args.html:
            print(f"viewer written to {args.html}")
    return 0
