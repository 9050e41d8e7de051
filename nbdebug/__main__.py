"""``python -m nbdebug <verb>``: the same analyses for jobs that ran elsewhere and left a file or a log."""

from __future__ import annotations

import argparse
import importlib
import sys

# verb -> module with ``add_arguments(parser)`` and ``run(args) -> int``, imported only when used.
VERBS: dict[str, tuple[str, str]] = {
    "explain": ("nbdebug.cli.explain", "explain an error text or traceback (a file, or - for stdin)"),
    "snapshot": ("nbdebug.cli.snapshot", "summarize a CUDA memory snapshot pickle"),
    "xla": ("nbdebug.cli.xla", "diagnose a torch_xla metrics report"),
    "torchrun": ("nbdebug.cli.torchrun", "run a script on N local ranks and explain failures and hangs"),
    "postmortem": ("nbdebug.cli.postmortem", "read a distributed job's per-rank artifacts: first failure, hang, bad node"),
}


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m nbdebug`` and the ``nbdebug`` command."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="nbdebug", description="Debugging toolkit for PyTorch training.")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for verb, (_, help_text) in VERBS.items():
        sub.add_parser(verb, help=help_text, add_help=False)
    if not argv or argv[0] not in VERBS:
        if argv and argv[0] not in ("-h", "--help"):
            parser.error(f"unknown verb {argv[0]!r}; expected one of: {', '.join(VERBS)}")
        parser.print_help()
        return 0 if argv else 2
    verb = argv[0]
    module = importlib.import_module(VERBS[verb][0])
    verb_parser = argparse.ArgumentParser(prog=f"nbdebug {verb}", description=VERBS[verb][1])
    module.add_arguments(verb_parser)
    args = verb_parser.parse_args(argv[1:])
    from nbdebug.errors import NbdebugError

    try:
        return int(module.run(args) or 0)
    except NbdebugError as e:
        print(f"nbdebug {verb}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
