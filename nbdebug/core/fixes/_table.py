"""The error knowledge, as data: one ``Entry`` per category.

Each entry says how to recognise the error (regular expressions for every wording PyTorch used across
versions, with cheap lowercase ``keywords`` that must appear before any regex runs), which facts to pull out
of the message (named groups, converted by name), and what to tell the user: a title, a summary template,
ranked causes, fixes with short code, and the first step.  ``sources`` records where the knowledge came from
(the seed playbooks in ``../shared/seeds`` and the public threads whose texts are in ``tests/data/errors``).

Choosing between entries when a long log matches several (see ``_explain.choose``): the highest ``priority``
wins.  Priorities encode "root cause before consequence": a CUDA device-side assert or OOM explains the NCCL
errors and the torchrun ``ChildFailedError`` that follow it, so those wrappers have the lowest priorities and
only win when nothing more specific is in the text.  A ``ChildFailedError`` log that contains the failing
rank's ``CUDA out of memory`` is therefore diagnosed as ``cuda_oom`` (the launcher is noted in the facts).

Summary templates use ``{fact}`` placeholders (``{fact:bytes}`` formats a byte count); a ``[[...]]`` segment is
dropped when a fact it names is missing, so one template serves every wording era.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nbdebug.core.fixes._diagnosis import Fix

__all__ = ["Entry", "TABLE", "SIZE", "SLUGS"]

# A size as PyTorch prints it: "20.00 MiB", "0 bytes", "1024.00 KiB".
SIZE = r"[\d.,]+ (?:[KMGT]i?B|bytes?|B)"
_SHAPE = r"[\[(][-\d, ]*[\])]"

SEED_GPU = "seed: gpu-tpu-common-errors.md"
SEED_RECIPES = "seed: debugging-recipes.md"
SEED_TROUBLE = "seed: pytorch-troubleshooting.md"
SEED_DIST = "seed: debug-distributed.md"
SEED_TRAINING = "seed: training-failures-troubleshooting.md"


@dataclass(frozen=True)
class Entry:
    """One category of error and what to say about it."""

    slug: str
    title: str
    summary: str
    keywords: tuple[str, ...]
    patterns: tuple[str, ...]
    causes: tuple[str, ...]
    fixes: tuple[Fix, ...]
    first_step: str
    sources: tuple[str, ...]
    priority: int = 50
    exception_types: tuple[str, ...] = ()
    # (regex with named groups, converter per group name) applied to the whole text once the entry is chosen
    facts: tuple[tuple[str, dict[str, str]], ...] = ()
    # facts that may occur many times (e.g. one line per rank): group name -> list of values
    repeated_facts: tuple[tuple[str, str, str], ...] = ()
    wrapper: bool = False
    extra: dict[str, str] = field(default_factory=dict)
    # regexes over the raw text's traceback frames (which normalising drops), tried only when no message matched:
    # a paste cut off before its error line, or a frame layout that only this failure produces
    frames: tuple[str, ...] = ()


_CUDA_SYNC_FIX = Fix(
    "Re-run with synchronous kernel launches so the traceback points at the failing operation",
    "CUDA_LAUNCH_BLOCKING=1 python train.py",
)

TABLE: tuple[Entry, ...] = (
    # ------------------------------------------------------------------ CUDA runtime
    Entry(
        slug="cuda_oom",
        title="CUDA out of memory",
        summary=(
            "The GPU ran out of memory[[ while allocating {tried_to_allocate:bytes}]][[ on GPU {device}]]."
            "[[ The GPU has {total_capacity:bytes} in total and {free:bytes} was free.]]"
            "[[ PyTorch's tensors held {allocated_by_pytorch:bytes}]][[; its caching allocator reserved"
            " {reserved_by_pytorch:bytes}]][[, of which {reserved_but_unallocated:bytes} is cached but unused]]."
        ),
        keywords=("out of memory", "outofmemoryerror", "cuda runtime error", "cudaerrormemoryallocation"),
        patterns=(
            r"(?:CUDA|HIP) out of memory",
            r"cuda runtime error ?(?:\(2\))? ?: ?out of memory",
            r"CUDA error: ?out of memory",
            r"MPS backend out of memory",
            # the CUDA error number alone (2 = cudaErrorMemoryAllocation)
            r"cuda runtime error ?\(2\)",
            r"cudaErrorMemoryAllocation",
            r"THCudaCheck FAIL .*error=2 ?: ?out of memory",
            r"torch\.(?:cuda\.)?OutOfMemoryError",
        ),
        exception_types=("OutOfMemoryError",),
        priority=90,
        facts=(
            (rf"Tried to allocate (?P<tried_to_allocate>{SIZE})", {"tried_to_allocate": "bytes"}),
            (
                rf"\(GPU (?P<device>\d+); (?P<total_capacity>{SIZE}) total capacity; "
                rf"(?P<allocated_by_pytorch>{SIZE}) already allocated; (?P<free>{SIZE}) free;"
                rf"(?: (?P<reserved_by_pytorch>{SIZE}) reserved in total by PyTorch| (?P<cached>{SIZE}) cached)?",
                {"device": "int", "total_capacity": "bytes", "allocated_by_pytorch": "bytes", "free": "bytes",
                 "reserved_by_pytorch": "bytes", "cached": "bytes"},
            ),
            (
                rf"GPU (?P<device>\d+) has a total capac(?:i)?ty of (?P<total_capacity>{SIZE}) of which "
                rf"(?P<free>{SIZE}) is free",
                {"device": "int", "total_capacity": "bytes", "free": "bytes"},
            ),
            (rf"this process has (?P<process_memory>{SIZE}) memory in use", {"process_memory": "bytes"}),
            (
                rf"Of the allocated memory (?P<allocated_by_pytorch>{SIZE}) is allocated by PyTorch, and "
                rf"(?P<reserved_but_unallocated>{SIZE}) is reserved by PyTorch but unallocated",
                {"allocated_by_pytorch": "bytes", "reserved_but_unallocated": "bytes"},
            ),
        ),
        repeated_facts=((rf"Process (\d+) has ({SIZE}) memory in use", "other_processes", "pid_bytes"),),
        causes=(
            "The batch (or sequence length / image size) is too large for this GPU: activations grow with it.",
            "Memory kept alive between steps: losses or outputs stored with their graph (append loss.item(), not loss).",
            "Inference run without torch.no_grad() / torch.inference_mode(), so activations are kept for backward.",
            "Fragmentation: memory is cached by PyTorch but split into blocks too small for this request.",
            "Another process (or another notebook kernel) holds memory on the same GPU.",
        ),
        fixes=(
            Fix("Lower the batch size and keep the effective batch with gradient accumulation",
                "loss = criterion(model(x), y) / accum_steps\nloss.backward()\nif (step + 1) % accum_steps == 0:\n"
                "    optimizer.step(); optimizer.zero_grad(set_to_none=True)"),
            Fix("Keep numbers, not graphs, across steps", "losses.append(loss.item())  # not losses.append(loss)"),
            Fix("Run evaluation without building a graph", "with torch.inference_mode():\n    out = model(x)"),
            Fix("Use bf16 autocast and activation checkpointing",
                "with torch.autocast('cuda', dtype=torch.bfloat16):\n    out = model(x)\n"
                "# and torch.utils.checkpoint.checkpoint(block, h, use_reentrant=False) on big blocks"),
            Fix("Reduce fragmentation: let the allocator grow segments (set before the first CUDA allocation)",
                "import os\nos.environ['PYTORCH_CUDA_ALLOC_CONF'] = 'expandable_segments:True'"),
        ),
        extra={"wrapped_lines": "yes"},  # the long OOM message is often wrapped by terminals and issue trackers
        first_step="Halve the batch size; if it still fails on a later step rather than the first, look for "
        "tensors kept alive across iterations (a memory snapshot shows who holds the memory).",
        sources=(SEED_GPU, SEED_TROUBLE, SEED_RECIPES, "https://github.com/pytorch/pytorch/pull/13751",
                 "https://github.com/pytorch/pytorch/issues/16417"),
    ),
    Entry(
        slug="device_side_assert",
        title="CUDA device-side assert triggered",
        summary=(
            "An assertion failed inside a CUDA kernel[[ ({kernel_file})]][[: `{assertion}`]]. The CUDA context is "
            "now unusable: every later CUDA call in this process fails with the same error, so the kernel (or "
            "process) must be restarted. The Python line in the traceback may not be the operation that failed, "
            "because kernels run asynchronously."
        ),
        keywords=("device-side assert", "assertion", "device side assert", "cuda runtime error (59)",
                  "cuda runtime error (710)", "cuda error (710)", "cudaerrorassert"),
        patterns=(
            r"device-side assert triggered",
            r"device side assert triggered",
            # the CUDA error number alone (59 before CUDA 10, 710 since = cudaErrorAssert)
            r"(?:cuda runtime error|CUDA error) ?\((?:59|710)\)",
            r"cudaErrorAssert",
            r"\.cu:\d+: .*Assertion [`'].*[`'] failed",
        ),
        priority=95,
        facts=(
            (r"(?P<kernel_file>[\w/]+\.cu):\d+: (?P<kernel>[^\n:]+?)(?:\([^\n]*\))?(?: \[with[^\]]*\])?: "
             r"block: \[[\d,]+\], thread: \[[\d,]+\] Assertion [`'](?P<assertion>[^`'\n]+)[`'] failed",
             {"kernel_file": "basename", "kernel": "str", "assertion": "str"}),
        ),
        causes=(
            "A class label outside [0, num_classes) given to cross_entropy / nll_loss.",
            "A token id >= the embedding's num_embeddings (vocabulary size mismatch between tokenizer and model).",
            "An index out of range in indexing, gather, scatter or index_select.",
            "Targets outside [0, 1] given to binary_cross_entropy (or inputs that are not probabilities).",
        ),
        fixes=(
            Fix("Restart the kernel: the CUDA context cannot be recovered in this process", ""),
            Fix("Re-run the failing step on CPU to get a readable Python error",
                "model.cpu()\nout = model(x.cpu())\nloss = criterion(out, y.cpu())  # raises e.g. 'Target 7 is out of bounds.'"),
            _CUDA_SYNC_FIX,
            Fix("Check label and index ranges before the loss / embedding",
                "assert 0 <= y.min() and y.max() < num_classes, (y.min(), y.max(), num_classes)\n"
                "assert ids.max() < model.embed.num_embeddings"),
        ),
        first_step="Restart the kernel, then run one batch on CPU (or with CUDA_LAUNCH_BLOCKING=1): the CPU "
        "error names the bad index or label directly.",
        sources=(SEED_GPU, "https://github.com/milesial/Pytorch-UNet/issues/258"),
    ),
    Entry(
        slug="illegal_memory_access",
        title="CUDA illegal memory access",
        summary=(
            "A CUDA kernel read or wrote memory outside any allocation. Like a device-side assert this poisons "
            "the CUDA context (restart the kernel), and the reported Python line may be unrelated because "
            "kernels run asynchronously."
        ),
        keywords=("illegal memory access", "misaligned address", "illegal address", "illegal instruction",
                  "cuda runtime error (700)", "cuda error (700)", "cudaerrorillegaladdress"),
        patterns=(
            r"an illegal memory access was encountered",
            r"cuda runtime error \((?:77|74)\)",
            r"CUDA error: ?misaligned address",
            r"error=74 : misaligned address",
            r"CUDA_ERROR_ILLEGAL_ADDRESS",
            r"(?:cuda runtime error|CUDA error) ?\((?:700|716)\)",
            r"cudaErrorIllegalAddress",
            r"an illegal instruction was encountered",
        ),
        priority=94,
        causes=(
            "A bug in a custom CUDA kernel or extension (out-of-bounds indexing).",
            "Tensors on different GPUs or non-contiguous inputs passed to a custom op that assumes otherwise.",
            "A memory problem masked as this error: near-OOM conditions, or a library (cuDNN/cuBLAS/NCCL) bug.",
        ),
        fixes=(
            _CUDA_SYNC_FIX,
            Fix("Run under compute-sanitizer to find the faulty kernel and address",
                "compute-sanitizer --tool memcheck python train.py"),
            Fix("Make inputs to custom ops contiguous and on the op's device", "x = x.contiguous().to(device)"),
        ),
        first_step="Restart, then re-run with CUDA_LAUNCH_BLOCKING=1 to find the kernel that faults; if it is a "
        "custom extension, run it under compute-sanitizer.",
        sources=(SEED_GPU, "https://github.com/zai-org/CodeGeeX/issues/160"),
    ),
    Entry(
        slug="cublas_error",
        title="cuBLAS error",
        summary="A cuBLAS matrix-multiply call failed[[ with {status}]][[ in `{call}`]].",
        keywords=("cublas",),
        patterns=(r"CUBLAS_STATUS_\w+", r"(?i:cublas) (?:runtime )?error"),
        priority=85,
        facts=((r"(?P<status>CUBLAS_STATUS_\w+)(?: when calling [`'](?P<call>\w+))?", {"status": "str", "call": "str"}),),
        causes=(
            "Not enough GPU memory for cuBLAS's workspace or handle (CUBLAS_STATUS_ALLOC_FAILED / NOT_INITIALIZED).",
            "An earlier asynchronous error (out-of-range index, device-side assert) surfacing at the next matmul.",
            "A PyTorch build whose CUDA / cuBLAS does not support this GPU or dtype (EXECUTION_FAILED, NOT_SUPPORTED).",
            "Shapes or dtypes the kernel cannot handle (e.g. a mismatch between a layer and its input).",
        ),
        fixes=(
            _CUDA_SYNC_FIX,
            Fix("Run the same step on CPU: shape, dtype and index errors become readable", "model.cpu()(x.cpu())"),
            Fix("Free memory before the call if the status is ALLOC_FAILED", "del big_tensor\ntorch.cuda.empty_cache()"),
            Fix("Install a PyTorch build for your CUDA version and GPU", "pip install torch --index-url https://download.pytorch.org/whl/cu124"),
        ),
        first_step="Re-run with CUDA_LAUNCH_BLOCKING=1 (or the batch on CPU): cuBLAS errors are often a "
        "different error reported late.",
        sources=(SEED_GPU, "https://github.com/jadore801120/attention-is-all-you-need-pytorch/issues/193"),
    ),
    Entry(
        slug="cudnn_error",
        title="cuDNN error",
        summary="A cuDNN call (convolution, RNN or batch norm) failed[[ with {status}]].",
        keywords=("cudnn", "unable to find an engine"),
        patterns=(r"CUDNN_STATUS_\w+", r"[Cc]u[Dd][Nn][Nn] error", r"Unable to find a valid cuDNN algorithm",
                  r"GET was unable to find an engine to execute this computation"),
        priority=84,
        facts=((r"(?P<status>CUDNN_STATUS_\w+)", {"status": "str"}),),
        causes=(
            "GPU memory nearly exhausted: cuDNN could not allocate its workspace (INTERNAL_ERROR / ALLOC_FAILED).",
            "An earlier asynchronous CUDA error surfacing in the next cuDNN call.",
            "cuDNN / CUDA / driver versions that do not match the PyTorch build, or no visible GPU.",
            "A non-contiguous or unusual input layout cuDNN does not support (NOT_SUPPORTED).",
        ),
        fixes=(
            _CUDA_SYNC_FIX,
            Fix("Turn off cuDNN autotuning, or cuDNN itself, to see whether the error follows",
                "torch.backends.cudnn.benchmark = False\n# torch.backends.cudnn.enabled = False  # to isolate"),
            Fix("Reduce memory pressure (smaller batch) and make inputs contiguous", "x = x.contiguous()"),
        ),
        first_step="Re-run with a smaller batch and torch.backends.cudnn.benchmark = False; if it persists, "
        "check that the PyTorch build matches the installed driver.",
        sources=(SEED_GPU, "https://github.com/yassouali/pytorch-segmentation/issues/77"),
    ),
    # ------------------------------------------------------------------ distributed
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
    Entry(
        slug="invalid_device_ordinal",
        title="Invalid CUDA device ordinal",
        summary="The code asked for a GPU index that does not exist in this process[[ (cuda:{requested_device})]].",
        keywords=("invalid device ordinal", "invalid device id", "device < num_gpus", "invalid device",
                  "cuda runtime error (101)", "cuda error (101)"),
        patterns=(
            r"invalid device ordinal",
            r"(?:cuda runtime error|CUDA error) ?\(101\)",
            r"cudaErrorInvalidDevice\b",
            r"Invalid device id",
            r"device >= 0 && device < num_gpus",
            r"CUDA_ERROR_INVALID_DEVICE",
        ),
        priority=80,
        facts=((r"cuda:(?P<requested_device>\d+)", {"requested_device": "int"}),),
        causes=(
            "A hard-coded device like 'cuda:1' on a machine (or CUDA_VISIBLE_DEVICES setting) with fewer GPUs.",
            "torchrun started more processes per node than GPUs, so local_rank >= device count.",
            "CUDA_VISIBLE_DEVICES renumbers GPUs from 0; indices refer to the visible list, not physical ids.",
        ),
        fixes=(
            Fix("Pick the device from what is visible", "n = torch.cuda.device_count()\ndevice = torch.device('cuda', local_rank % n)"),
            Fix("Start one process per visible GPU", "torchrun --nproc_per_node=$(nvidia-smi -L | wc -l) train.py"),
        ),
        first_step="Print torch.cuda.device_count() and CUDA_VISIBLE_DEVICES next to the index you request; "
        "the index must be smaller than the count.",
        sources=(SEED_DIST, "https://github.com/microsoft/SimXNS/issues/2"),
    ),
    # ------------------------------------------------------------------ tensors
    Entry(
        slug="device_mismatch",
        title="Tensors on different devices",
        summary="An operation received tensors on different devices[[ ({device_a} and {device_b})]][[ in {op}]].",
        keywords=("device", "backend", "weight type", "numpy", "but expected it to be on gpu", "expected object of type"),
        patterns=(
            r"Expected all tensors to be on the same device",
            r"Expected object of backend \w+ but got backend \w+",
            r"Expected object of type torch\.(?:cuda\.\w+Tensor but found type torch\.(?!cuda)|(?!cuda)\w+Tensor but found type torch\.cuda\.)",
            r"Expected object of device type \w+ but got device type \w+",
            r"Input type \(torch\.cuda\.\w+\) and weight type \(torch\.(?!cuda)\w+\)",
            r"Input type \(torch\.(?!cuda)\w+\) and weight type \(torch\.cuda\.\w+\)",
            r"Tensor on device \S+ is not on the expected device \S+",
            r"can't convert (?:cuda|mps|xla):?\d* device type tensor to numpy",
            r"indices should be either on cpu or on the same device as the indexed tensor",
            r"to have the same device as tensor for argument",
            r"is on CPU, but expected (?:it|them) to be on GPU",
            r"Input and (?:parameter|hidden) tensors are not at the same device",
            r"Input type \(MPS\w*\) and weight type \(torch\.\w+\)",
            r"Input type \(torch\.\w+\) and weight type \(MPS\w*\)",
            r"must be on the current device",
            r"Expected a '\w+' device type for generator but found '\w+'",
            r"expected device \S+ but got device \S+",
            r"to have \w+ Backend, but got tensor with \w+ Backend",
            # DataParallel's wordings: replicas must start from device_ids[0]
            r"all tensors must be on devices\[0\]",
            # MPS: an input (or buffer) that never moved to the mps device
            r"Placeholder storage has not been allocated on MPS device",
            r"must have its parameters and buffers on device \S+ \(device_ids\[0\]\) but found one of them on device",
        ),
        priority=62,
        facts=(
            (r"found at least two devices, (?P<device_a>[\w:]+) and (?P<device_b>[\w:]+)!(?: \(when checking argument for "
             r"argument (?P<argument>\w+) in method (?P<op>\w+)\))?", {"device_a": "str", "device_b": "str", "argument": "str", "op": "str"}),
            (r"Expected object of backend (?P<device_a>\w+) but got backend (?P<device_b>\w+) for argument #\d+ '(?P<argument>\w+)'",
             {"device_a": "str", "device_b": "str", "argument": "str"}),
            (r"Input type \((?P<device_a>torch\.[\w.]+)\) and weight type \((?P<device_b>torch\.[\w.]+)\)",
             {"device_a": "tensor_device", "device_b": "tensor_device"}),
            (r"Tensor on device (?P<device_a>\S+) is not on the expected device (?P<device_b>[^\s!]+)",
             {"device_a": "str", "device_b": "str"}),
            (r"found input tensor at (?P<device_a>[\w:]+) and (?:parameter|hidden) tensor at (?P<device_b>[\w:]+)",
             {"device_a": "str", "device_b": "str"}),
            (r"expected device (?P<device_a>[\w:]+) but got device (?P<device_b>[\w:]+)", {"device_a": "str", "device_b": "str"}),
            (r"but device (?P<device_a>\d+) does not equal (?P<device_b>\d+)(?: \(while checking arguments for (?P<op>\w+)\))?",
             {"device_a": "cuda_index", "device_b": "cuda_index", "op": "str"}),
        ),
        causes=(
            "The model was moved to the GPU but the batch was not (or the other way round).",
            "A tensor created inside forward() without device= (torch.zeros(...), torch.arange(...)).",
            "A submodule or buffer created after model.to(device), or stored as a plain tensor attribute "
            "instead of register_buffer.",
            "A layer created inside forward(), so it never moves with the model.",
        ),
        fixes=(
            Fix("Move the batch to the model's device", "device = next(model.parameters()).device\nx, y = x.to(device), y.to(device)"),
            Fix("Create tensors on the device of an input", "mask = torch.ones(n, device=x.device)"),
            Fix("Register constant tensors as buffers so .to() moves them", "self.register_buffer('pos', torch.arange(n))"),
            Fix("Bring results to CPU before numpy", "arr = t.detach().cpu().numpy()"),
        ),
        first_step="Print the .device of the inputs and of next(model.parameters()) right before the failing "
        "line; move the odd one.",
        sources=(SEED_GPU, "https://github.com/nunchux-ai/nunchaku/issues/805"),
    ),
    Entry(
        slug="shape_mismatch",
        title="Tensor shapes do not match",
        summary="{shape_detail}",
        keywords=("shape", "size", "dimension", "channels", "reduction dim", "batch_size", "broadcast", "input_size",
                  "multi-target", "mat1", "matmul", "hidden", "dimensional", "indices", "dims", "per channel",
                  "should contain", "must be a matrix"),
        patterns=(
            r"mat1 and mat2 shapes cannot be multiplied",
            r"size mismatch, m1: \[",
            r"The size of tensor a \(\d+\) must match the size of tensor b \(\d+\)",
            r"Given groups=\d+, weight of size",
            r"expected input\[[\d, ]+\] to have \d+ channels",
            r"Expected \d+D \(unbatched\) or \d+D \(batched\) input to \w+",
            r"Sizes of tensors must match except in dimension",
            r"stack expects each tensor to be equal size",
            r"shape '\[[-\d, ]*\]' is invalid for input of size \d+",
            r"Expected input batch_size \(\d+\) to match target batch_size \(\d+\)",
            r"Target size \(torch\.Size\(\[[\d, ]*\]\)\) must be the same as input size",
            r"The expanded size of the tensor \(\d+\) must match the existing size",
            r"output with shape \[[\d, ]*\] doesn't match the broadcast shape",
            r"Dimension out of range \(expected to be in range of",
            r"input\.size\(-1\) must be equal to input_size",
            r"Given normalized_shape=\[",
            r"0D or 1D target tensor expected, multi-target not supported",
            r"a and b must have same reduction dim",
            r"Attempting to broadcast a dimension of length \d+",
            r"mat1 dim 1 must match mat2 dim 0",
            r"both arguments to matmul need to be at least 1D",
            r"Expected hidden(?:\[\d\])? size \(",
            r"The shape of the mask \[[\d, ]*\] at index \d+ does not match the shape of the indexed tensor",
            r"Kernel size can't be greater than actual input size",
            r"inconsistent tensor size",
            r"sizes do not match",
            r"Output size is too small",
            r"Using a target size \(torch\.Size\(\[[\d, ]*\]\)\) that is different to the input size",
            r"Expected \d+-dimensional input for \d+-dimensional weight",
            r"too many indices for tensor of dimension \d+",
            r"input must have \d+ dimensions, got \d+",
            r"number of dims don't match in permute",
            r"Expected target size [\[(][\d, ]*[\])], got (?:torch\.Size\()?\[[\d, ]*\]",
            r"Expected size for first two dimensions of batch2 tensor to be",
            r"batch2_sizes\[0\] == bs && batch2_sizes\[1\] == contraction_size",
            r"Expected tensor to have size \d+ at dimension \d+, but got size \d+",
            r"Tensors must have same number of dimensions: got \d+ and \d+",
            r"shape mismatch: (?:value tensor of shape|objects cannot be broadcast)",
            r"number of dimensions in the tensor input does not match the length of the desired ordering",
            r"multi-target not supported",
            r"Expected more than 1 value per channel when training",
            r"size mismatch \(got input: \[[\d, ]*\], target: \[[\d, ]*\]\)",
            r"running_(?:mean|var) should contain \d+ elements not \d+",
            r"\bself must be a matrix\b",
            r"Trying to create tensor with negative dimension",
        ),
        priority=58,
        facts=(
            (r"mat1 and mat2 shapes cannot be multiplied \((?P<left_shape>\d+x\d+) and (?P<right_shape>\d+x\d+)\)",
             {"left_shape": "shape", "right_shape": "shape"}),
            (r"size mismatch, m1: (?P<left_shape>\[[\d x]+\]), m2: (?P<right_shape>\[[\d x]+\])",
             {"left_shape": "shape", "right_shape": "shape"}),
            (r"The size of tensor a \((?P<size_a>\d+)\) must match the size of tensor b \((?P<size_b>\d+)\) at "
             r"non-singleton dimension (?P<dim>\d+)", {"size_a": "int", "size_b": "int", "dim": "int"}),
            (r"weight of size (?P<weight_shape>\[[\d, ]+\]), expected input(?P<input_shape>\[[\d, ]+\]) to have "
             r"(?P<expected_channels>\d+) channels, but got (?P<got_channels>\d+) channels",
             {"weight_shape": "shape", "input_shape": "shape", "expected_channels": "int", "got_channels": "int"}),
            (r"Expected \d+D \(unbatched\) or \d+D \(batched\) input to (?P<op>\w+), but got input of size: (?P<input_shape>\[[\d, ]*\])",
             {"op": "str", "input_shape": "shape"}),
            (r"Sizes of tensors must match except in dimension (?P<dim>\d+)\. Expected size (?P<size_a>\d+) but got "
             r"size (?P<size_b>\d+) for tensor number (?P<tensor_index>\d+)",
             {"dim": "int", "size_a": "int", "size_b": "int", "tensor_index": "int"}),
            (r"stack expects each tensor to be equal size, but got (?P<left_shape>\[[\d, ]*\]) at entry \d+ and "
             r"(?P<right_shape>\[[\d, ]*\]) at entry \d+", {"left_shape": "shape", "right_shape": "shape"}),
            (r"shape '(?P<target_shape>\[[-\d, ]*\])' is invalid for input of size (?P<numel>\d+)",
             {"target_shape": "shape", "numel": "int"}),
            (r"Expected input batch_size \((?P<input_batch>\d+)\) to match target batch_size \((?P<target_batch>\d+)\)",
             {"input_batch": "int", "target_batch": "int"}),
            (r"a and b must have same reduction dim, but got (?P<left_shape>\[[\d, ]*\]) X (?P<right_shape>\[[\d, ]*\])",
             {"left_shape": "shape", "right_shape": "shape"}),
        ),
        causes=(
            "A layer's configured size (in_features, in_channels, hidden size) does not match what the previous "
            "layer produces.",
            "A missing or extra dimension: no batch dimension, a channel dimension in the wrong place, a forgotten "
            "flatten / view / permute.",
            "Inputs of different sizes in one batch (variable-length sequences, grayscale and RGB images mixed).",
            "Logits and targets with different batch or class layouts given to a loss.",
        ),
        fixes=(
            Fix("Print shapes at layer boundaries to find where they diverge",
                "for name, m in model.named_modules():\n"
                "    m.register_forward_hook(lambda m, i, o, name=name: print(name, [t.shape for t in i], getattr(o, 'shape', None)))"),
            Fix("Let PyTorch infer the input size of the first Linear after a flatten", "self.head = nn.LazyLinear(num_classes)"),
            Fix("Write the shapes you expect next to the code and assert them", "assert x.shape == (B, C, H, W), x.shape  # (B, C, H, W)"),
        ),
        first_step="Compare the shapes in the message with the configured size of the layer that raised and "
        "with the output shape of the layer before it.",
        sources=(SEED_RECIPES, SEED_TRAINING, "https://pytorch.org/docs/stable/notes/broadcasting.html"),
        extra={"shape_detail_default": "Two tensors had shapes that this operation cannot combine."},
    ),
    Entry(
        slug="view_non_contiguous",
        title="view() on a non-contiguous tensor",
        summary=(
            ".view() needs the tensor's memory layout to match the new shape, and this tensor is not contiguous "
            "(typically after transpose / permute / expand / slicing)."
        ),
        keywords=("view size is not compatible", "not contiguous"),
        patterns=(r"view size is not compatible with input tensor's size and stride", r"\binput is not contiguous\b"),
        priority=66,
        causes=("A .view() after .transpose(), .permute(), .t(), .expand() or a strided slice.",),
        fixes=(
            Fix("Use reshape (copies only when it must)", "x = x.reshape(B, -1)"),
            Fix("Or make the tensor contiguous first", "x = x.transpose(1, 2).contiguous().view(B, T, C)"),
        ),
        first_step="Replace the .view(...) in the failing line with .reshape(...).",
        sources=(SEED_TRAINING, SEED_RECIPES),
    ),
    Entry(
        slug="dtype_mismatch",
        title="Tensor dtypes do not match",
        summary="An operation received tensors of incompatible dtypes[[ ({dtype_a} and {dtype_b})]].",
        keywords=("dtype", "scalar type", "type (", "not implemented for", "can't be cast", "floating point",
                  "expected object of type"),
        patterns=(
            r"expected scalar type \w+ but found \w+",
            r"mat1 and mat2 must have the same dtype",
            r"expected m(?:at)?1 and m(?:at)?2 to have the same dtype",
            r"Expected query, key,? and value to have the same dtype",
            r"Input type \([^)]*\) and (?:weight|bias) type \([^)]*\) should be the same",
            r"Found dtype \w+ but expected \w+",
            r"expected target dtype to be",
            r"Expected tensor for argument #\d+ '\w+' to have (?:one of the following )?scalar types?",
            r"Expected object of scalar type \w+ but got scalar type \w+",
            r"Expected object of type torch\.(cuda\.)?(\w+)Tensor but found type torch\.(?(1)cuda\.)(?!\2Tensor)\w+Tensor",
            r"result type \w+ can't be cast to the desired output type \w+",
            r"Index put requires the source and destination dtypes match",
            r"Expected self\.dtype to be equal to src\.dtype",
            r"\"\w+\" not implemented for '\w+'",
            r"expected both vectors to have same dtype",
            r"Expected floating point type for target with class probabilities",
            r"only Tensors of floating point (?:and complex )?dtype can require gradients",
        ),
        priority=60,
        facts=(
            (r"expected scalar type (?P<dtype_a>\w+) but found (?P<dtype_b>\w+)", {"dtype_a": "str", "dtype_b": "str"}),
            (r"Expected object of scalar type (?P<dtype_a>\w+) but got scalar type (?P<dtype_b>\w+)(?: for argument #\d+ '(?P<argument>\w+)')?",
             {"dtype_a": "str", "dtype_b": "str", "argument": "str"}),
            (r"must have the same dtype, but got (?P<dtype_a>\w+) and (?P<dtype_b>\w+)", {"dtype_a": "str", "dtype_b": "str"}),
            (r"to have the same dtype, but got: (?P<dtype_a>\w+) != (?P<dtype_b>\w+)", {"dtype_a": "str", "dtype_b": "str"}),
            (r"Input type \((?P<dtype_a>[\w.]+)\) and (?:weight|bias) type \((?P<dtype_b>[\w.]+)\)", {"dtype_a": "str", "dtype_b": "str"}),
            (r"Found dtype (?P<dtype_a>\w+) but expected (?P<dtype_b>\w+)", {"dtype_a": "str", "dtype_b": "str"}),
            (r"got (?P<dtype_a>\w+) for the destination and (?P<dtype_b>\w+) for the source", {"dtype_a": "str", "dtype_b": "str"}),
            (r"expected target dtype to be [\w ]+, but got (?P<dtype_a>\w+)", {"dtype_a": "str"}),
            (r"\"(?P<op>\w+)\" not implemented for '(?P<dtype_a>\w+)'", {"op": "str", "dtype_a": "str"}),
            (r"result type (?P<dtype_a>\w+) can't be cast to the desired output type (?P<dtype_b>\w+)", {"dtype_a": "str", "dtype_b": "str"}),
        ),
        causes=(
            "Data loaded as float64 (numpy's default) or int64 fed to a float32 model.",
            "Class targets given as float (cross_entropy / nll_loss want int64 class indices).",
            "Half / bfloat16 tensors mixed with float32 outside autocast, or a half op run on CPU.",
            "Token ids stored as float, or float inputs to an Embedding.",
        ),
        fixes=(
            Fix("Convert inputs to the model's dtype", "x = x.to(next(model.parameters()).dtype)  # usually float32"),
            Fix("Class targets are int64", "y = y.long()"),
            Fix("Create tensors from numpy as float32", "x = torch.from_numpy(arr).float()"),
            Fix("Let autocast choose per-op dtypes instead of casting by hand",
                "with torch.autocast(device_type='cuda', dtype=torch.bfloat16):\n    out = model(x)"),
        ),
        first_step="Print the .dtype of each input of the failing operation and of the layer's weight; cast "
        "the odd one (features -> float32, class targets -> int64).",
        sources=(SEED_RECIPES, "https://pytorch.org/docs/stable/tensor_attributes.html"),
    ),
    # ------------------------------------------------------------------ autograd
    Entry(
        slug="inplace_autograd",
        title="A tensor needed for backward was modified in place",
        summary=(
            "backward() needs a value saved during the forward pass, but it was changed in place afterwards"
            "[[: a {tensor_type} of shape {tensor_shape}, output {output_index} of {grad_fn}]][[, now at version "
            "{version} instead of {expected_version}]]."
        ),
        keywords=("modified by an inplace operation",),
        patterns=(r"one of the variables needed for gradient computation has been modified by an inplace operation",),
        priority=70,
        facts=(
            (r"inplace operation: \[(?P<tensor_type>[\w.]+) \[(?P<tensor_shape>[\d, ]*)\]\], which is output "
             r"(?P<output_index>\d+) of (?P<grad_fn>\w+), is at version (?P<version>\d+); expected version "
             r"(?P<expected_version>\d+)",
             {"tensor_type": "str", "tensor_shape": "shape", "output_index": "int", "grad_fn": "str",
              "version": "int", "expected_version": "int"}),
        ),
        causes=(
            "An in-place op (x += ..., x.relu_(), x[idx] = ..., nn.ReLU(inplace=True)) on a tensor autograd saved.",
            "optimizer.step() (an in-place parameter update) between a forward and its backward.",
            "A tensor shared between steps and updated in place (e.g. a running state kept across batches).",
        ),
        fixes=(
            Fix("Use the out-of-place form", "x = x + y        # not x += y\nh = torch.relu(h)  # not h.relu_()"),
            Fix("Find the exact operation", "with torch.autograd.detect_anomaly():\n    loss.backward()"),
            Fix("Finish backward before stepping the optimizer", "loss.backward()\noptimizer.step()\noptimizer.zero_grad()"),
        ),
        first_step="Look for in-place operations on the tensor named in the message (its grad_fn tells which "
        "op produced it) and make them out-of-place.",
        sources=(SEED_RECIPES,),
    ),
    Entry(
        slug="leaf_inplace",
        title="In-place operation on a leaf tensor that requires grad",
        summary=(
            "A tensor you created with requires_grad=True (or a parameter) was modified in place while autograd "
            "is recording. Autograd forbids this because it would lose the tensor's history."
        ),
        keywords=("leaf variable",),
        patterns=(
            r"leaf [Vv]ariable that requires grad (?:is being|has been) used in an in-place operation",
            r"leaf variable has been moved into the graph interior",
        ),
        priority=71,
        causes=(
            "Initialising or updating weights by hand (w.add_(...), w[0] = ...) without torch.no_grad().",
            "A manual optimizer step written outside torch.no_grad().",
        ),
        fixes=(
            Fix("Wrap manual parameter updates in no_grad", "with torch.no_grad():\n    w -= lr * w.grad\n    w.grad.zero_()"),
            Fix("Initialise with the nn.init helpers", "nn.init.zeros_(layer.bias)"),
        ),
        first_step="Wrap the in-place update of the parameter in `with torch.no_grad():`.",
        sources=(SEED_RECIPES,),
    ),
    Entry(
        slug="backward_twice",
        title="backward() through the same graph twice",
        summary=(
            "backward() ran through a graph whose saved tensors were already freed by an earlier backward()."
        ),
        keywords=("backward through the graph a second time",),
        patterns=(r"Trying to backward through the graph a second time",),
        priority=70,
        causes=(
            "A tensor from a previous iteration (hidden state, running loss) is reused in this step's graph.",
            "Two losses sharing part of the graph, each with its own backward().",
            "Calling backward() twice on the same loss on purpose.",
        ),
        fixes=(
            Fix("Detach state carried across iterations", "h = h.detach()"),
            Fix("Sum the losses and call backward once", "(loss_a + loss_b).backward()"),
            Fix("Keep the graph only if you really need two passes", "loss.backward(retain_graph=True)"),
        ),
        first_step="Find the tensor carried from one iteration to the next (a hidden state, a running total) "
        "and .detach() it; add retain_graph=True only if two backward passes are intended.",
        sources=(SEED_RECIPES,),
    ),
    Entry(
        slug="no_grad_fn",
        title="backward() on a tensor that has no gradient history",
        summary=(
            "backward() (or autograd.grad) was called on a tensor that does not require grad, so there is no "
            "graph to differentiate."
        ),
        keywords=("does not require grad",),
        patterns=(
            r"element \d+ of (?:tensors|variables) does not require grad and does not have a grad_fn",
            r"One of the differentiated Tensors does not require grad",
        ),
        priority=70,
        causes=(
            "The loss was computed under torch.no_grad() / inference_mode (e.g. an evaluation context left open).",
            "The graph was cut: .detach(), .item(), .numpy(), or re-wrapping with torch.tensor(...).",
            "All parameters are frozen (requires_grad=False) or the model was not used to compute the loss.",
        ),
        fixes=(
            Fix("Compute the training loss outside no_grad", "model.train()\nloss = criterion(model(x), y)  # no torch.no_grad() here"),
            Fix("Check that something trainable feeds the loss", "print(loss.requires_grad, loss.grad_fn)\n"
                "print([n for n, p in model.named_parameters() if p.requires_grad][:5])"),
        ),
        first_step="Print loss.requires_grad and loss.grad_fn, then walk back to where they become False/None "
        "(a no_grad block, a detach, or frozen parameters).",
        sources=(SEED_RECIPES,),
    ),
    Entry(
        slug="target_out_of_bounds",
        title="A class label or index is out of range",
        summary=(
            "A value used as an index is outside the valid range[[: target {target}]][[ (index {index} for a dimension of "
            "size {size})]][[ with {num_classes} classes]][[; the embedding has {num_embeddings} rows and got index "
            "{index_max}]]."
        ),
        keywords=("out of bounds", "index out of range", "smaller than num_classes", "n_classes", "out of table"),
        patterns=(
            r"Target -?\d+ (?:is )?out of bounds",
            r"index out of range in self",
            r"index -?\d+ is out of bounds for dimension \d+ with size \d+",
            r"Class values must be smaller than num_classes",
            r"Assertion [`']cur_target >= 0 && cur_target < n_classes[`'] failed",
            r"Tried to access index \d+ out of table with \d+ rows",
        ),
        priority=65,
        facts=(
            (r"Target (?P<target>-?\d+) (?:is )?out of bounds", {"target": "int"}),
            (r"index (?P<index>-?\d+) is out of bounds for dimension (?P<dim>\d+) with size (?P<size>\d+)",
             {"index": "int", "dim": "int", "size": "int"}),
            (r"Tried to access index (?P<index>\d+) out of table with (?P<size>\d+) rows", {"index": "int", "size": "int"}),
        ),
        causes=(
            "Labels numbered 1..C instead of 0..C-1, or an ignore label (e.g. 255, -1) not passed as ignore_index.",
            "The model's output has fewer classes than the data (num_classes set too small).",
            "Token ids larger than the embedding's vocabulary (tokenizer and model disagree).",
        ),
        fixes=(
            Fix("Check the label range against the number of outputs",
                "print(y.min().item(), y.max().item(), logits.shape[1])  # need 0 <= y < C"),
            Fix("Shift 1-based labels, or ignore a void label", "y = y - 1\n# or: F.cross_entropy(logits, y, ignore_index=255)"),
            Fix("Size the embedding from the tokenizer", "model.resize_token_embeddings(len(tokenizer))  # HF models"),
        ),
        first_step="Print y.min(), y.max() and the number of classes (logits.shape[1] or num_embeddings): "
        "every label must be in [0, C).",
        sources=(SEED_GPU, SEED_RECIPES),
    ),
    Entry(
        slug="nan_loss",
        title="NaN / Inf in the loss or gradients",
        summary=(
            "A non-finite value (NaN or Inf) appeared[[: {function} returned NaN in its output {output_index}]]. "
            "Once a NaN reaches the weights every later step is NaN too."
        ),
        keywords=("nan", "non-finite", "inf", "invalid values", "loss scale"),
        patterns=(
            r"Function '\w+' returned nan values in its \d+(?:st|nd|rd|th) output",
            r"for gradients from .parameters. is non-finite",
            r"\b[Ll]oss (?:is|became|=) (?:nan|NaN|inf|Inf)\b",
            # training logs: "Train loss: nan", "loss=nan"
            r"\b[Ll]oss\s*[:=]\s*(?:nan|NaN|inf|Inf)\b",
            r"\bNaN (?:or Inf )?(?:loss|found in (?:the )?loss)",
            r"Detected (?:NaN|nan|inf|Inf) (?:in|values in) (?:the )?(?:loss|gradients?)",
            r"Loss became infinite or NaN",
            r"to satisfy the constraint \w+\([^\n]*?\), but found invalid values",
            r"Minimum loss scale reached",
            r"NaN or Inf found in input tensor",
            r"reducing loss scale to (?:0(?:\.0)?\b|\d(?:\.\d+)?e-\d{2,})",
            r"Non-finite values in `?[\w.]+",
        ),
        exception_types=("NonFiniteError",),
        priority=70,
        facts=(
            (r"Function '(?P<function>\w+)' returned nan values in its (?P<output_index>\d+)(?:st|nd|rd|th) output",
             {"function": "str", "output_index": "int"}),
        ),
        causes=(
            "Learning rate too high or no warmup: weights blow up, then overflow.",
            "log / sqrt / division of zero or negative values (log(0) = -inf, 0/0 = NaN).",
            "fp16 overflow (values beyond 65504) without a GradScaler; bf16 is more forgiving.",
            "NaN or Inf already in the input data or labels.",
        ),
        fixes=(
            Fix("Guard numerically fragile operations", "torch.log(p.clamp_min(1e-8))\nx / (x.norm(dim=-1, keepdim=True) + 1e-8)\nF.log_softmax(logits, -1)  # not log(softmax)"),
            Fix("Clip gradients and lower the learning rate", "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"),
            Fix("Find the first operation producing NaN (slow; one step only)", "with torch.autograd.detect_anomaly():\n    loss.backward()"),
            Fix("Check the data", "assert torch.isfinite(x).all() and torch.isfinite(y).all()"),
        ),
        first_step="Check the batch for NaN/Inf, then look at the named backward function's forward op "
        "(e.g. LogBackward0 -> a log of 0) and add an epsilon or a stable form.",
        sources=(SEED_RECIPES, SEED_GPU, SEED_TROUBLE),
    ),
    # ------------------------------------------------------------------ checkpoints
    Entry(
        slug="size_mismatch_state_dict",
        title="Checkpoint parameter shapes differ from the model",
        summary=(
            "The checkpoint's tensors do not fit the model[[: {param} is {checkpoint_shape} in the checkpoint but "
            "{model_shape} in the model]][[ ({mismatch_count} parameters differ)]]."
        ),
        keywords=("size mismatch for", "whose dimensions in the model"),
        patterns=(r"size mismatch for [\w.]+: copying a param (?:with shape|of torch\.Size)",
                  # 0.3-era wording
                  r"While copying the parameter named \"?[\w.]+\"?, whose dimensions in the model are"),
        priority=74,
        facts=(
            (r"size mismatch for (?P<param>[\w.]+): copying a param with shape (?P<checkpoint_shape>torch\.Size\(\[[\d, ]*\]\)) "
             r"from checkpoint, the shape in current model is (?P<model_shape>torch\.Size\(\[[\d, ]*\]\))",
             {"param": "str", "checkpoint_shape": "shape", "model_shape": "shape"}),
            # before 1.1 the message said "copying a param of ... where the shape is ... in current model"
            (r"size mismatch for (?P<param>[\w.]+): copying a param of (?P<checkpoint_shape>torch\.Size\(\[[\d, ]*\]\)) "
             r"from checkpoint, where the shape is (?P<model_shape>torch\.Size\(\[[\d, ]*\]\)) in current model",
             {"param": "str", "checkpoint_shape": "shape", "model_shape": "shape"}),
        ),
        repeated_facts=((r"size mismatch for ([\w.]+):", "mismatched_params", "str_list"),),
        causes=(
            "The model was built with different hyper-parameters (hidden size, layers, vocabulary) than the checkpoint.",
            "Fine-tuning on a different number of classes: the head does not fit (expected, drop the head's weights).",
        ),
        fixes=(
            Fix("Build the model with the checkpoint's configuration (save it next to the weights)",
                "model = Net(**ckpt['config'])\nmodel.load_state_dict(ckpt['model'])"),
            Fix("Load everything except the mismatched head",
                "sd = {k: v for k, v in sd.items() if not k.startswith('head.')}\nmodel.load_state_dict(sd, strict=False)"),
        ),
        first_step="Compare the listed shapes with your model's constructor arguments; rebuild the model with the "
        "checkpoint's configuration, or drop the classifier head when fine-tuning.",
        sources=(SEED_TROUBLE,),
    ),
    Entry(
        slug="state_dict_keys",
        title="Checkpoint keys do not match the model",
        summary=(
            "load_state_dict found[[ {missing_count} missing]][[ and {unexpected_count} unexpected]] key(s)"
            "[[ for {model_class}]].[[ {prefix_explanation}]]"
        ),
        keywords=("missing key(s)", "unexpected key(s)", "in state_dict"),
        patterns=(r"(?:Missing|Unexpected) key\(s\) in state_dict",
                  # 0.3-era wordings
                  r"unexpected key \"[\w.]+\" in state_dict",
                  r"missing keys in state_dict: "),
        priority=75,
        facts=((r"Error\(s\) in loading state_dict for (?P<model_class>\w+)", {"model_class": "str"}),),
        causes=(
            "A `module.` prefix: saved from DistributedDataParallel / DataParallel (model.state_dict() of the wrapper).",
            "An `_orig_mod.` prefix: saved from a torch.compile'd model.",
            "The model definition changed (renamed or added layers) since the checkpoint was saved.",
            "The checkpoint is a dict holding the state_dict (e.g. ckpt['model']), not the state_dict itself.",
        ),
        fixes=(
            Fix("Strip the wrapper prefix (one line)",
                "model.load_state_dict({k.removeprefix('module.'): v for k, v in sd.items()})"),
            Fix("Save unwrapped next time", "torch.save(model.module.state_dict(), path)  # DDP\n"
                "torch.save(model._orig_mod.state_dict(), path)  # torch.compile"),
            Fix("Look inside the checkpoint", "ckpt = torch.load(path, map_location='cpu')\nprint(list(ckpt)[:10])"),
        ),
        first_step="Compare the first missing and the first unexpected key: if they differ only by a prefix, "
        "strip it (one line, shown in the fixes).",
        sources=(SEED_TROUBLE,),
    ),
    Entry(
        slug="deserialize_cuda",
        title="Checkpoint saved on a GPU, loaded without CUDA",
        summary=(
            "The file stores tensors tagged with a CUDA device, and this process has no CUDA, so torch.load "
            "cannot put them back where they were saved."
        ),
        keywords=("attempting to deserialize", "deserialize object on a cuda device", "restore data location"),
        patterns=(
            r"Attempting to deserialize (?:object )?on a CUDA device",
            r"deserialize object on a CUDA device but torch\W?cuda\.is_available\(\) is False",
            # storages tagged with a device this process does not have (mps, an unknown backend)
            r"don't know how to restore data location of [\w.]+ \(tagged with \w+\)",
            r"Attempting to deserialize object on CUDA device \d+ but torch\.cuda\.device_count\(\) is \d+",
        ),
        priority=80,
        causes=(
            "The checkpoint was saved from GPU tensors and is being loaded on a CPU-only machine or build.",
            "CUDA_VISIBLE_DEVICES hides the GPU the checkpoint refers to.",
        ),
        fixes=(
            Fix("Map the storages to CPU (or to the device you have)", "sd = torch.load(path, map_location='cpu', weights_only=True)"),
            Fix("Then move the model where you want it", "model.load_state_dict(sd)\nmodel.to(device)"),
        ),
        first_step="Pass map_location='cpu' to torch.load.",
        sources=(SEED_TROUBLE,),
    ),
    Entry(
        slug="weights_only_unpickling",
        title="torch.load(weights_only=True) refused a pickled object",
        summary=(
            "Since PyTorch 2.6 torch.load only unpickles tensors and plain containers by default; this checkpoint "
            "contains another Python object[[ ({global_name})]], so loading stopped before running any of its code."
        ),
        keywords=("weights only load failed", "weightsunpickler", "unsupported global", "weights_only",
                  "can only build tensor"),
        patterns=(
            r"Weights only load failed",
            r"WeightsUnpickler error",
            r"Unsupported global: GLOBAL [\w.]+",
            r"Unsupported operand \d+",
            r"Can only build Tensor, Parameter,? OrderedDict or types allowlisted",
        ),
        priority=80,
        facts=((r"Unsupported global: GLOBAL (?P<global_name>[\w.]+)", {"global_name": "str"}),),
        causes=(
            "The whole model object (torch.save(model)) or a training-state object was saved, not a state_dict.",
            "The checkpoint holds config objects (argparse.Namespace, a dataclass, numpy scalars).",
            "An old checkpoint, loaded with PyTorch >= 2.6 where weights_only=True became the default.",
        ),
        fixes=(
            Fix("Allow the specific class, if you trust the file",
                "torch.serialization.add_safe_globals([MyConfig])\nckpt = torch.load(path, weights_only=True)"),
            Fix("If you trust the file completely", "ckpt = torch.load(path, weights_only=False)  # runs pickled code"),
            Fix("Save only tensors next time", "torch.save({'model': model.state_dict(), 'step': step}, path)"),
        ),
        first_step="If the file is yours, allowlist the named class with torch.serialization.add_safe_globals; "
        "use weights_only=False only for files you fully trust.",
        sources=(SEED_TROUBLE, "https://pytorch.org/docs/stable/generated/torch.load.html"),
    ),
    # ------------------------------------------------------------------ data, compile, XLA, install
    Entry(
        slug="dataloader_worker",
        title="A DataLoader worker process failed",
        summary=(
            "A DataLoader worker process failed[[ (worker {worker_id})]][[ with {inner_exception}]][[; pid(s) {pids} "
            "exited unexpectedly]][[; no batch arrived within {timeout_s} s]]."
        ),
        keywords=("dataloader", "shared memory", "shm", "communication with the workers", "in worker", "torch_",
                  "ancdata", "pin memory"),
        patterns=(
            r"DataLoader worker \(pid\(?s?\)? (?:[\d, ]+|\.{3})\) (?:exited unexpectedly|is killed by signal)",
            r"Caught \w+ in DataLoader worker process \d+",
            r"DataLoader timed out after \d+ seconds",
            r"unexpected bus error encountered in worker",
            r"insufficient shared memory \(shm\)",
            r"Too many open files\. Communication with the workers is no longer possible",
            r"Unexpected (?:segmentation fault|bus error|floating-point exception) encountered in worker",
            r"unable to (?:write to file|open shared memory object) <?/?torch_",
            r"Couldn't open shared file mapping: <torch_",
            r"received 0 items of ancdata",
            r"Pin memory thread exited unexpectedly",
            r"Caught \w+ in pin memory thread",
        ),
        # before "Caught X in DataLoader worker process N" (<= 0.4) the worker's traceback was re-raised as the
        # message text: ``raise batch.exc_type(batch.exc_msg)`` / ``X: Traceback ... in _worker_loop``
        frames=(
            r"^[ \t]*raise batch\.exc_type\(batch\.exc_msg\)",
            r"^[ \t]*File \"[^\"\n]*[/\\]torch[/\\]utils[/\\]data[/\\][^\"\n]*\", line \d+, in _worker_loop\b",
        ),
        priority=40,
        wrapper=True,
        facts=(
            (r"Caught (?P<inner_exception>\w+) in DataLoader worker process (?P<worker_id>\d+)",
             {"inner_exception": "str", "worker_id": "int"}),
            (r"DataLoader worker \(pids?\(?s?\)? (?P<pids>[\d, ]+)\)", {"pids": "str"}),
            (r"is killed by signal: (?P<signal_name>[\w ]+)", {"signal_name": "str"}),
            (r"DataLoader timed out after (?P<timeout_s>\d+) seconds", {"timeout_s": "int"}),
        ),
        causes=(
            "An exception in your Dataset's __getitem__ or collate_fn (its original traceback is in the message).",
            "Workers killed by the OS: out of host RAM, or /dev/shm too small in a container (bus error).",
            "Samples of different sizes that the default collate cannot stack.",
        ),
        fixes=(
            Fix("Reproduce in the main process for a plain traceback and a debugger", "loader = DataLoader(ds, batch_size=bs, num_workers=0)"),
            Fix("Check one sample directly", "ds[5]  # the index from the error, if known"),
            Fix("Give containers more shared memory, or use fewer workers", "docker run --shm-size=8g ...\n# or DataLoader(..., num_workers=2)"),
        ),
        first_step="Set num_workers=0 and run the loop again: the error then happens in your process with a "
        "normal traceback into __getitem__.",
        sources=(SEED_TROUBLE, "https://pytorch.org/docs/stable/data.html#multi-process-data-loading"),
    ),
    Entry(
        slug="torch_compile",
        title="torch.compile failed or gave up",
        summary=(
            "torch.compile stopped[[ with {compile_error}]][[: {reason}]]."
            "[[ The function {function} was recompiled until it hit {limit_name} ({limit}).]]"
            "[[ The last guard that failed: {recompile_reason}.]]"
        ),
        keywords=("dynamo", "inductor", "cache_size_limit", "recompile", "backendcompilerfailed", "cachelimitexceeded",
                  "cppcompileerror", "invalidcxxcompiler", "triton", "for torch.compile"),
        patterns=(
            r"torch\._dynamo\.exc\.\w+",
            r"torch\._inductor\.exc\.\w+",
            r"BackendCompilerFailed",
            r"(?:torch\._dynamo|torchdynamo) hit (?:config\.)?(?:cache_size_limit|recompile_limit|accumulated_cache_size_limit)",
            r"hit recompilation cache limit",
            r"CacheLimitExceeded",
            r"FailOnRecompileLimitHit",
            r"InductorError",
            r"LoweringException",
            r"Dynamo failed to run FX node",
            r"Dynamo is not supported on Python",
            r"not (?:yet )?supported for torch\.compile",
            # the advice Dynamo prints under every failure it raises
            r"torch\._dynamo\.config\.suppress_errors = True",
            r"TORCHDYNAMO_VERBOSE=1 for more information",
            r"\b(?:CppCompileError|InvalidCxxCompiler)\b",
            r"Cannot find a working triton installation",
        ),
        # frames and source lines only the backend compiler runs (a paste that lost its error line, or the
        # frames Dynamo logs as warnings)
        frames=(
            r"compiled_(?:gm|fn) = compiler_fn\(gm, ",
            r"[/\\]torch[/\\]_dynamo[/\\]repro[/\\]after_(?:dynamo|aot)\.py\", line \d+",
            r"[/\\]torch[/\\]_inductor[/\\]compile_fx\.py\", line \d+, in "
            r"(?:_?compile_fx(?:_inner|_main)?|fx_codegen_and_compile)\b",
        ),
        # also recognised from a truncated traceback whose last frame is ``raise BackendCompilerFailed(...``
        exception_types=("BackendCompilerFailed", "InductorError", "LoweringException", "CacheLimitExceeded",
                         "FailOnRecompileLimitHit", "CppCompileError", "InvalidCxxCompiler",
                         # generic class names, only when they come from torch._dynamo.exc
                         "torch._dynamo.exc.Unsupported", "torch._dynamo.exc.UserError",
                         "torch._dynamo.exc.TorchRuntimeError", "torch._dynamo.exc.InternalTorchDynamoError"),
        priority=45,
        facts=(
            (r"(?:torch\._dynamo\.exc|torch\._inductor\.exc)\.(?P<compile_error>\w+)(?::\s*(?P<reason>[^\n]+))?",
             {"compile_error": "str", "reason": "str"}),
            (r"hit (?:config\.)?(?P<limit_name>cache_size_limit|recompile_limit|accumulated_cache_size_limit) \((?P<limit>\d+)\)",
             {"limit_name": "str", "limit": "int"}),
            (r"function: '(?P<function>[^']+)'", {"function": "str"}),
            (r"(?:last reason|reasons):\s+(?P<recompile_reason>[^\n]+)", {"recompile_reason": "str"}),
        ),
        causes=(
            "Recompilations: shapes, Python scalars or object ids change between calls, and each change recompiles "
            "until the limit (cache_size_limit, renamed recompile_limit) is hit; the frame then runs eagerly.",
            "Code Dynamo cannot trace under fullgraph=True: data-dependent Python control flow, .item(), "
            "unsupported Python or C calls.",
            "A bug or missing lowering in the compiler backend (BackendCompilerFailed / InductorError).",
        ),
        fixes=(
            Fix("See why it recompiles", "TORCH_LOGS=recompiles python train.py"),
            Fix("Mark the varying dimension dynamic (or pad to fixed sizes)", "torch._dynamo.mark_dynamic(x, 0)\n# or torch.compile(model, dynamic=True)"),
            Fix("See graph breaks and their reasons", "TORCH_LOGS=graph_breaks python train.py"),
            Fix("Isolate the backend: if eager backend works, the bug is in inductor", "torch.compile(model, backend='eager')"),
        ),
        first_step="Run once with TORCH_LOGS=recompiles,graph_breaks to see what changes between calls or "
        "what cannot be traced.",
        sources=(SEED_TROUBLE, "https://github.com/pytorch/pytorch/issues/114511"),
    ),
    Entry(
        slug="xla_error",
        title="PyTorch/XLA (TPU) error",
        summary="The XLA runtime reported an error[[: {xla_status}]].",
        keywords=("xla", "tpu", "hbm", "pjrt", "statusor", "equal rank"),
        patterns=(
            r"Exception in device=TPU:\d+",
            r"torch_xla/csrc/[\w/.]+:\d+ : Check failed",
            r"XRTCompile",
            r"tensorflow/compiler/xla/[\w/.]+\.(?:cc|h):\d+(?:\\?\]| :)",
            r"xla_client/[\w/.]+:\d+\]",
            r"\btorch_xla::(?:runtime|bridge|XLAGraphExecutor|tensor_methods)::\w+",
            r"Input tensor is not an XLA tensor",
            r"No matching devices found for '/job:\w*tpu",
            r"torch_xla\.\w+[\w.]*Error",
            r"XlaRuntimeError",
            r"Computation requires more parameters \(\d+\) than supported",
            r"Ran out of memory in memory space hbm",
            r"torch_xla\._XLAC\.\w+",
            r"PJRT_DEVICE",
            r"Bad StatusOr access",
            r"XLA:TPU",
            r"Shapes must be equal rank, but are \d+ and \d+",
            r"Do not use the XLA device before calling xmp\.spawn",
        ),
        priority=50,
        facts=(
            (r"(?P<xla_status>(?:Invalid argument|Resource exhausted|Failed precondition|Aborted|Internal|Unimplemented|"
             r"INVALID_ARGUMENT|RESOURCE_EXHAUSTED|FAILED_PRECONDITION|ABORTED|INTERNAL|UNIMPLEMENTED):[^\n]{0,160})",
             {"xla_status": "str"}),
        ),
        causes=(
            "A graph too large or too dynamic for the TPU compiler (many parameters, changing shapes).",
            "CPU tensors mixed with XLA tensors (a tensor not moved to xm.xla_device()).",
            "A TPU runtime / torch_xla version mismatch or a TPU that is not reachable.",
            "TPU memory exhausted (RESOURCE_EXHAUSTED).",
        ),
        fixes=(
            Fix("Move every input to the XLA device", "import torch_xla.core.xla_model as xm\ndevice = xm.xla_device()\nx = x.to(device)"),
            Fix("Keep shapes static so graphs are reused", "DataLoader(ds, batch_size=bs, drop_last=True)  # and pad sequences"),
            Fix("Read the metrics report for compilations and CPU fallbacks", "import torch_xla.debug.metrics as met\nprint(met.short_metrics_report())"),
        ),
        first_step="Read the status line (Invalid argument / Resource exhausted / ...) and check the metrics "
        "report: many compilations mean dynamic shapes.",
        sources=(SEED_GPU, "https://github.com/pytorch/xla/issues/1963"),
    ),
    Entry(
        slug="version_mismatch",
        title="PyTorch build does not match the GPU, driver or a compiled extension",
        summary=(
            "The installed PyTorch (or an extension) was built for a different environment"
            "[[: {gpu} has compute capability {arch}, which this build does not include]][[ (it supports {supported})]]."
        ),
        keywords=("no kernel image", "capability", "driver", "cuda runtime error", "cuda error (", "cudaerror",
                  "hiperrornobinaryforgpu", "invalid device function", "cudaerrorinvaliddevicefunction",
                  "not linked with support", "mps backend is supported",
                  "not compiled with cuda", "undefined symbol",
                  "compiled with different cuda", "does not exist", "numpy 1.x", "version incompatibility", "ptx",
                  "cannot open shared object file", "mismatches the version", "custom c++ ops", "numpy is not available"),
        patterns=(
            r"no kernel image is available for execution on the device",
            # the CUDA error number alone (35 = insufficient driver, 209 = no kernel image, 222 = PTX toolchain)
            r"(?:cuda runtime error|CUDA error) ?\((?:35|209|222)\)",
            r"cudaError(?:InsufficientDriver|NoKernelImageForDevice|UnsupportedPtxVersion|InvalidDeviceFunction)",
            # the pre-"no kernel image" wording of the same thing: the binary has no code for this GPU's architecture
            r"(?:cuda runtime error ?\((?:8|98)\) ?:|CUDA error:|error=(?:8|98) ?:) ?invalid device function",
            # ROCm's "no kernel image", and builds / OSes without the accelerator
            r"hipErrorNoBinaryForGpu",
            r"(?:PyTorch|Torch) is not linked with support for \w+ devices",
            r"The MPS backend is supported on MacOS \d",
            r"with CUDA capability sm_\d+ is not compatible with the current PyTorch installation",
            r"The NVIDIA driver on your system is too old",
            r"CUDA driver version is insufficient for CUDA runtime version",
            r"Torch not compiled with CUDA enabled",
            r"compiled with different CUDA (?:major )?versions",
            r"operator torchvision::\w+ does not exist",
            r"\.so[^\n]*: undefined symbol: \w*(?:c10|2at|5torch|cuda|cudnn|cublas|nccl|THP)",
            r"compiled using NumPy 1\.x cannot be run in\s+NumPy 2",
            r"cuDNN version incompatibility",
            r"the provided PTX was compiled with an unsupported toolchain",
            r"PyTorch no longer supports this GPU because it is too old",
            r"lib(?:cudart|cublas|cublasLt|cudnn\w*|nvrtc|cusparse|cufft|curand|nccl|c10_cuda|torch_cuda\w*)\.so[\w.]*: cannot open shared object file",
            r"detected CUDA version \([\d.]+\) mismatches the version that was used to compile\s+PyTorch",
            r"Couldn't load custom C\+\+ ops",
            r"\bNumpy is not available\b",
        ),
        priority=92,
        facts=(
            (r"(?P<gpu>[\w .-]+?) with CUDA capability (?P<arch>sm_\d+) is not compatible", {"gpu": "str", "arch": "str"}),
            (r"The current PyTorch install supports CUDA capabilities (?P<supported>[\w ]+?)\.?(?:\n|$| If)", {"supported": "str"}),
            (r"found version (?P<driver_version>\d+)", {"driver_version": "int"}),
        ),
        causes=(
            "A PyTorch wheel built for another CUDA version / set of GPU architectures than this machine has.",
            "An NVIDIA driver older than the CUDA runtime bundled with PyTorch.",
            "A CPU-only PyTorch build installed where CUDA is wanted.",
            "torchvision / a C++ extension compiled against a different PyTorch version.",
        ),
        fixes=(
            Fix("Install the matching wheel from pytorch.org's selector", "pip install torch torchvision --index-url https://download.pytorch.org/whl/cu124"),
            Fix("Check what you have", "python -c \"import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_arch_list())\"\nnvidia-smi"),
            Fix("Rebuild extensions after upgrading torch", "pip install --no-build-isolation --force-reinstall <extension>"),
        ),
        first_step="Compare torch.__version__, torch.version.cuda and torch.cuda.get_arch_list() with nvidia-smi's "
        "driver/CUDA version and GPU, then install the matching wheel.",
        sources=(SEED_TRAINING, "https://github.com/pytorch/pytorch/issues/45028"),
    ),
)

SLUGS: tuple[str, ...] = tuple(e.slug for e in TABLE)
