"""Distributed debugging: run code on N local ranks, find the rank that caused a failure or a hang, compare ranks.

In a notebook::

    %load_ext nbdebug

    %%torchrun -n 2 --timeout 20
    import torch, torch.distributed as dist      # the process group is already initialised
    x = torch.ones(3) * dist.get_rank()
    dist.all_reduce(x)
    print(x)

From Python: ``run(source, 2)``; for a script: ``run_script("train.py", 2)`` or
``python -m nbdebug torchrun -n 2 train.py``.  Inside the ranks: ``check_consistency(model)``,
``check_data_order(batch_ids)``, ``log_step(loss)``.  For a log from a cluster: ``parse_nccl_log(text)``.
For a job that ran elsewhere: ``instrument()`` at the top of its script, then ``postmortem(folder)`` (or
``python -m nbdebug postmortem FOLDER``) on what its ranks left.
What nbdebug knows about distributed errors is in ``nbdebug.core.knowledge.dist``; ``classify(text)`` tells a
rank's error as a cause or a victim with it.
"""

from nbdebug.core.dist._checks import (
    ConsistencyReport,
    DataOrderReport,
    StepReport,
    check_consistency,
    check_data_order,
    log_step,
    step_report,
)
from nbdebug.core.dist._failures import classify, explain_detail_mismatch
from nbdebug.core.dist._instrument import Instrumented, instrument
from nbdebug.core.dist._launch import Backend, Echo, run, run_script
from nbdebug.core.dist._nccl import NcclLog, parse_nccl_log
from nbdebug.core.dist._postmortem import Divergence, HostState, Mismatch, PostMortem, RankState, postmortem
from nbdebug.core.dist._types import CheckRecord, DistRun, Hang, RankResult, RunInterrupted, StackGroup

__all__ = [
    "run", "run_script", "Backend", "Echo", "DistRun", "RankResult", "Hang", "StackGroup", "CheckRecord", "RunInterrupted",
    "check_consistency", "ConsistencyReport", "check_data_order", "DataOrderReport", "log_step", "StepReport",
    "step_report", "parse_nccl_log", "NcclLog", "classify", "explain_detail_mismatch", "instrument", "Instrumented",
    "postmortem", "PostMortem", "RankState", "HostState", "Divergence", "Mismatch",
]
