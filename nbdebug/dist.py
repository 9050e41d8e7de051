"""Distributed debugging (public facade): run on N local ranks, find the rank that broke it, compare ranks.

In a notebook: ``%load_ext nbdebug``, then a ``%%torchrun -n 2`` cell.  From Python: ``nbdebug.dist.run(source,
2)``; for a script: ``python -m nbdebug torchrun -n 2 train.py``.  Inside the ranks: ``check_consistency(model)``,
``check_data_order(batch_ids)``, ``log_step(loss)``.  For a log from a cluster: ``parse_nccl_log(text)``.
"""

from nbdebug.core.dist import *  # noqa: F403 - the facade is exactly core.dist's public names
from nbdebug.core.dist import __all__  # noqa: F401
