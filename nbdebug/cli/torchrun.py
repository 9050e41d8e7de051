"""``python -m nbdebug torchrun -n N [--timeout S] [--backend B] [--env K=V] script.py [args...]``.

Also ``python -m nbdebug torchrun --nccl-log FILE`` to read an ``NCCL_DEBUG=INFO`` log from a cluster job.
"""

from __future__ import annotations

import argparse
import json

from nbdebug.cli._io import read_text
from nbdebug.errors import DistUsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the verb's arguments."""
    parser.add_argument("-n", "--nprocs", "--nproc-per-node", type=int, default=2, help="number of ranks (default 2)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds without progress on any rank before the hang watchdog fires (default 60)")
    parser.add_argument("--backend", default="gloo", choices=("gloo", "nccl"),
                        help="backend given to init_process_group by default")
    parser.add_argument("--env", action="append", default=[], metavar="K=V", help="environment variable for the ranks")
    parser.add_argument("--detail", action="store_true", help="TORCH_DISTRIBUTED_DEBUG=DETAIL")
    parser.add_argument("--quiet", action="store_true", help="do not stream the ranks' output")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--keep-files", action="store_true", help="keep torch's error files and the dumps")
    parser.add_argument("--nccl-log", metavar="FILE", help="instead of running: explain an NCCL_DEBUG=INFO log")
    parser.add_argument("script", nargs="?", help="the training script (it calls init_process_group itself)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")


def run(args: argparse.Namespace) -> int:
    """Run the script on N ranks (or read an NCCL log) and print the report; exit 1 when the run failed."""
    if args.nccl_log:
        from nbdebug.core.dist import parse_nccl_log

        log = parse_nccl_log(read_text(args.nccl_log, "an NCCL_DEBUG=INFO log"))
        print(json.dumps(log.to_dict(), indent=2) if args.json else str(log))
        return 1 if log.errors() else 0  # warnings (a virtual interface, ...) are printed, not a failure
    if not args.script:
        raise DistUsageError("no script given; usage: python -m nbdebug torchrun -n 2 train.py [args...]")
    env = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep:
            raise DistUsageError(f"--env {item!r}: expected KEY=VALUE")
        env[key] = value
    from nbdebug.core.dist import run_script

    result = run_script(args.script, args.nprocs, argv=args.args, timeout=args.timeout, backend=args.backend,
                        env=env, echo=not args.quiet, detail=args.detail, keep_files=args.keep_files)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, default=str))
    else:
        print()
        print(str(result))
    return 0 if result.succeeded else 1
