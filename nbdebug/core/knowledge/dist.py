"""Distributed runs: NCCL/gloo timeouts and errors, rendezvous, world size, launcher failures."""

from __future__ import annotations

from nbdebug.core._findings import Fix
from nbdebug.core.knowledge._schema import Entry
from nbdebug.core.knowledge._sources import SEED_DIST, SEED_GPU

__all__ = ["ENTRIES"]

ENTRIES: tuple[Entry, ...] = (
    Entry(
        slug="nccl_timeout",
        title="NCCL collective timed out",
        summary=(
            "A collective operation did not complete in time[[: {op_type} (sequence number {seq_num})]][[ ran"
            " {ran_ms} ms against a timeout of {timeout_ms} ms]][[ on rank(s) {ranks}]]. The ranks were waiting for"
            " each other: usually one rank crashed, is stuck, or took a different code path."
        ),
        keywords=("watchdog", "timed out", "timeout", "timing out"),
        patterns=(
            r"Watchdog caught collective operation timeout",
            r"WorkNCCL\([^)]*\) ran for \d+ milliseconds before timing out",
            r"NCCL (?:communicator )?(?:operation )?(?:timed out|timeout)",
            r"collective operation timeout",
            r"Timeout at NCCL work: \d+",
            r"ProcessGroupNCCL's watchdog got stuck",
        ),
        priority=54,
        facts=(
            (r"WorkNCCL\(SeqNum=(?P<seq_num>\d+), OpType=(?P<op_type>\w+)(?:, NumelIn=(?P<numel_in>\d+))?"
             r"(?:, NumelOut=\d+)?, Timeout\(ms\)=(?P<timeout_ms>\d+)\) ran for (?P<ran_ms>\d+) milliseconds",
             {"seq_num": "int", "op_type": "str", "numel_in": "int", "timeout_ms": "int", "ran_ms": "int"}),
        ),
        repeated_facts=((r"\[Rank (\d+)\] Watchdog caught", "ranks", "int_set"),),
        causes=(
            "One rank crashed or hit an error earlier (check every rank's log for the first error).",
            "Ranks execute different collectives: a collective inside `if rank == 0`, or uneven numbers of batches.",
            "A rank is much slower (data loading, checkpoint saving on rank 0, a straggling GPU).",
            "Network problems between nodes (wrong interface, InfiniBand issues).",
        ),
        fixes=(
            Fix("Make every rank run the same collectives, the same number of times",
                "sampler = DistributedSampler(ds, drop_last=True)\nloader = DataLoader(ds, sampler=sampler, drop_last=True)"),
            Fix("Get a trace of which collective each rank is in",
                "TORCH_DISTRIBUTED_DEBUG=DETAIL NCCL_DEBUG=INFO torchrun ..."),
            Fix("Give slow phases (e.g. rank-0 checkpointing) more time",
                "dist.init_process_group('nccl', timeout=datetime.timedelta(minutes=60))"),
        ),
        first_step="Look for the first error in ALL ranks' logs (not this timeout): the rank that failed or "
        "diverged is the cause; the others only waited.",
        sources=(SEED_DIST, SEED_GPU, "https://github.com/hiyouga/LlamaFactory/issues/7396"),
    ),
    Entry(
        slug="nccl_error",
        title="NCCL communication error",
        summary="NCCL reported an error[[: {nccl_error}]][[ (NCCL {nccl_version})]].",
        keywords=("nccl",),
        patterns=(
            r"NCCL error in: ",
            r"NCCL error: ",
            r"NCCL Error \d+: ",
            r"is setting up NCCL communicator",
            r"Distributed package doesn't have NCCL built in",
            r"nccl(?:SystemError|UnhandledCudaError|InternalError|InvalidUsage|InvalidArgument|RemoteError)",
            r"ProcessGroupNCCL\.cpp:\d+, (?:unhandled|remote|invalid|internal)",
            r"NCCL communicator was aborted",
            r"NCCL WARN (?!NET/Plugin|No plugin|Missing \"?plugin)",  # plugin notices appear in healthy runs too
            r"DistBackendError",
        ),
        exception_types=("DistBackendError",),
        priority=52,
        facts=(
            (r"ProcessGroupNCCL\.cpp:\d+, (?P<nccl_error>[a-z][a-z ]+?)(?: \(run with|, NCCL version|$)", {"nccl_error": "str"}),
            (r"NCCL error: (?P<nccl_error>[a-z][a-z ]+?)(?: \(run with|, NCCL version|$)", {"nccl_error": "str"}),
            (r"NCCL version (?P<nccl_version>[\d.]+)", {"nccl_version": "str"}),
        ),
        causes=(
            "Network setup between processes or nodes: wrong interface, firewall, InfiniBand without support.",
            "Another rank died (look for its own error), so its peers saw the connection close.",
            "A CUDA problem inside NCCL (unhandled cuda error): out of memory, driver / NCCL version mismatch.",
            "Too little shared memory in a container (/dev/shm) for NCCL's buffers.",
        ),
        fixes=(
            Fix("Get NCCL's own explanation", "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET torchrun ..."),
            Fix("Pick the right network interface / disable InfiniBand when it is not there",
                "export NCCL_SOCKET_IFNAME=eth0\nexport NCCL_IB_DISABLE=1"),
            Fix("Give containers enough shared memory", "docker run --shm-size=16g ..."),
        ),
        first_step="Re-run with NCCL_DEBUG=INFO and read the first 'NCCL WARN' line; also check the other ranks' "
        "logs for an earlier failure.",
        sources=(SEED_DIST, SEED_GPU, "https://github.com/pytorch/pytorch/issues/111187"),
    ),
    Entry(
        slug="address_in_use",
        title="Address already in use (rendezvous port taken)",
        summary="The process could not listen on the rendezvous port[[ {port}]]: another process already uses it.",
        keywords=("address already in use", "eaddrinuse", "errno: 98", "errno 98", "failed to listen", "failed to bind",
                  "only one usage of each socket address"),
        patterns=(
            r"[Aa]ddress already in use",
            r"EADDRINUSE",
            r"errno: 98\b",
            r"\[Errno 98\]",
            r"server socket has failed to (?:listen|bind)",
            # Windows: WSAEADDRINUSE (10048)
            r"Only one usage of each socket address",
        ),
        priority=55,
        facts=(
            (r"(?:port: |:)(?P<port>\d{2,5})\b(?=[^\n]*(?:errno: 98|EADDRINUSE|useIpv6))", {"port": "int"}),
        ),
        causes=(
            "A previous run (or a notebook kernel) is still alive and holds the port (MASTER_PORT, default 29500).",
            "Two jobs on the same machine use the same master port.",
            "The process group was initialised twice in the same process.",
        ),
        fixes=(
            Fix("Find and stop the process holding the port", "lsof -i :29500   # then: kill <PID>"),
            Fix("Use another port", "torchrun --master-port=29501 ...\n# or: os.environ['MASTER_PORT'] = '29501'"),
            Fix("Tear down the process group when a run ends", "dist.destroy_process_group()"),
        ),
        first_step="Run `lsof -i :<port>` (29500 by default) and stop the leftover process, or start with a "
        "different --master-port.",
        sources=(SEED_DIST, SEED_GPU, "https://github.com/pytorch/pytorch/issues/85604"),
    ),
    Entry(
        slug="world_size_mismatch",
        title="World size does not match the processes that joined",
        summary=(
            "The process group expected[[ world_size={world_size}]] processes[[ but {worker_count} joined]]."
            " Every process must agree on WORLD_SIZE and on its own unique RANK."
        ),
        keywords=("world_size", "world size", "store based barrier", "rank should be in", "clients joined",
                  "expected, but not set"),
        patterns=(
            r"store based barrier",
            r"store_based_barrier_key",
            r"number of world size \(\d+\) is not equal",
            r"rank should be in the interval",
            r"world_size \(\d+\) (?:is not equal|does not match|!=)",
            r"waiting for clients\. \d+/\d+ clients joined",
            r"environment variable (?:RANK|WORLD_SIZE|LOCAL_RANK) expected, but not set",
        ),
        priority=56,
        facts=(
            (r"\(world_size=(?P<world_size>\d+), worker_count=(?P<worker_count>\d+)", {"world_size": "int", "worker_count": "int"}),
            (r"world size \((?P<worker_count>\d+)\) is not equal to the expected \((?P<world_size>\d+)\)",
             {"world_size": "int", "worker_count": "int"}),
            (r"(?P<worker_count>\d+)/(?P<world_size>\d+) clients joined", {"world_size": "int", "worker_count": "int"}),
        ),
        causes=(
            "The launcher started a different number of processes than WORLD_SIZE / --nnodes x --nproc_per_node says.",
            "Ranks computed from local_rank only, so two nodes use the same ranks (worker_count > world_size).",
            "A node or process never started or crashed before joining (worker_count < world_size).",
            "Leftover processes of an earlier run joined the same store (same MASTER_ADDR:PORT).",
        ),
        fixes=(
            Fix("Let torchrun compute ranks and world size; read them from the environment",
                "torchrun --nnodes=2 --nproc_per_node=4 --node_rank=$NODE_RANK --master_addr=$ADDR train.py\n"
                "dist.init_process_group('nccl')  # uses RANK / WORLD_SIZE set by torchrun"),
            Fix("Print what each process believes", "print(os.environ.get('RANK'), os.environ.get('WORLD_SIZE'))"),
        ),
        first_step="Print RANK, LOCAL_RANK and WORLD_SIZE in every process: they must be unique and agree "
        "with the number of processes actually started.",
        sources=(SEED_GPU, SEED_DIST, "https://github.com/tczhangzhi/pytorch-distributed/issues/18"),
    ),
    Entry(
        slug="child_failed",
        title="A worker process launched by torchrun failed",
        summary=(
            "torchrun reports that a worker failed[[ (rank {rank}, exit code {exitcode})]][[ — {signal_meaning}]]. "
            "This message is only the launcher's summary: the real error is in that rank's own output above it."
        ),
        keywords=("childfailederror", "exitcode", "terminated with", "root cause (first observed failure)",
                  "processexitedexception", "local_rank"),
        patterns=(
            r"(?i:ChildFailedError)",
            r"elastic[^\n]*failed \(exitcode: -?\d+\) local_rank: \d+",
            r"Root Cause \(first observed failure\)",
            r"Process \d+ terminated with (?:the following error|signal|exit code)",
            r"ProcessExitedException",
            r"CalledProcessError: Command '\[[^\n]*--local_rank",
        ),
        exception_types=("ChildFailedError", "ProcessRaisedException", "ProcessExitedException"),
        priority=20,
        wrapper=True,
        facts=(
            (r"failed \(exitcode: (?P<exitcode>-?\d+)\) local_rank: (?P<local_rank>\d+)", {"exitcode": "int", "local_rank": "int"}),
            (r"rank\s*: (?P<rank>\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*: (?P<exitcode>-?\d+)", {"rank": "int", "exitcode": "int"}),
            (r"Signal (?P<signal>\d+) \((?P<signal_name>SIG\w+)\) received", {"signal": "int", "signal_name": "str"}),
        ),
        causes=(
            "The training script raised an exception on that rank (its traceback is earlier in the log).",
            "exit code -9 / SIGKILL: the host ran out of RAM and the kernel's OOM killer stopped the process.",
            "The failure happened before logging started (imports, arguments, rendezvous).",
        ),
        fixes=(
            Fix("Make torchrun print the worker's traceback in the summary",
                "from torch.distributed.elastic.multiprocessing.errors import record\n\n@record\ndef main():\n    ..."),
            Fix("Keep each rank's output", "torchrun --tee 3 --log-dir logs/ ... train.py"),
            Fix("For exit code -9, check host memory", "dmesg | grep -i -E 'killed process|out of memory'"),
        ),
        first_step="Scroll up to the first traceback printed by a rank (or add @record to main): that error, "
        "not ChildFailedError, is what to fix.",
        sources=(SEED_DIST, "https://github.com/Vision-CAIR/MiniGPT-4/issues/237"),
    ),
)
