"""A process that died: native crashes (segfault, abort), the host running out of memory, a dead notebook kernel.

The texts of the dead-kernel record (``%load_ext nbdebug`` in the restarted kernel) are here too: ``SIGNALS``
names what each signal means for a training process.
"""

from __future__ import annotations

from nbdebug.core._findings import Fix
from nbdebug.core.knowledge._schema import Entry

__all__ = ["ENTRIES", "SIGNALS", "SIGNAL_KINDS", "DEAD_KERNEL_FIRST_STEP"]

_FAULTHANDLER = "https://docs.python.org/3/library/faulthandler.html"
_DATALOADER = "https://pytorch.org/docs/stable/data.html#multi-process-data-loading"
_OOM_KILLER = "https://docs.kernel.org/admin-guide/mm/concepts.html#oom-killer"

# signal number -> (name, what it means when a training process dies of it)
SIGNALS: dict[int, tuple[str, str]] = {
    11: ("SIGSEGV", "a native crash: compiled code (torch, an extension, a driver) read memory it does not own"),
    6: ("SIGABRT", "a native abort: a C++ check failed or an uncaught C++ exception ended the process"),
    7: ("SIGBUS", "a bus error: usually shared memory (/dev/shm) ran out under DataLoader workers, or a file "
        "mapped in memory shrank"),
    9: ("SIGKILL", "killed from outside: usually the kernel's out-of-memory killer (host RAM or the container's "
        "memory limit)"),
    4: ("SIGILL", "an illegal instruction: a binary built for a newer CPU than this one"),
    8: ("SIGFPE", "a floating-point exception in native code (an integer division by zero)"),
}

# signal number -> the category whose first step addresses a process that died of it (a launcher's "exitcode: -11").
# Not SIGABRT (6): NCCL's watchdog aborts the ranks that waited on a failed or slow one, so a launcher's -6 alone
# does not tell a native crash from a distributed failure.
SIGNAL_KINDS: dict[int, str] = {11: "native_crash", 4: "native_crash", 8: "native_crash", 9: "host_oom",
                                7: "bus_error"}

DEAD_KERNEL_FIRST_STEP = {
    "native": "Re-run the cell named above on a small input with the versions shown; a crash at the same line is a "
              "native crash in the operation there: update torch and the extension that runs it, or report it with "
              "the stack above.",
    "memory": "The process used about as much memory as it may: lower the batch size or num_workers, or load data "
              "lazily; watch it with %memtrace on a small run.",
    "unknown": "Re-run the cell named above on a small input; if the kernel dies again, the stack above shows where.",
}

ENTRIES: tuple[Entry, ...] = (
    Entry(
        slug="native_crash",
        title="The process crashed in native code (segfault or abort)",
        summary=("The process died in compiled code[[ ({signal_text})]]: no Python exception was raised, so the "
                 "traceback stops (or never starts) where the crash happened."),
        keywords=("return code", "returned", "sigill", "0xc000001d", "double free", "free(): invalid", "corrupted size", "corrupted double-linked", "malloc():", "segmentation fault", "core dumped", "sigsegv", "sigabrt", "exit code", "exitcode", "0xc0000005",
                  "fatal python error", "aborted", "terminate called", "illegal instruction", "illegal hardware instruction", "bus error", "signal 11",
                  "-1073741819", "windows fatal exception", "exit status", "sigbus", "interrupted by signal", "c10::error",
                  "ucrtbase!abort", "attempt to free invalid pointer", ".dll!",
                  # the shell's notice in the user's language (glibc's and bash's translations)
                  "核心已转储", "段错误", "speicherabzug geschrieben", "speicherzugriffsfehler", "violación de segmento",
                  "ошибка сегментирования", "セグメンテーション違反", "falha de segmentação", "generado",
                  "imagem do núcleo"),
        patterns=(
            r"(?:exit code|exit status|return code|returned)[: =]{1,3}(?:3221225501|-1073741795)\b",
            r"0xC000001D",
            r"double free or corruption",
            r"free\(\): invalid (?:pointer|size|next size)",
            r"corrupted size vs\. prev_size",
            r"corrupted double-linked list",
            r"malloc\(\): (?:memory corruption|corrupted top size|unaligned tcache chunk)",
            # a DataLoader worker's segfault is the worker's own report (dataloader_worker)
            r"(?<!signal: )(?<!nexpected )(?i:segmentation fault)(?! encountered in worker)",
            r"\bcore dumped\b",
            r"\bSIG(?:SEGV|ABRT|ILL)\b",
            # not torchrun's "(exitcode: -11)": its child_failed report names the signal already
            r"(?:exit code|exit status|return code|returned)[: =]{1,3}(?:139|134|-11|-6|3221225477|-1073741819)\b",
            r"0xC0000005",
            r"Fatal Python error: (?:Segmentation fault|Aborted|Bus error|Illegal instruction)",
            # faulthandler's report of a crash on Windows
            r"Windows fatal exception: (?:access violation|stack overflow|illegal instruction|code 0x[0-9a-fA-F]{8})",
            # the shell's notice ("Aborted", "Aborted (core dumped)"), not a status code's name ("Aborted: Session ... is
            # not found", TensorFlow / XLA / gRPC's ABORTED status): that names the runtime's error, not a signal
            r"^Aborted\b(?!:)",
            r"(?m)^Illegal instruction\b",
            r"\billegal hardware instruction\b",
            r"signal 11\b",
            r"\bSIGBUS\b",
            r"interrupted by signal \d+: ?SIG\w+",
            r"terminate called after throwing an instance of 'c10::Error'",
            r"ucrtbase!abort",
            # tcmalloc (preloaded on TPU VMs) aborting on a pointer another allocator returned
            r"tcmalloc\.cc:\d+\] Attempt to free invalid pointer",
            # a Windows debugger's call stack: rows of module.dll!function ... C++ (where the process stopped)
            r"(?m)^[ \t>]*[\w.-]{1,80}\.dll!\S[^\n]{0,400}[ \t]C\+\+[ \t]*$",
            # "Segmentation fault" / "(core dumped)" as a shell prints them in zh_CN, de, es, ru, ja and pt locales
            # ("已放弃 (核心已转储)" is zh_CN's "Aborted (core dumped)")
            r"核心已转储|Speicherabzug geschrieben|`core' generado|imagem do núcleo gravada",
            r"(?:段错误|Speicherzugriffsfehler|Violación de segmento|Ошибка сегментирования|セグメンテーション違反|"
            r"Falha de segmentação)(?:です)?(?:[ \t]*\(|[ \t]*$)",
        ),
        priority=72,
        facts=((r"(?P<signal_text>Segmentation fault|SIGSEGV|SIGABRT|0xC0000005|Aborted|Illegal instruction|"
                r"exit code 139|exitcode: -11)", {"signal_text": "str"}),),
        causes=(
            "An extension or library built for another torch / CUDA / NumPy than the installed one (versions that do "
            "not fit together are the commonest cause).",
            "Two copies of a native library in one process (e.g. OpenMP from torch and from another package, or "
            "conda and pip builds mixed).",
            "A real bug in a native operation on an unusual input (empty tensor, huge size, unsupported dtype).",
            "DataLoader workers forked after CUDA or another threaded library started.",
        ),
        fixes=(
            Fix("Get the Python stack of every thread at the crash",
                "import faulthandler; faulthandler.enable()  # or: python -X faulthandler train.py\n"
                "# in a notebook: %load_ext nbdebug records it and shows it after the restart"),
            Fix("Make the versions fit together",
                "pip install --force-reinstall torch torchvision torchaudio  # then rebuild extensions"),
            Fix("Rule out DataLoader workers", "loader = DataLoader(ds, batch_size=32, num_workers=0)"),
        ),
        first_step="Run once with faulthandler on (python -X faulthandler, or %load_ext nbdebug in a notebook) to "
        "see the Python line of the crash, and check that torch and its extensions are versions that fit.",
        sources=(_FAULTHANDLER, "https://pytorch.org/docs/stable/notes/faq.html"),
    ),
    Entry(
        slug="host_oom",
        title="The machine (not the GPU) ran out of memory",
        summary=("The process ran out of host memory (RAM or the container's limit)[[: {detail}]]; the operating "
                 "system refused an allocation or killed the process."),
        keywords=("killed", "137", "-9", "paging file", "defaultcpuallocator", "cannot allocate memory", "bad_alloc",
                  "memoryerror", "out of memory: killed", "oom-kill", "unable to allocate", "winerror 1455",
                  "signal 9"),
        patterns=(
            r"(?m)^Killed[ \t]*$",
            r"line \d+: {1,3}\d+ Killed\b",
            r"(?<!\d)\d{1,10} Killed {1,10}(?:python|torchrun|accelerate|deepspeed|nohup|CUDA_)",
            r"(?:exit code|exit status|return code)[: =]{1,3}(?:137|-9)\b",
            r"is killed by signal: Killed",
            r"killed by signal 9\b",
            r"The paging file is too small",
            r"\[WinError 1455\]",
            r"DefaultCPUAllocator: (?:not enough memory|can't allocate memory)",
            r"Cannot allocate memory",
            r"std::bad_alloc",
            r"(?m)^MemoryError\b",
            r"Out of memory: Killed process",
            r"\boom[-_]kill",
            r"Unable to allocate (?P<detail>[0-9.]+ [KMGTP]iB) for an array",
        ),
        priority=84,
        facts=((r"(?P<detail>you tried to allocate \d+ bytes|Unable to allocate [0-9.]+ [KMGTP]iB for an array "
                r"with shape [^\n]{0,80}|Killed process \d+ \([^)\n]{0,60}\)[^\n]{0,80})", {"detail": "str"}),),
        causes=(
            "The dataset (or a big tensor, an embedding table, a checkpoint) is loaded whole into RAM.",
            "DataLoader workers each hold a copy of the dataset's Python objects (copy-on-read of lists/dicts of "
            "Python objects), times num_workers.",
            "A container or job limit (cgroup, Slurm --mem, Colab's RAM) far below the machine's memory.",
            "Memory kept across steps (lists of tensors, outputs with their graph).",
        ),
        fixes=(
            Fix("Fewer workers, smaller prefetch", "DataLoader(ds, batch_size=32, num_workers=2, prefetch_factor=2)"),
            Fix("Hold the dataset as arrays, not Python objects (no copy per worker)",
                "self.items = np.array(paths)  # not a list of str; or memory-map: np.load(p, mmap_mode='r')"),
            Fix("Load a checkpoint without a second copy", "sd = torch.load(path, map_location='cpu', mmap=True, "
                "weights_only=True)"),
        ),
        first_step="Compare the process's memory with its limit (the live panel shows both), then lower what each "
        "step or worker holds: num_workers, batch size, data loaded lazily.",
        sources=(_DATALOADER, _OOM_KILLER, "https://pytorch.org/docs/stable/generated/torch.load.html"),
    ),
    Entry(
        slug="kernel_died",
        title="The notebook kernel died",
        summary=("The kernel process ended without a Python error: a native crash, the out-of-memory killer or an "
                 "exit from native code. The notebook cannot show why; the dead kernel's own record can."),
        keywords=("kernel appears to have died", "kernel restarting", "kernel died", "restarting kernel",
                  "kernel crashed", "dead kernel", "kernel has died", "kernel has crashed"),
        patterns=(r"kernel appears to have died", r"Kernel Restarting", r"(?i:kernel (?:has )?died)",
                  r"(?i:kernel (?:has )?crashed)", r"(?i:dead kernel)"),
        priority=25,
        wrapper=True,
        causes=(
            "The host ran out of memory and the kernel was killed (SIGKILL): by far the commonest cause.",
            "A native crash (segfault, abort) in torch, an extension or a driver.",
        ),
        fixes=(
            Fix("Let the next crash explain itself", "%load_ext nbdebug   # before the cell that kills the kernel;\n"
                "# after the restart, %load_ext nbdebug shows the dead kernel's cell, line, stacks and memory"),
            Fix("Watch the memory", "!free -h   # or %memtrace on a small run"),
        ),
        first_step="Load nbdebug (%load_ext nbdebug) and run the cell again: after the restart, loading it shows what "
        "the dead kernel was doing, its memory against the limit, and the likely cause.",
        sources=(_FAULTHANDLER, "https://docs.jupyter.org/en/latest/troubleshooting.html"),
    ),
    Entry(
        slug="bus_error",
        title="A process died of a bus error (SIGBUS)",
        summary=("A process died of SIGBUS: under DataLoader workers this is nearly always shared memory (/dev/shm) "
                 "running out while batches pass between processes; otherwise a memory-mapped file that shrank or a "
                 "native crash."),
        causes=("A container's small /dev/shm (Docker's default is 64 MB) and DataLoader workers passing batches "
                "through it.",
                "A file mapped in memory (a dataset, a checkpoint with mmap=True) truncated while in use.",
                "A native crash in an extension."),
        fixes=(Fix("Give the container more shared memory", "docker run --shm-size=8g ...   # or --ipc=host"),
               Fix("Or pass less through it", "DataLoader(ds, batch_size=32, num_workers=2)")),
        first_step="Check the free shared memory while it runs (df -h /dev/shm): give the container more "
        "(docker --shm-size=8g or --ipc=host) or lower num_workers; if /dev/shm is ample, run with faulthandler on "
        "(python -X faulthandler) as for a native crash.",
        sources=(_DATALOADER, "https://docs.docker.com/reference/cli/docker/container/run/"),
    ),
)
