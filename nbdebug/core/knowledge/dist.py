"""Distributed runs: NCCL/gloo timeouts and errors, rendezvous, world size, launcher failures.

Three readers share these entries (``contexts``): the explainer (``explain``), the distributed runner telling the
rank that caused a failure from its victims (``rank_failure``, with ``role``), and the reader of
``NCCL_DEBUG=INFO`` logs (``nccl_log``).  A message pattern lives in one entry only, whichever readers use it.
The entries without patterns are kinds of findings the NCCL-log reader builds from what it parsed (interfaces,
SeqNums).  Messages are taken from real runs and public issues (``sources``; tests/data/dist holds the logs).
"""

from __future__ import annotations

from nbdebug.core._findings import Fix, Severity
from nbdebug.core.knowledge._schema import Entry, Threshold

__all__ = ["ENTRIES", "LAUNCH_CHECK_STEP", "THRESHOLDS"]

ENTRIES: tuple[Entry, ...] = (
    Entry(
        slug="nccl_timeout",
        title="NCCL collective timed out",
        contexts=("explain", "rank_failure", "nccl_log"),
        role="victim",
        summary=(
            "A collective operation did not complete in time[[: {op_type} (sequence number {seq_num})]][[ ran"
            " {ran_ms} ms against a timeout of {timeout_ms} ms]][[ on rank(s) {ranks}]]. The ranks were waiting for"
            " each other: usually one rank crashed, is stuck, or took a different code path."
        ),
        keywords=("watchdog", "timed out", "timeout", "timing out"),
        patterns=(
            r"Watchdog caught collective operation timeout",
            r"WorkNCCL\((?:[^)W]|W(?!orkNCCL\())*\) ran for \d+ milliseconds before timing out",
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
            Fix("Find the rank that never reached this collective: %%torchrun names it; in a log, a rank at a lower "
                "SeqNum fell behind"),
            Fix("Give slow phases (e.g. rank-0 checkpointing) more time",
                "dist.init_process_group('nccl', timeout=datetime.timedelta(minutes=60))"),
        ),
        first_step="Look for the first error in ALL ranks' logs (not this timeout): the rank that failed or "
        "diverged is the cause; the others only waited.",
        sources=("https://pytorch.org/docs/stable/distributed.html#torch.distributed.init_process_group",),
    ),
    Entry(
        slug="nccl_error",
        title="NCCL communication error",
        # a rank's NCCL error is, on the ranks that see it, the consequence of a peer or link that failed
        contexts=("explain", "rank_failure", "nccl_log"),
        role="victim",
        summary="NCCL reported an error[[: {nccl_error}]][[ (NCCL {nccl_version})]].",
        keywords=("nccl", "distbackenderror"),
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
        sources=("https://github.com/pytorch/pytorch/issues/111187",),
    ),
    Entry(
        slug="address_in_use",
        title="Address already in use (rendezvous port taken)",
        contexts=("explain", "rank_failure"),
        role="cause",
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
            (r"(?:port: |:)(?P<port>\d{2,5})\b(?=(?:[^\n:]|:(?! ?\d))*(?:errno: 98|EADDRINUSE|useIpv6))", {"port": "int"}),
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
        sources=("https://github.com/pytorch/pytorch/issues/85604",),
    ),
    Entry(
        slug="world_size_mismatch",
        title="World size does not match the processes that joined",
        summary=(
            "The process group expected[[ world_size={world_size}]] processes[[ but {worker_count} joined]]."
            " Every process must agree on WORLD_SIZE and on its own unique RANK."
        ),
        keywords=("store_based_barrier", "world_size", "world size", "store based barrier", "rank should be in", "clients joined",
                  "expected, but not set", "initializing distributed: global_rank", "tcpstore::",
                  "rendezvoustimeouterror"),
        patterns=(
            r"store based barrier",
            r"store_based_barrier_key",
            r"number of world size \(\d+\) is not equal",
            r"rank should be in the interval",
            r"world_size \(\d+\) (?:is not equal|does not match|!=)",
            r"waiting for clients\. \d+/\d+ clients joined",
            r"environment variable (?:RANK|WORLD_SIZE|LOCAL_RANK) expected, but not set",
            # a rank that hangs in the rendezvous: Lightning's last line before the wait, or a native stack (gdb,
            # py-spy --native) blocked reading the store for a key the other ranks never wrote
            r"Initializing distributed: GLOBAL_RANK: \d+, MEMBER: \d+/\d+\s*\Z",
            r"\bin (?:\w+ )?c10d::TCPStore::(?:doGet|get|wait|doWait)\b",
            r"\bRendezvousTimeoutError\b",
        ),
        priority=56,
        facts=(
            (r"\(world_size=(?P<world_size>\d+), worker_count=(?P<worker_count>\d+)", {"world_size": "int", "worker_count": "int"}),
            (r"world size \((?P<worker_count>\d+)\) is not equal to the expected \((?P<world_size>\d+)\)",
             {"world_size": "int", "worker_count": "int"}),
            (r"(?<!\d)(?P<worker_count>\d+)/(?P<world_size>\d+) clients joined", {"world_size": "int", "worker_count": "int"}),
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
        sources=("https://pytorch.org/docs/stable/distributed.html#torch.distributed.init_process_group",),
    ),
    Entry(
        slug="child_failed",
        title="A worker process launched by torchrun (or mp.spawn / xmp.spawn) failed",
        summary=(
            "torchrun reports that a worker failed[[ (rank {rank}, exit code {exitcode})]][[ — {signal_meaning}]]. "
            "This message is only the launcher's summary: the real error is in that rank's own output above it."
        ),
        keywords=("childfailederror", "exitcode", "terminated with", "root cause (first observed failure)",
                  "processexitedexception", "local_rank"),
        patterns=(
            r"(?i:ChildFailedError)",
            r"elastic(?:(?!elastic)[^\n])*failed \(exitcode: -?\d+\) local_rank: \d+",
            r"Root Cause \(first observed failure\)",
            r"Process \d+ terminated with (?:the following error|signal|exit code)",
            r"ProcessExitedException",
            # the command line runs until the next report at most: linear on a line of repeated reports
            r"CalledProcessError: Command '\[(?:(?!CalledProcessError)[^\n])*--local_rank",
        ),
        exception_types=("ChildFailedError", "ProcessRaisedException", "ProcessExitedException"),
        priority=20,
        wrapper=True,
        facts=(
            (r"failed \(exitcode: (?P<exitcode>-?\d+)\) local_rank: (?P<local_rank>\d+)", {"exitcode": "int", "local_rank": "int"}),
            (r"rank\s*: (?P<rank>\d+) \(local_rank: \d+\)[^\S\n]*\n\s*exitcode\s*: (?P<exitcode>-?\d+)", {"rank": "int", "exitcode": "int"}),
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
        sources=("https://pytorch.org/docs/stable/elastic/errors.html",),
    ),

    # -- rank failures: a rank that failed because another one did (victim), or a failure of its own (cause) ------
    Entry(
        slug="peer_closed",
        title="A peer closed its connection",
        summary="Another rank's process ended while this rank was talking to it (it crashed or aborted).",
        severity=Severity.ERROR,
        patterns=(r"Connection closed by (?:remote )?peer",),
        contexts=("rank_failure", "nccl_log"),
        role="victim",
        fixes=(Fix("Find the rank that failed first: its own error is the cause, this one only lost its peer"),),
        sources=("https://github.com/pytorch/gloo/blob/main/gloo/transport/tcp/pair.cc",
                 "https://github.com/NVIDIA/nccl/issues/1232"),
    ),
    Entry(
        slug="peer_reset",
        title="The connection to a peer was dropped",
        summary="The connection to another rank was dropped (that rank crashed or was killed).",
        patterns=(r"Connection reset by peer|Broken pipe",),
        contexts=("rank_failure",),
        role="victim",
        fixes=(Fix("Find the rank that failed first: its own error is the cause"),),
        sources=("https://github.com/pytorch/gloo/blob/main/gloo/transport/tcp/pair.cc",),
    ),
    Entry(
        slug="gloo_timeout",
        title="gloo collective timed out",
        summary=("This rank waited in a collective that another rank never joined, until the process-group "
                 "timeout."),
        patterns=(r"Timed out waiting \d+ ?ms for (recv|send) operation",),
        contexts=("rank_failure",),
        role="victim",
        fixes=(Fix("Find the rank that never reached this collective (%%torchrun names it): every rank must call "
                   "the same collectives in the same order"),),
        sources=("https://github.com/pytorch/gloo/blob/main/gloo/transport/tcp/unbound_buffer.cc",),
    ),
    Entry(
        slug="monitored_barrier",
        title="Ranks failed to reach monitored_barrier",
        summary="Rank 0's monitored barrier timed out and names the rank(s) that never arrived.",
        patterns=(r"Ranks? (?P<culprit>\d+)(?:, \d+)* failed to pass monitoredBarrier",),
        contexts=("rank_failure",),
        role="victim",
        fixes=(Fix("Look at what the named rank did instead of reaching the barrier"),),
        sources=("https://pytorch.org/docs/stable/distributed.html#torch.distributed.monitored_barrier",),
    ),
    Entry(
        slug="check_rank0",
        title="Rank 0 reported an error at the barrier",
        summary=("This rank reached the barrier but rank 0 reported an error; the faulty rank is named in rank 0's "
                 "error."),
        patterns=(r"Please check rank \d+ logs for faulty rank",),
        contexts=("rank_failure",),
        role="victim",
        fixes=(Fix("Read rank 0's error: it names the rank that never arrived"),),
        sources=("https://pytorch.org/docs/stable/distributed.html#torch.distributed.monitored_barrier",),
    ),
    Entry(
        slug="store_timeout",
        title="Rendezvous store timed out",
        summary=("Waiting for other ranks at the rendezvous store timed out (a rank never started or crashed "
                 "early)."),
        patterns=(r"DistStoreError|Socket Timeout|wait timeout after \d+ms",),
        contexts=("rank_failure",),
        role="victim",
        fixes=(Fix("Find the rank that did not start or crashed before joining; check MASTER_ADDR/MASTER_PORT"),),
        sources=("https://pytorch.org/docs/stable/distributed.html#torch.distributed.TCPStore",),
    ),
    Entry(
        slug="collective_mismatch",
        title="Ranks called different collectives",
        summary=("TORCH_DISTRIBUTED_DEBUG=DETAIL found ranks calling different collectives (op, shape or "
                 "dtype)."),
        patterns=(r"Detected mismatch between collectives on ranks",),
        contexts=("rank_failure",),
        role="cause",
        fixes=(Fix("Make every rank issue the same collectives, in the same order, with the same shapes and "
                   "dtypes"),),
        sources=("https://pytorch.org/docs/stable/distributed.html#torch-distributed-debug",),
    ),
    Entry(
        slug="gloo_size_mismatch",
        title="Ranks passed tensors of different sizes to a collective",
        summary="Ranks passed tensors of different sizes to the same collective (gloo aborted the process).",
        patterns=(r"Received data size doesn't match expected size|op\.preamble\.length <= op\.nbytes",),
        contexts=("explain", "rank_failure"),
        priority=80,  # gloo aborts the process after it (native_crash, 72): the abort is the consequence
        role="cause",
        keywords=("op.preamble.length", "received data size"),
        causes=(
            "Ranks call the same collective with tensors of different sizes (a last batch of another size on one "
            "rank, a shape that depends on the rank's data).",
            "Ranks call different collectives at the same point (one rank skipped or added one).",
        ),
        first_step=("Print the shape of the tensor each rank passes to the collective (or run with "
                    "TORCH_DISTRIBUTED_DEBUG=DETAIL): the rank whose size differs is the one to fix."),
        fixes=(Fix("Give the collective tensors of the same shape on every rank (pad, or all_gather the sizes "
                   "first)"),
               Fix("Catch it at once, with the shapes", "%%torchrun --detail   # TORCH_DISTRIBUTED_DEBUG=DETAIL")),
        sources=("https://github.com/pytorch/gloo/blob/main/gloo/transport/tcp/pair.cc",),
    ),
    # -- NCCL_DEBUG=INFO logs -------------------------------------------------------------------------------------
    Entry(
        slug="no_route_to_host",
        title="No route to host",
        summary="A rank could not reach another host's address.",
        patterns=(r"No route to host",),
        contexts=("nccl_log",),
        fixes=(Fix("Check that NCCL_SOCKET_IFNAME names an interface every node shares (see the 'Bootstrap : "
                   "Using' lines), that MASTER_ADDR is reachable from every node, and that no firewall blocks the "
                   "ports", "export NCCL_SOCKET_IFNAME=eth0"),),
        sources=("https://github.com/sgl-project/sglang/issues/3820",),
    ),
    Entry(
        slug="connect_timeout",
        title="Connecting to a peer timed out",
        summary="Connecting to a peer timed out (wrong interface, firewall, or the peer is not listening).",
        patterns=(r"Connection timed out",),
        contexts=("nccl_log",),
        fixes=(Fix("Set NCCL_SOCKET_IFNAME to the interface the nodes reach each other on (not docker/veth/virbr); "
                   "check firewalls between the nodes", "export NCCL_SOCKET_IFNAME=eth0"),),
        sources=("https://github.com/Oneflow-Inc/oneflow/issues/3586",),
    ),
    Entry(
        slug="connection_refused",
        title="A peer refused the connection",
        summary="A peer refused the connection (it is not listening: crashed, not started, or a wrong address).",
        patterns=(r"Connection refused",),
        contexts=("nccl_log",),
        fixes=(Fix("Find the rank that did not start or crashed first; check MASTER_ADDR/MASTER_PORT"),),
        sources=("https://github.com/NVIDIA/nccl/blob/master/src/misc/socket.cc",),
    ),
    Entry(
        slug="connection_abort",
        title="Connection aborted during setup",
        summary="The connection to a peer was aborted during setup.",
        patterns=(r"Software caused connection abort",),
        contexts=("nccl_log",),
        fixes=(Fix("Usually the peer died first: find its error; otherwise check the network between the nodes"),),
        sources=("https://github.com/NVIDIA/nccl-tests/issues/166",),
    ),
    Entry(
        slug="bad_socket_ifname",
        title="NCCL_SOCKET_IFNAME names no interface of this host",
        summary="NCCL_SOCKET_IFNAME names an interface that does not exist on this host.",
        patterns=(r"neither AF_INET\(2\) nor AF_INET6|no NCCL_SOCKET_IFNAME interface found",),
        contexts=("nccl_log",),
        fixes=(Fix("Run `ip addr` on every node and set NCCL_SOCKET_IFNAME to an existing interface (a prefix like "
                   "'en' matches all interfaces starting with it)", "ip addr\nexport NCCL_SOCKET_IFNAME=eth0"),),
        sources=("https://github.com/NVIDIA/nccl/issues/1837",),
    ),
    Entry(
        slug="address_family",
        title="IPv4/IPv6 mismatch between nodes",
        summary="The nodes do not agree on IPv4 or IPv6 (address family not supported).",
        patterns=(r"Address family not supported by protocol",),
        contexts=("nccl_log",),
        fixes=(Fix("Use the same address family on every node", "export NCCL_SOCKET_FAMILY=AF_INET"),),
        sources=("https://github.com/NVIDIA/nccl/issues/210",),
    ),
    Entry(
        slug="no_ib",
        title="No InfiniBand device",
        summary="No InfiniBand device: inter-node traffic goes over TCP sockets (much slower).",
        severity=Severity.INFO,
        patterns=(r"NET/IB : No device found",),
        contexts=("nccl_log",),
        fixes=(Fix("Expected on Ethernet-only clusters; on IB clusters check the drivers and NCCL_IB_HCA"),),
        sources=("https://github.com/NVIDIA/nccl/issues/226",),
    ),
    Entry(
        slug="no_ibverbs",
        title="libibverbs is not installed",
        summary="libibverbs is not installed: InfiniBand cannot be used.",
        severity=Severity.INFO,
        patterns=(r"Failed to open libibverbs",),
        contexts=("nccl_log",),
        fixes=(Fix("Harmless on a single node or Ethernet; install rdma-core for InfiniBand"),),
        sources=("https://github.com/NVIDIA/nccl/issues/1190",),
    ),
    # kinds the NCCL-log reader finds from what it parsed, not from one message
    Entry(
        slug="ranks_out_of_step",
        title="Ranks time out at different collectives",
        severity=Severity.ERROR,
        contexts=("nccl_log",),
        fixes=(Fix("The ranks at the lowest SeqNum fell behind or skipped collectives: look at what they did "
                   "before it"),),
        sources=("https://github.com/pytorch/pytorch/issues/152623",),
    ),
    Entry(
        slug="virtual_interface",
        title="NCCL may use a virtual network interface",
        severity=Severity.WARNING,
        contexts=("nccl_log",),
        fixes=(Fix("Container/bridge interfaces are not reachable from other nodes: set NCCL_SOCKET_IFNAME to the "
                   "physical interface", "export NCCL_SOCKET_IFNAME=eth0"),),
        sources=("https://github.com/Oneflow-Inc/oneflow/issues/3586",),
    ),
    Entry(
        slug="link_local_ipv6",
        title="An IPv6 link-local address is in use",
        severity=Severity.WARNING,
        contexts=("nccl_log",),
        fixes=(Fix("Link-local addresses only work on one link: choose the family or the interface",
                   "export NCCL_SOCKET_FAMILY=AF_INET   # or NCCL_SOCKET_IFNAME=eth0"),),
        sources=("https://github.com/NVIDIA/nccl/issues/529",),
    ),
    Entry(
        slug="loopback_multinode",
        title="NCCL uses loopback across several hosts",
        severity=Severity.ERROR,
        contexts=("nccl_log",),
        fixes=(Fix("lo cannot reach other nodes: set NCCL_SOCKET_IFNAME to the inter-node interface",
                   "export NCCL_SOCKET_IFNAME=eth0"),),
        sources=("https://github.com/NVIDIA/nccl/issues/286",),
    ),
    # the step report of log_step records (nbdebug.dist.step_report)
    Entry(
        slug="straggler",
        title="A rank is a straggler",
        severity=Severity.WARNING,
        contexts=(),
        fixes=(Fix("Look at what that rank does more of: data loading, logging or checkpointing on rank 0, a slower "
                   "device"),
               Fix("Compare each rank's step time with Flight Recorder on", "%%torchrun -n 2   # then run.step_report()")),
        sources=("https://pytorch.org/docs/stable/torch_nccl_flight_recorder.html",),
    ),
    Entry(
        slug="loss_not_finite",
        title="Non-finite loss on some ranks",
        contexts=(),
        fixes=(Fix("Stop that rank at the first non-finite loss, with the step",
                   "if not torch.isfinite(loss): raise FloatingPointError(f'step {step}: loss {loss}')"),),
        sources=("https://pytorch.org/docs/stable/autograd.html#anomaly-detection",),
    ),
    Entry(
        slug="loss_outlier",
        title="One rank's loss is far from the others'",
        severity=Severity.WARNING,
        contexts=(),
        fixes=(Fix("Check that rank's data: a different shard, bad samples, a different augmentation seed"),),
        sources=("https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler",),
    ),
    Entry(
        slug="identical_losses",
        title="Every rank reports the same loss",
        severity=Severity.WARNING,
        contexts=(),
        fixes=(Fix("Give each rank its own shard of the data",
                   "sampler = DistributedSampler(ds)\nloader = DataLoader(ds, sampler=sampler)\n"
                   "for epoch in ...: sampler.set_epoch(epoch)"),
               Fix("If the loss is all-reduced before log_step, log the local loss instead")),
        sources=("https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler",),
    ),
    # %%torchrun: a cell that uses names of the notebook without shipping them
    Entry(
        slug="name_not_shipped",
        title="A notebook name is not defined in the ranks",
        contexts=(),
        fixes=(Fix("Ship the names from the notebook to the ranks", "%%torchrun -n 2 --use NAME"),),
        sources=("https://docs.python.org/3/library/exceptions.html#NameError",),
    ),
    # the cross-rank checks run inside the ranks (check_consistency, check_data_order)
    Entry(
        slug="model_structure_differs",
        title="Ranks built different models",
        contexts=(),
        fixes=(Fix("Build the same model on every rank: no rank-dependent layers, sizes or dtypes"),),
        sources=("https://pytorch.org/docs/stable/notes/ddp.html",),
    ),
    Entry(
        slug="unsynced_init",
        title="Ranks started from different weights",
        contexts=(),
        fixes=(Fix("Seed identically on every rank before building the model", "torch.manual_seed(0)"),
               Fix("Or broadcast rank 0's weights (DDP does it when it wraps the model)",
                   "for p in model.parameters():\n    dist.broadcast(p.data, src=0)")),
        sources=("https://pytorch.org/docs/stable/notes/ddp.html",),
    ),
    Entry(
        slug="params_diverged",
        title="Parameters diverged across ranks",
        contexts=(),
        fixes=(Fix("Average every gradient: wrap the model in DDP, and update on every rank every step",
                   "model = torch.nn.parallel.DistributedDataParallel(model)"),),
        sources=("https://pytorch.org/docs/stable/notes/ddp.html",),
    ),
    Entry(
        slug="buffers_differ",
        title="Buffers differ across ranks",
        severity=Severity.WARNING,
        contexts=(),
        fixes=(Fix("Synchronise BatchNorm statistics",
                   "model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)"),
               Fix("Or broadcast the buffers before saving or evaluating",
                   "for b in model.buffers():\n    dist.broadcast(b, src=0)")),
        sources=("https://pytorch.org/docs/stable/generated/torch.nn.SyncBatchNorm.html",),
    ),
    Entry(
        slug="same_batches",
        title="Every rank trains on the same batches",
        contexts=(),
        fixes=(Fix("Give each rank its shard with a DistributedSampler (and no shuffle=True on the loader)",
                   "loader = DataLoader(ds, sampler=DistributedSampler(ds), batch_size=32)"),),
        sources=("https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler",),
    ),
    Entry(
        slug="shards_overlap",
        title="The ranks' data shards overlap",
        contexts=(),
        fixes=(Fix("Build the sampler with the process group's world size and rank",
                   "DistributedSampler(ds, num_replicas=dist.get_world_size(), rank=dist.get_rank())"),),
        sources=("https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler",),
    ),
    Entry(
        slug="same_every_epoch",
        title="Every epoch sees the data in the same order",
        severity=Severity.WARNING,
        contexts=(),
        fixes=(Fix("Call set_epoch at the start of every epoch", "for epoch in range(epochs):\n    "
                   "sampler.set_epoch(epoch)\n    for batch in loader: ..."),),
        sources=("https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler",),
    ),
    # post-mortem of a job from its per-rank artifacts (nbdebug.dist.postmortem)
    Entry(
        slug="postmortem_primary",
        title="The failure that came first",
        contexts=(),
        fixes=(Fix("Fix this rank's error first: the other ranks' errors (timeouts, closed connections) follow "
                   "from it"),
               Fix("Reproduce it on one machine with the same data shard",
                   "python -m nbdebug torchrun -n 4 train.py   # or %%torchrun -n 4 in a notebook"),),
        sources=("https://pytorch.org/docs/stable/elastic/errors.html",
                 "https://github.com/pytorch/pytorch/issues/152623"),
    ),
    Entry(
        slug="postmortem_no_cause",
        title="Only consequences were found",
        contexts=(),
        fixes=(Fix("Look at the ranks that left no artifact: the one that crashed, hung or took another path is "
                   "among them"),
               Fix("Next time, record which collective each rank was in, and its stack",
                   "import nbdebug.dist\nnbdebug.dist.instrument('/shared/artifacts')  # before init_process_group"),),
        sources=("https://github.com/pytorch/pytorch/issues/152623",),
    ),
    Entry(
        slug="hang_divergence",
        title="Ranks stopped issuing the same collectives",
        contexts=(),
        fixes=(Fix("Look at what the missing ranks did instead (their stack): a collective inside `if rank == ...`, "
                    "an early `break`/`return`, fewer batches, or a slow step (checkpoint, data loading)"),
               Fix("Give every rank the same number of batches",
                   "sampler = DistributedSampler(ds, drop_last=True)"),
               Fix("Make mismatches raise at once while debugging", "TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun ..."),),
        sources=("https://docs.pytorch.org/tutorials/prototype/flight_recorder_tutorial.html",
                 "https://github.com/pytorch/pytorch/issues/152623"),
    ),
    Entry(
        slug="fr_collective_mismatch",
        title="Ranks issued a collective differently",
        contexts=(),
        fixes=(Fix("Make every rank pass tensors of the same shape and dtype to each collective (pad, or "
                   "all_gather the sizes first)"),
               Fix("Catch it where it happens", "TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun ..."),),
        sources=("https://docs.pytorch.org/tutorials/prototype/flight_recorder_tutorial.html",),
    ),
    Entry(
        slug="bad_node",
        title="One node stands out",
        contexts=(),
        fixes=(Fix("Drain the node and rerun without it", "scontrol update nodename=NODE state=drain reason=nbdebug"),
               Fix("Exclude it from the next job", "sbatch --exclude=NODE job.sh"),
               Fix("Check its GPUs and network", "nvidia-smi -q -d ECC,PAGE_RETIREMENT; dmesg | grep -i xid"),),
        sources=("https://docs.nvidia.com/deploy/xid-errors/index.html",
                 "https://slurm.schedmd.com/scontrol.html"),
    ),
    Entry(
        slug="postmortem_gaps",
        title="Artifacts missing to say more",
        severity=Severity.INFO,
        contexts=(),
        fixes=(Fix("Call instrument() at the top of the training script next time",
                   "import nbdebug.dist\nnbdebug.dist.instrument('/shared/artifacts')  # before init_process_group"),),
        sources=("https://docs.pytorch.org/tutorials/prototype/flight_recorder_tutorial.html",),
    ),
)

THRESHOLDS: tuple[Threshold, ...] = (
    Threshold("straggler_lateness", 0.10,
              "a rank that reaches the collectives later than the first rank by more than 10% of the median step "
              "time is a straggler (everyone else waits for it)", "nbdebug heuristic"),
    Threshold("straggler_min_ms", 5.0, "and by more than 5 ms: below that, arrival order is scheduling noise",
              "nbdebug measurement (gloo on one host)"),
    Threshold("straggler_step_ratio", 1.25,
              "without Flight Recorder times: a rank whose median step is 25% slower than the median rank",
              "nbdebug heuristic"),
    Threshold("loss_outlier_ratio", 3.0, "a rank whose loss is 3x away from the median loss at the same step",
              "nbdebug heuristic"),
    Threshold("identical_loss_steps", 2.0,
              "losses bit-identical on every rank for 2+ steps: every rank trains on the same batches (no "
              "DistributedSampler)", "nbdebug heuristic"),
)

ENTRIES += (
    Entry(
        slug="process_group_missing",
        title="A distributed call ran without a process group",
        summary=("The code called a torch.distributed operation (or a layer that uses one: SyncBatchNorm, a "
                 "DistributedSampler without num_replicas, DDP) in a process where init_process_group never ran."),
        keywords=("process group has not been initialized", "process group is not initialized", "master_addr expected",
                  "master_port expected", "keyerror: 'rank'", "keyerror: 'local_rank'", "keyerror: 'world_size'",
                  "keyerror: 'master_", "keyerror: 'local_world_size'"),
        patterns=(r"(?i:default process group (?:has not been|is not) initialized)",
                  # os.environ read for a variable only a launcher sets: the script run without torchrun
                  r"(?m)^KeyError: ['\"](?:LOCAL_RANK|RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|MASTER_ADDR|MASTER_PORT)['\"]"
                  r"[ \t]*$",
                  # env:// rendezvous in a process no launcher started: torchrun sets MASTER_ADDR / MASTER_PORT
                  r"environment variable MASTER_(?:ADDR|PORT) expected, but not set"),
        priority=60,
        causes=("A training script written for torchrun / a launcher started with plain python (one process, no "
                "process group; os.environ has no RANK / LOCAL_RANK / WORLD_SIZE).",
                "SyncBatchNorm or a distributed sampler left in a model or config that now runs on one GPU or the CPU.",
                "A config whose launcher is set to none while the model still uses distributed layers (mmcv/mmseg's "
                "--launcher)."),
        fixes=(Fix("Launch with the launcher the script expects", "torchrun --nproc_per_node=1 train.py ..."),
               Fix("Or, for one process, use the plain layers",
                   "model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)  # only under torchrun;\n"
                   "# on one process use nn.BatchNorm2d (norm_cfg=dict(type='BN') in mm* configs)")),
        first_step="Launch the script the way it expects (torchrun, or the project's dist launcher) so that "
        "init_process_group runs; for one process, replace SyncBatchNorm / distributed samplers with their "
        "plain versions.",
        sources=("https://pytorch.org/docs/stable/distributed.html#initialization",
                 "https://pytorch.org/docs/stable/generated/torch.nn.SyncBatchNorm.html"),
    ),
    Entry(
        slug="store_unreachable",
        title="A process could not reach the rendezvous store (MASTER_ADDR:MASTER_PORT)",
        summary=("This process tried to connect to the rendezvous store that rank 0 serves on MASTER_ADDR:MASTER_PORT "
                 "and timed out or was refused: rank 0 did not start (or died), the address or port is wrong, or the "
                 "network between them (interface, firewall, a container's address) does not carry it."),
        keywords=("while trying to connect to", "client socket has failed to connect", "failed to connect/validate",
                  "connect() timed out", "connectfullmesh failed"),
        patterns=(r"The client socket has timed out after \d+m?s while trying to connect to",
                  # errno 110 / 111: timed out / refused (not Windows' harmless errno 99 / 10049 warnings)
                  r"The client socket has failed to connect to (?:any network address of|[^\n]{1,120}\(errno: 11[01]\b)",
                  r"TCP client failed to connect/validate to host",
                  r"connect\(\) timed out\. Original timeout was \d+",
                  r"Gloo connectFullMesh failed"),
        priority=54,
        causes=("Rank 0 never started its store or crashed before the others connected (its own log shows why).",
                "MASTER_ADDR / MASTER_PORT differ between processes, or name an address this node cannot reach (a "
                "container's or a VPN's address, a hostname that resolves elsewhere).",
                "A firewall or the wrong network interface between nodes (GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME)."),
        fixes=(Fix("Check that the store answers from this node", "nc -zv $MASTER_ADDR $MASTER_PORT"),
               Fix("On one machine, use the loopback address and a free port",
                   "torchrun --standalone --nproc_per_node=2 train.py  # or --master_addr=127.0.0.1 --master_port=29501")),
        first_step="Check that rank 0 is running and its store answers from this node (nc -zv $MASTER_ADDR "
        "$MASTER_PORT); on one machine use 127.0.0.1 (or torchrun --standalone), across nodes the interface and "
        "firewall between them.",
        sources=("https://pytorch.org/docs/stable/elastic/run.html",
                 "https://pytorch.org/docs/stable/distributed.html#environment-variable-initialization"),
    ),
)

ENTRIES += (
    Entry(
        slug="distributed_call_failed",
        title="A torch.distributed call failed",
        summary=("{exc_type} was raised inside torch.distributed[[ ({where})]][[, in the call at {user_where}]]: the "
                 "process group, the launcher's settings or another rank made the collective or setup call fail."),
        causes=("The ranks do not agree: another rank failed first, or called a different collective, or with "
                "tensors of other sizes.",
                "The launcher's settings (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK) or the network between the nodes.",
                "A backend that does not support the call or the tensors' device (gloo with CUDA tensors, NCCL on CPU)."),
        fixes=(Fix("Rerun with the distributed debug logs", "TORCH_DISTRIBUTED_DEBUG=DETAIL TORCH_CPP_LOG_LEVEL=INFO "
                   "NCCL_DEBUG=INFO torchrun ... 2>&1 | tee run.log"),),
        first_step="Find the first rank that failed (its error comes before the others' in the logs) and rerun with "
        "TORCH_DISTRIBUTED_DEBUG=DETAIL and NCCL_DEBUG=INFO: the detail names the call and the rank that disagreed.",
        sources=("https://pytorch.org/docs/stable/distributed.html#debugging-torch-distributed-applications",),
        extra={"family": "distributed"},
    ),
)

ENTRIES += (
    Entry(
        slug="distributed_wrapper_raised",
        title="DeepSpeed (or its integration) refused the run's setup",
        summary=("{exc_type} was raised inside {package}'s own code[[ ({where})]][[, called from the code at "
                 "{user_where}]]: the distributed-training wrapper checked its configuration or the model it wraps, "
                 "and refused them."),
        causes=("A DeepSpeed config value that does not fit the run (a batch size or precision left unset or "
                "disagreeing with the Trainer's or accelerate's arguments, a stage's option, an empty module name to "
                "wrap).",
                "Something ZeRO does not allow: parameters of mixed dtypes or devices gathered together, a module "
                "added or changed after deepspeed.initialize / accelerator.prepare, weights touched while partitioned.",
                "The model, optimizer or DataLoader passed to deepspeed.initialize or accelerator.prepare, in an order "
                "or a state the wrapper does not expect."),
        fixes=(Fix("Print the configuration DeepSpeed was given, as it read it",
                   "import json\nprint(json.dumps(ds_config, indent=2, default=str))"),
               Fix("Rerun on one GPU without DeepSpeed: if the error goes, it is the wrapper's setup"),),
        first_step=("Read the message DeepSpeed raised at the last frame of the traceback: it names the config value, "
                    "the parameter or the step it refused; fix that in the DeepSpeed config (or the accelerate / "
                    "Trainer arguments that fill it) or in what is passed to deepspeed.initialize / "
                    "accelerator.prepare, and rerun on one GPU without DeepSpeed to confirm the rest of the run is "
                    "fine."),
        sources=("https://www.deepspeed.ai/docs/config-json/",
                 "https://huggingface.co/docs/accelerate/usage_guides/deepspeed",
                 "https://huggingface.co/docs/transformers/main/en/deepspeed"),
        extra={"family": "distributed"},
    ),
)

# the first step, with the assert's place
LAUNCH_CHECK_STEP = ("Read the condition at {where}: change the setting it checks (to a multiple of the world size, "
                     "for one) or launch the number of processes it requires (torchrun --nproc_per_node / accelerate "
                     "launch --num_processes).")
ENTRIES += (
    Entry(
        slug="distributed_launch_check",
        title="The script's check on how it was launched failed",
        summary=("The assert at {where} checks what the launcher set ({condition}): the run was started with another "
                 "number of processes (or without the launcher) than the script requires."),
        causes=("A setting that must divide by the number of processes (gradient accumulation steps, the batch "
                "size) does not, for the number of processes launched.",
                "The script run with python instead of torchrun / accelerate launch (one process, no process group), "
                "or with --nproc_per_node / --num_processes other than it expects."),
        fixes=(Fix("Launch the number of processes the script expects",
                   "torchrun --nproc_per_node=<N> train.py ...   # or: accelerate launch --num_processes <N> ..."),),
        first_step=LAUNCH_CHECK_STEP.format(where="the failing assert"),
        sources=("https://pytorch.org/docs/stable/elastic/run.html",),
        extra={"family": "distributed"},
    ),
)
