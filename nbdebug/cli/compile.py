"""``python -m nbdebug compile [--status]``: build the compiled walk memtrace uses on CPU, now."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the verb's arguments."""
    parser.add_argument("--status", action="store_true", help="only say whether it is built, and if not, why")


def run(args: argparse.Namespace) -> int:
    """Build and check it (about 10 s the first time for each torch), or say why it cannot be."""
    from nbdebug.core.memory import _compiled

    if args.status or not _compiled.enabled():
        print(f"compiled walk: {_compiled.status()}")
        return 0
    d = _compiled.build_dir()
    if (d / "verified.json").is_file():
        print(f"compiled walk: {_compiled.status()}")
        return 0
    print(f"compiled walk: building it in {d} (about 10 s) ...", flush=True)
    result = _compiled.build(d)
    if result == "ok":
        print(f"compiled walk: {_compiled.status()}")
        return 0
    print(f"compiled walk: not built: {result}\n"
          f"memtrace on CPU works without it (the walk in Python); the build log is {d / 'build.log'}")
    return 1
