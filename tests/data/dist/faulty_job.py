"""A small training job with one faulty rank, run under real torchrun on gloo with nbdebug.dist.instrument().

MODE=skip   rank BAD skips the 4th all_reduce (it is busy elsewhere): a hang
MODE=size   rank BAD all_reduces a tensor of another size
MODE=raise  rank BAD raises (a real torch error: a label out of range in cross_entropy)
MODE=exit   rank BAD exits (sys.exit(3)) before the 4th all_reduce
ARTIFACTS is the job's artifact folder; PG_TIMEOUT the process group's timeout in seconds.
"""

import datetime
import os
import sys
import time

from nbdebug.dist import instrument

instrument(os.environ["ARTIFACTS"], hang_after=float(os.environ.get("HANG_AFTER", "2")))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(os.environ.get("PG_TIMEOUT", "8"))))
rank, mode, bad = dist.get_rank(), os.environ["MODE"], int(os.environ.get("BAD_RANK", "1"))
grad = torch.ones(8)
for step in range(3):
    dist.all_reduce(grad)
    print(f"step {step} done", flush=True)

logits, labels = torch.randn(4, 10), torch.tensor([1, 2, 3, 4])
if rank == bad:
    if mode == "skip":
        time.sleep(float(os.environ.get("SKIP_SLEEP", "60")))  # e.g. stuck writing a checkpoint
    elif mode == "raise":
        labels[2] = 12
    elif mode == "size":
        grad = torch.ones(9)
    elif mode == "exit":
        sys.exit(3)
loss = F.cross_entropy(logits, labels)
dist.all_reduce(grad)
print("step 3 done", flush=True)
dist.destroy_process_group()
