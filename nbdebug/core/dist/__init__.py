"""Distributed runs: launch ranks, watch for hangs, tell the cause from the victims, compare ranks."""

from nbdebug.core.dist._launch import Backend, run, run_script
from nbdebug.core.dist._types import CheckRecord, DistRun, Hang, RankResult, StackGroup

__all__ = ["Backend", "run", "run_script", "DistRun", "RankResult", "Hang", "StackGroup", "CheckRecord"]
