"""Distributed debugging: run code on N local ranks, find the rank that caused a failure or a hang, compare ranks.

In a notebook::

    %load_ext nbdebug

    %%torchrun -n 2 --timeout 20
    import torch, torch.distributed as dist      # the process group is already initialised
    x = torch.ones(3) * dist.get_rank()
    dist.all_reduce(x)
    print(x)

From Python: ``nbdebug.dist.run(source, 2)``; for a script: ``python -m nbdebug torchrun -n 2 train.py``.
Inside the ranks: ``check_consistency(model)``, ``check_data_order(batch_ids)``, ``log_step(loss)``.
For a log from a cluster: ``parse_nccl_log(text)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nbdebug.core.dist._checks import (
    ConsistencyReport,
    DataOrderReport,
    StepReport,
    check_consistency,
    check_data_order,
    log_step,
    step_report,
)
from nbdebug.core.dist._failures import PATTERNS, classify, explain_detail_mismatch
from nbdebug.core.dist._launch import Backend, Echo
from nbdebug.core.dist._launch import run as _run
from nbdebug.core.dist._launch import run_script as _run_script
from nbdebug.core.dist._nccl import NCCL_PATTERNS, NcclLog, NcclProblem, parse_nccl_log
from nbdebug.core.dist._types import CheckRecord, DistRun, Hang, RankResult, StackGroup

__all__ = [
    "run", "run_script", "DistRun", "RankResult", "Hang", "StackGroup", "CheckRecord", "Backend",
    "check_consistency", "ConsistencyReport", "check_data_order", "DataOrderReport", "log_step", "StepReport",
    "step_report", "parse_nccl_log", "NcclLog", "NcclProblem", "NCCL_PATTERNS", "PATTERNS", "classify",
    "explain_detail_mismatch",
]


def run(
    source: str,
    nprocs: int,
    *,
    timeout: float = 60.0,
    backend: str | Backend = "gloo",
    env: Mapping[str, str] | None = None,
    use: Iterable[str] | str | None = None,
    namespace: Mapping[str, Any] | None = None,
    echo: Echo | bool | None = True,
    flight_recorder: bool = True,
    detail: bool = False,
    keep_files: bool = False,
) -> DistRun:
    """Run ``source`` on ``nprocs`` local ranks with the process group initialised.

    Each rank is a fresh Python process with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free
    MASTER_PORT (the launcher owns the rendezvous store, so the port can never be "already in use").  Output is
    streamed live with ``[rank N]`` prefixes and kept.  No process survives the call: not after a failure, a
    hang, or a KeyboardInterrupt.

    Parameters
    ----------
    source : str
        Python code run as ``__main__`` in every rank, after ``init_process_group(backend)``.
    nprocs : int
        Number of ranks.
    timeout : float
        Hang watchdog: when no rank makes progress (prints, moves to another Python line, exits) for this many
        seconds, every rank's stack and Flight Recorder entries are taken and every rank is killed.  The process
        group's own timeout is set longer (``max(3 * timeout, timeout + 30)``) so that the watchdog fires first.
    backend : {"gloo", "nccl"}
        Process-group backend; with ``nccl`` each rank calls ``torch.cuda.set_device(LOCAL_RANK)`` first.
    env : mapping, optional
        Extra environment variables for the ranks (``NCCL_DEBUG=INFO``, ...).  A ``MASTER_PORT`` here is tried
        first; when taken, a free port is used and the run's ``notes`` say so.
    use : iterable of str or str, optional
        Names from the notebook to ship: functions and classes by source, modules as imports, other values
        pickled.  Lambdas, closures, CUDA tensors, open files and other unpicklable values are refused with the
        reason.
    namespace : mapping, optional
        Where to look the ``use`` names up (default: the caller's globals).
    echo : bool or callable, optional
        True prints each rank's lines as they arrive; a callable ``(rank, stream, line)`` receives them; False
        keeps them quiet (still kept in the result).
    flight_recorder : bool
        Record collectives (``TORCH_FR_BUFFER_SIZE=200``) so that a hang report can show each rank's last ones.
    detail : bool
        Set ``TORCH_DISTRIBUTED_DEBUG=DETAIL``: collective mismatches (op, shape, dtype) raise at once with a
        message that the result explains; costs extra latency per collective.
    keep_files : bool
        Keep the run folder (torch error files, per-rank dumps); its path is ``DistRun.run_dir``.

    Returns
    -------
    DistRun
        ``ok``, ``ranks`` (exit code, output, traceback per rank), ``primary`` (the rank whose failure came first
        and caused the rest), ``hang`` (what the watchdog found) and a text/HTML summary.
    """
    return _run(source, nprocs, timeout=timeout, backend=backend, env=env, use=use, namespace=namespace, echo=echo,
                flight_recorder=flight_recorder, detail=detail, keep_files=keep_files)


def run_script(
    path: str,
    nprocs: int,
    *,
    argv: Iterable[str] = (),
    timeout: float = 60.0,
    backend: str | Backend = "gloo",
    env: Mapping[str, str] | None = None,
    echo: Echo | bool | None = True,
    flight_recorder: bool = True,
    detail: bool = False,
    keep_files: bool = False,
) -> DistRun:
    """Run a script on ``nprocs`` local ranks, like ``torchrun --standalone --nproc-per-node N``.

    The script initialises the process group itself (``init_process_group`` gets the launcher's timeout when it
    does not pass one).  Everything else is as in ``run``.

    Parameters
    ----------
    path : str
        The script.
    nprocs : int
        Number of ranks.
    argv : iterable of str
        Arguments for the script (``sys.argv[1:]``).
    timeout, backend, env, echo, flight_recorder, detail, keep_files
        As in ``run``.

    Returns
    -------
    DistRun
        The outcome, as for ``run``.
    """
    return _run_script(path, nprocs, argv=argv, timeout=timeout, backend=backend, env=env, echo=echo,
                       flight_recorder=flight_recorder, detail=detail, keep_files=keep_files)
