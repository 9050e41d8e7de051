"""CUDA runtime, devices and builds: out of memory, device-side asserts, illegal accesses, cuBLAS/cuDNN, device placement, version mismatches."""

from __future__ import annotations

from nbdebug.core._findings import Fix
from nbdebug.core.knowledge._schema import SIZE, Entry

__all__ = ["ENTRIES"]

_CUDA_SYNC_FIX = Fix(
    "Re-run with synchronous kernel launches so the traceback points at the failing operation",
    "CUDA_LAUNCH_BLOCKING=1 python train.py",
)

# device_mismatch raised in torch's ONNX exporter's own graph passes (constant folding, eval peephole): constants the
# trace left on the CPU next to a model on the GPU (hnuzhy/BPJDet#5, pytorch/pytorch#72175), not the model's forward
EXPORT_DEVICE_STEP = ("The ONNX exporter's own graph passes (constant folding, peephole) mixed the devices of the "
                      "traced constants, not the model's forward: export with the model and its example inputs on the "
                      "CPU (model.cpu(), inputs .cpu()), or pass do_constant_folding=False to torch.onnx.export.")

ENTRIES: tuple[Entry, ...] = (
    Entry(
        slug="cuda_oom",
        contexts=("explain", "rank_failure"),
        role="cause",
        title="CUDA out of memory",
        summary=(
            "The GPU ran out of memory[[ while allocating {tried_to_allocate:bytes}]][[ on GPU {device}]]."
            "[[ The GPU has {total_capacity:bytes} in total and {free:bytes} was free.]]"
            "[[ PyTorch's tensors held {allocated_by_pytorch:bytes}]][[; its caching allocator reserved"
            " {reserved_by_pytorch:bytes}]][[, of which {reserved_but_unallocated:bytes} is cached but unused]]."
        ),
        keywords=("out of memory", "outofmemoryerror", "cuda runtime error", "cudaerrormemoryallocation",
                  "pytorch_cuda_alloc_conf", "cuda.html#environment-variables", "allocation on device"),
        patterns=(
            r"(?:CUDA|HIP) out of memory",
            r"cuda runtime error ?(?:\(2\))? ?: ?out of memory",
            r"CUDA error: ?out of memory",
            r"MPS backend out of memory",
            # the caching allocator over a set memory fraction ("Allocation on device 0 would exceed allowed
            # memory"), which ComfyUI shows cut to its first words
            r"(?m)^(?:torch\.(?:cuda\.)?OutOfMemoryError: )?Allocation on device(?: \d+ would exceed allowed memory)?",
            # the CUDA error number alone (2 = cudaErrorMemoryAllocation)
            r"cuda runtime error ?\(2\)",
            r"cudaErrorMemoryAllocation",
            r"THCudaCheck FAIL [^\n]{0,500}?error=2 ?: ?out of memory",
            r"torch\.(?:cuda\.)?OutOfMemoryError",
            # the tail of the message, all a cut log may keep
            r"See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF",
            r"Management\s+\(https://pytorch\.org/docs/stable/notes/cuda\.html#environment-variables\)",
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
        sources=("https://github.com/pytorch/pytorch/pull/13751", "https://github.com/pytorch/pytorch/issues/16417"),
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
        keywords=("(59)", "(710)", "mtgp", "device-side assert", "assertion", "device side assert", "cuda runtime error (59)",
                  "cuda runtime error (710)", "cuda error (710)", "cudaerrorassert"),
        patterns=(
            # the next CUDA call after an assert (dropout's RNG setup) fails with this
            r"Creating MTGP constants failed",
            r"device-side assert triggered",
            r"device side assert triggered",
            # the CUDA error number alone (59 before CUDA 10, 710 since = cudaErrorAssert)
            r"(?:cuda runtime error|CUDA error) ?\((?:59|710)\)",
            r"cudaErrorAssert",
            # linear on any line: the text before "Assertion" cannot hold another ".cu:", and the assertion
            # runs to the first closing quote (glibc quotes `like this', CUDA `like this`)
            r"\.cu:\d+: (?:[^\n.]|\.(?!cu:))*?Assertion (?:`[^`'\n]*[`']|'[^'\n]*') failed",
        ),
        priority=95,
        facts=(
            # (?<![\w/]): a path is only tried from its first character, so a long run is scanned once
            (r"(?<![\w/])(?P<kernel_file>[\w/]+\.cu):\d+: (?P<kernel>[^\n:(\[]+?)"
             r"(?:\((?:[^\n()]|\([^\n()]*\))*\))?(?: \[with[^\[\]\n]*\])?: "
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
        sources=("https://pytorch.org/docs/stable/notes/cuda.html#asynchronous-execution",),
    ),
    Entry(
        slug="illegal_memory_access",
        title="CUDA illegal memory access",
        summary=(
            "A CUDA kernel read or wrote memory outside any allocation. Like a device-side assert this poisons "
            "the CUDA context (restart the kernel), and the reported Python line may be unrelated because "
            "kernels run asynchronously."
        ),
        keywords=("(700)", "(716)", "(77)", "(74)", "cuda_error_illegal_address", "illegal memory access", "misaligned address", "illegal address", "illegal instruction",
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
        sources=("https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html",),
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
            Fix("Install a PyTorch build for your CUDA version and GPU", "pip install torch --index-url https://download.pytorch.org/whl/cuXYZ\n"
                "# cuXYZ: one your driver supports (nvidia-smi), as pytorch.org's selector lists for your torch"),
        ),
        first_step="Re-run with CUDA_LAUNCH_BLOCKING=1 (or the batch on CPU): cuBLAS errors are often a "
        "different error reported late.",
        sources=("https://docs.nvidia.com/cuda/cublas/index.html",),
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
        sources=("https://pytorch.org/docs/stable/backends.html#torch-backends-cudnn",),
    ),
    Entry(
        slug="invalid_device_ordinal",
        title="Invalid CUDA device ordinal",
        summary="The code asked for a GPU index that does not exist in this process[[ (cuda:{requested_device})]].",
        keywords=("(101)", "cuda_error_invalid_device", "cudaerrorinvaliddevice", "invalid device ordinal", "invalid device id", "device < num_gpus", "invalid device",
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
        sources=("https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#cuda-environment-variables",),
    ),
    Entry(
        slug="device_mismatch",
        title="Tensors on different devices",
        summary="An operation received tensors on different devices[[ ({device_a} and {device_b})]][[ in {op}]].",
        keywords=("is on cpu, but expected", "device", "backend", "weight type", "numpy", "but expected it to be on gpu", "expected object of type",
                  "expected type torch."),
        patterns=(
            r"Expected all tensors to be on the same device",
            r"Expected object of backend \w+ but got backend \w+",
            r"Expected object of type torch\.(?:cuda\.\w+Tensor but found type torch\.(?!cuda)|(?!cuda)\w+Tensor but found type torch\.cuda\.)",
            r"Expected object of device type \w+ but got device type \w+",
            # torch 0.x's wording ("expected type torch.FloatTensor but got torch.cuda.FloatTensor")
            r"expected type torch\.(?:cuda\.\w+Tensor but got torch\.(?!cuda)|(?!cuda)\w+Tensor but got torch\.cuda\.)",
            r"Input type \(torch\.cuda\.\w+\) and weight type \(torch\.(?!cuda)\w+\)",
            r"Input type \(torch\.(?!cuda)\w+\) and weight type \(torch\.cuda\.\w+\)",
            r"Tensor on device \S+ is not on the expected device \S+",
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
        sources=("https://pytorch.org/docs/stable/tensor_attributes.html#torch-device",),
    ),
    Entry(
        slug="version_mismatch",
        title="PyTorch build does not match the GPU, driver or a compiled extension",
        summary=(
            "The installed PyTorch (or an extension) was built for a different environment"
            "[[: {gpu} has compute capability {arch}, which this build does not include]][[ (it supports {supported})]]."
        ),
        keywords=("torchvision::", "xformers can't load", "no longer supports this gpu", "hip error", "failed to load image python extension", "invalid kernel file", "kernel image is invalid", "no binary for gpu", "no kernel image", "capability", "driver", "cuda runtime error", "cuda error (", "cudaerror",
                  "hiperrornobinaryforgpu", "invalid device function", "cudaerrorinvaliddevicefunction",
                  "not linked with support", "mps backend is supported",
                  "not compiled with cuda", "undefined symbol",
                  "compiled with different cuda", "does not exist", "numpy 1.x", "version incompatibility", "ptx",
                  "cannot open shared object file", "mismatches the version", "custom c++ ops", "numpy is not available",
                  "from the 'cuda' backend", "but was built for sm"),
        patterns=(
            r"no kernel image is available for execution on the device",
            # the CUDA error number alone (35 = insufficient driver, 209 = no kernel image, 222 = PTX toolchain)
            r"(?:cuda runtime error|CUDA error) ?\((?:35|209|222)\)",
            r"cudaError(?:InsufficientDriver|NoKernelImageForDevice|UnsupportedPtxVersion|InvalidDeviceFunction)",
            # the pre-"no kernel image" wording of the same thing: the binary has no code for this GPU's architecture
            r"(?:cuda runtime error ?\((?:8|98)\) ?:|(?:CUDA|HIP) error:|error=(?:8|98) ?:) ?invalid device function",
            # ROCm's "no kernel image", and builds / OSes without the accelerator
            r"hipErrorNoBinaryForGpu",
            # the runtime cannot load a kernel image of this build (CUDA's and HIP's wordings of the same failure)
            r"CUDA error: (?:invalid kernel file|device kernel image is invalid|no binary for GPU)",
            r"(?:PyTorch|Torch) is not linked with support for \w+ devices",
            r"The MPS backend is supported on MacOS \d",
            r"with CUDA capability sm_\d+ is not compatible with the current PyTorch installation",
            r"The NVIDIA driver on your system is too old",
            r"CUDA driver version is insufficient for CUDA runtime version",
            r"compiled with different CUDA (?:major )?versions",
            r"operator torchvision::\w+ does not exist",
            r"(?:Unknown builtin op|No such operator):? torchvision::\w+",
            # xFormers' own check of the torch it was built for
            r"xFormers can't load C\+\+/CUDA extensions\. xFormers was built for",
            # (a torch symbol, c10 / at / torch / THP, is an extension built for another torch: undefined_symbol's step)
            r"\.so[^\n]{0,80}?: undefined symbol: \w*(?:cuda|cudnn|cublas|nccl)",
            r"compiled using NumPy 1\.x cannot be run in\s+NumPy 2",
            r"cuDNN version incompatibility",
            r"the provided PTX was compiled with an unsupported toolchain",
            r"PyTorch no longer supports this GPU because it is too old",
            # a prebuilt kernel (xformers' cutlass, flash attention) compiled for another GPU architecture than this one
            r"this function is for sm_?\d{2,3}, but was built for sm_?\d{2,4}",
            r"(?<!\w)lib(?:cudart|cublas|cublasLt|cudnn\w*|nvrtc|cusparse|cufft|curand|nccl|c10_cuda|torch_cuda\w*)"
            r"\.so(?:\.[0-9]+)*: cannot open shared object file",
            r"detected CUDA version \([\d.]+\) mismatches the version that was used to compile\s+PyTorch",
            r"Couldn't load custom C\+\+ ops",
            # an op with no kernel for CUDA in this build: a CPU-only torch, or torchvision / an extension built
            # without CUDA (or for another torch) next to a CUDA torch
            r"Could not run '[\w:.]{1,120}' with arguments from the 'CUDA' backend",
            # torchvision's image extension that does not load with the installed torch
            r"Failed to load image Python extension",
            r"\bNumpy is not available\b",
        ),
        priority=92,
        facts=(
            # the GPU's name is tried only from the start of a run of name characters: linear on long lines
            (r"(?<![\w .-])(?P<gpu>[\w .-]+?) with CUDA capability (?P<arch>sm_\d+) is not compatible",
             {"gpu": "str", "arch": "str"}),
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
            Fix("Install the matching wheel from pytorch.org's selector (get-started/locally)",
                "pip install torch torchvision --index-url https://download.pytorch.org/whl/cuXYZ\n"
                "# cuXYZ: a CUDA version this driver supports (nvidia-smi) that the selector offers for your torch"),
            Fix("Check what you have", "python -c \"import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_arch_list())\"\nnvidia-smi"),
            Fix("Rebuild extensions after upgrading torch", "pip install --no-build-isolation --force-reinstall <extension>"),
        ),
        first_step="Compare torch.__version__, torch.version.cuda and torch.cuda.get_arch_list() with nvidia-smi's "
        "driver/CUDA version and GPU, then install the matching wheel.",
        sources=("https://github.com/pytorch/pytorch/issues/45028",),
    ),
    Entry(
        slug="cuda_unavailable",
        title="PyTorch cannot use a CUDA GPU here",
        summary=(
            "PyTorch found no usable CUDA GPU[[: {reason}]]. Code that calls .cuda() or uses device='cuda' fails "
            "until a GPU is visible to this process."
        ),
        keywords=("not able to use gpu", "mixed precision requires a gpu", "your machine only has", "accelerator is not available", "no supported gpu backend",
                  "cuda runtime error (30)", "cuda runtime error (999)", "is_available() returns false", "is_available() is false", "is_available() == false", "is_available() return false", "cudagetdevicecount", "forward compatibility", "nvidia-smi has failed", "is_available() returns false", "is_available() is false", "is_available() == false", "is_available() return false", "not compiled with cuda", "no cuda gpus", "nvidia driver", "busy or unavailable",
                  "cuda driver initialization", "cuda unknown error", "no cuda-capable device", "cudaerrornodevice",
                  "unsupported display driver", "0 active drivers"),
        patterns=(
            r"(?<!but )torch\.cuda\.is_available\(\) (?:returns?|is|==) False",
            r"Unexpected error from cudaGetDeviceCount\(\)",
            r"forward compatibility was attempted on non supported HW",
            r"Torch not compiled with CUDA enabled",
            r"No CUDA GPUs are available",
            r"Found no NVIDIA driver on your system",
            r"CUDA-capable device\(s\) is/are busy or unavailable",
            r"all CUDA-capable devices are busy or unavailable",
            r"CUDA driver initialization failed",
            r"CUDA initialization: CUDA unknown error",
            r"CUDA unknown error - this may be due to an incorrectly set up environment",
            r"no CUDA-capable device is detected",
            # the display driver and CUDA's own driver library of two installs (cudaErrorSystemDriverMismatch, 803)
            r"system has unsupported display driver / cuda driver combination",
            r"cudaErrorNoDevice\b",
            # CUDA's initialisation failing with cudaErrorUnknown (30; 999 from CUDA 10.1), the old runtime's wording
            r"cuda runtime error \((?:30|999)\) : unknown error at [^\n]{0,200}THCGeneral",
            # Lightning's wordings of a machine where torch sees no GPU
            r"You requested GPUs?: \[[\d, ]*\]\s+But your machine only has: \[\]",
            r"(?:CUDA|GPU)Accelerator can ?not run on your system since the accelerator is not available",
            r"No supported gpu backend found!",
            # triton's count of the GPU drivers it found: none (a CPU-only runtime)
            r"\b0 active drivers \(\[\]\)",
            # stable-diffusion-webui's start-up check, and accelerate's mixed precision on a machine without CUDA
            r"Torch is not able to use GPU",
            r"(?:fp16|bf16) mixed precision requires a GPU",
        ),
        # CUDA's lazy initialisation raising, whatever its message (or none: a paste cut in those frames)
        frames=(r"[/\\]torch[/\\]cuda[/\\]__init__\.py\", line \d+, in (?:_lazy_init|_check_driver)\b",),
        priority=88,
        facts=(
            (r"(?P<reason>Torch not compiled with CUDA enabled|No CUDA GPUs are available|Found no NVIDIA driver on your "
             r"system|CUDA-capable device\(s\) is/are busy or unavailable|all CUDA-capable devices are busy or unavailable|"
             r"CUDA driver initialization failed|CUDA unknown error|no CUDA-capable device is detected)", {"reason": "str"}),
        ),
        causes=(
            "A CPU-only PyTorch build (pip's default wheel on some platforms, or a conda cpuonly package).",
            "CUDA_VISIBLE_DEVICES set to an id that does not exist on this machine (e.g. '1' on a one-GPU machine), "
            "or set after CUDA was initialised.",
            "No NVIDIA driver visible: a machine or container without a GPU (Colab runtime without GPU, docker run "
            "without --gpus all).",
            "The GPU is in exclusive-process compute mode and another process holds it, or the GPU is in a bad "
            "state and needs a reset.",
        ),
        fixes=(
            Fix("See what this process sees", "import os, torch\nprint(torch.__version__, torch.version.cuda, "
                "torch.cuda.is_available(), torch.cuda.device_count())\nprint(os.environ.get('CUDA_VISIBLE_DEVICES'))"),
            Fix("Install a CUDA build of PyTorch (Linux: PyPI's wheels are CUDA builds; Windows: the selector's index)",
                "pip install --force-reinstall torch  # Linux, from PyPI\n"
                "# Windows: pip install torch --index-url https://download.pytorch.org/whl/cuXYZ (pytorch.org's selector)"),
            Fix("Set CUDA_VISIBLE_DEVICES before anything touches CUDA (or not at all)",
                "CUDA_VISIBLE_DEVICES=0 python train.py   # ids are 0..N-1 as nvidia-smi lists them"),
            Fix("Check the compute mode and who holds the GPU", "nvidia-smi -q -d COMPUTE\nnvidia-smi  # processes"),
            Fix("Write code that also runs without a GPU", "device = 'cuda' if torch.cuda.is_available() else 'cpu'"),
        ),
        first_step="Run torch.version.cuda and torch.cuda.device_count() in this environment: None means a "
        "CPU-only build, 0 means no visible GPU (check CUDA_VISIBLE_DEVICES and nvidia-smi).",
        sources=("https://pytorch.org/get-started/locally/",
                 "https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#env-vars"),
    ),
    Entry(
        slug="cuda_fork",
        title="CUDA was initialised before a process was forked",
        summary=(
            "A forked child process (a DataLoader worker, or multiprocessing with the 'fork' start method) tried to "
            "use CUDA after the parent had already initialised it; CUDA cannot be re-initialised in a forked child."
        ),
        keywords=("forked subprocess",),
        patterns=(r"Cannot re-initialize CUDA in forked subprocess",),
        priority=86,
        causes=(
            "A Dataset that moves samples to the GPU (or runs a CUDA model) in __getitem__ with num_workers > 0 on "
            "Linux, where workers are forked.",
            "multiprocessing.Pool / Process with the default 'fork' method after torch.cuda was touched in the parent.",
            "A library that initialises CUDA at import time before the workers start.",
        ),
        fixes=(
            Fix("Keep the Dataset on the CPU; move whole batches in the training loop",
                "for x, y in loader:\n    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)"),
            Fix("Use the spawn start method for the workers", "loader = DataLoader(ds, num_workers=4, multiprocessing_context='spawn')\n"
                "# or, for your own processes:\nimport torch.multiprocessing as mp\nmp.set_start_method('spawn', force=True)"),
            Fix("Or load in the main process", "DataLoader(ds, num_workers=0)"),
        ),
        first_step="Look for .cuda() / .to('cuda') inside the Dataset or collate_fn and move it to the training loop "
        "(or pass multiprocessing_context='spawn' to the DataLoader).",
        sources=("https://pytorch.org/docs/stable/notes/multiprocessing.html#cuda-in-multiprocessing",
                 "https://github.com/traveller59/spconv/issues/408"),
    ),
    Entry(
        slug="cuda_hardware_fault",
        title="GPU fault: a crashed kernel, or the hardware or driver",
        # the analyser says which: hardware only with evidence of it (an Xid, ECC errors, a GPU off the bus)
        summary="{hardware_detail}",
        keywords=("unspecified launch failure", "ecc error", "fallen off the bus", "xid", "cudaerrorlaunchfailure",
                  "ecc_uncorrectable", "eccuncorrectable", "gpu is lost"),
        patterns=(
            r"unspecified launch failure",
            r"uncorrectable ECC error encountered",
            r"fallen off the bus",
            r"NVRM: Xid \([^)\n]{0,40}\): (?:48|63|64|74|79|92|94|95|119|120)\b",
            r"cudaErrorLaunchFailure\b",
            r"cudaErrorECCUncorrectable\b",
            r"CUDA_ERROR_ECC_UNCORRECTABLE\b",
            r"\bGPU is lost\b",
        ),
        priority=91,
        extra={"hardware_detail_default": "A kernel on the GPU failed. Without an Xid, an ECC error or a GPU fallen "
               "off the bus in the logs, suspect a custom CUDA kernel or an out-of-bounds access first and the "
               "hardware second."},
        facts=(
            (r"(?P<fault>unspecified launch failure|uncorrectable ECC error encountered|fallen off the bus|GPU is lost)",
             {"fault": "str"}),
            (r"NVRM: Xid \([^)\n]{0,40}\): (?P<xid>\d+)", {"xid": "int"}),
        ),
        causes=(
            "A failing GPU: uncorrectable ECC memory errors (Xid 48/94/95), row-remapping failures (Xid 63/64), a "
            "GPU that dropped off the PCIe bus (Xid 79) from power, heat or a loose card.",
            "NVLink or driver / GSP firmware faults (Xid 74, 119, 120).",
            "'unspecified launch failure' can also be a kernel that crashed (a bug in a custom CUDA extension) or a "
            "kernel killed by the display watchdog on a desktop GPU: it is hardware when it happens at random "
            "places and the same code runs on another GPU.",
        ),
        fixes=(
            Fix("Find the node and the GPU, and read the kernel log", "hostname; nvidia-smi -L\nsudo dmesg -T | grep -i xid"),
            Fix("Check ECC counters and remapped rows", "nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT"),
            Fix("Drain the node and resume from the last checkpoint elsewhere",
                "scontrol update nodename=<node> state=drain reason='GPU Xid'   # Slurm"),
            Fix("Rule out your own kernels: run the step on another GPU, or with extensions disabled",
                "CUDA_VISIBLE_DEVICES=<other id> python train.py"),
        ),
        first_step="Note the host and GPU, run nvidia-smi -q -d ECC and dmesg | grep -i xid there: Xid 48/79/94/95 or "
        "uncorrectable ECC counts mean the GPU is faulty (drain it and rerun elsewhere); no Xid and the same "
        "operation failing every time point at a kernel instead (rerun with CUDA_LAUNCH_BLOCKING=1 to find it).",
        sources=("https://docs.nvidia.com/deploy/xid-errors/index.html",
                 "https://github.com/vllm-project/vllm/issues/5222"),
    ),
    Entry(
        slug="mps_unsupported",
        title="Operation or dtype not supported on Apple's MPS device",
        summary=(
            "The MPS (Apple GPU) backend does not support this[[: operator {op}]][[: {dtype}]]."
        ),
        keywords=("mps",),
        patterns=(
            r"is not current(?:ly)? implemented for the MPS device",
            r"Cannot convert a MPS Tensor to float64 dtype",
            r"MPS framework doesn't support float64",
        ),
        priority=63,
        facts=(
            (r"The operator '(?P<op>[\w:.]+)' is not current", {"op": "str"}),
            (r"(?P<dtype>float64)", {"dtype": "str"}),
        ),
        causes=(
            "An operator without an MPS kernel yet (FFTs, some linear-algebra, torchvision ops such as nms).",
            "float64 tensors (NumPy arrays default to float64) moved to MPS, which has no 64-bit float.",
        ),
        fixes=(
            Fix("Let unsupported operators fall back to the CPU (set before importing torch)",
                "import os\nos.environ['PYTORCH_ENABLE_MPS_FALLBACK'] = '1'\nimport torch"),
            Fix("Convert to float32 before moving to MPS", "x = torch.from_numpy(arr).float().to('mps')"),
            Fix("Run that step on the CPU explicitly", "out = op(x.cpu()).to('mps')"),
        ),
        first_step="For float64, call .float() before .to('mps'); for a missing operator, set "
        "PYTORCH_ENABLE_MPS_FALLBACK=1 before importing torch.",
        sources=("https://github.com/pytorch/pytorch/issues/77764",
                 "https://pytorch.org/docs/stable/notes/mps.html"),
    ),
    Entry(
        slug="nondeterministic_op",
        title="An operation has no deterministic implementation",
        summary=(
            "torch.use_deterministic_algorithms(True) is on, and this operation[[ ({op})]] has no deterministic "
            "implementation[[ — {detail}]]."
        ),
        keywords=("deterministic",),
        patterns=(
            r"does not have a deterministic implementation(?:, but you set)?",
            r"this operation is not deterministic because\s+it uses CuBLAS",
            r"Deterministic behavior was enabled with either `?torch\.use_deterministic_algorithms\(True\)`?",
        ),
        priority=83,
        facts=(
            (r"(?<!\w)(?P<op>\w+) does not have a deterministic implementation", {"op": "str"}),
            (r"(?P<detail>it uses CuBLAS and you have CUDA >= 10\.2)", {"detail": "str"}),
        ),
        causes=(
            "cuBLAS matrix multiplies need CUBLAS_WORKSPACE_CONFIG set before CUDA starts to be deterministic.",
            "Backward kernels that use atomic adds (interpolate / upsample, grid_sample, index_add, scatter_add, "
            "ctc_loss, some pooling and padding backwards) have no deterministic version on CUDA.",
        ),
        fixes=(
            Fix("For cuBLAS: set the workspace config before CUDA is initialised",
                "import os\nos.environ['CUBLAS_WORKSPACE_CONFIG'] = ':4096:8'  # before the first CUDA call\nimport torch"),
            Fix("Keep determinism but only warn for operations without it",
                "torch.use_deterministic_algorithms(True, warn_only=True)"),
            Fix("Turn it off around the one operation", "torch.use_deterministic_algorithms(False)\n"
                "y = F.interpolate(x, scale_factor=2, mode='bilinear')\ntorch.use_deterministic_algorithms(True)"),
        ),
        first_step="If the message names CuBLAS, set CUBLAS_WORKSPACE_CONFIG=:4096:8 before starting Python; "
        "otherwise use warn_only=True or replace the named operation.",
        sources=("https://pytorch.org/docs/stable/generated/torch.use_deterministic_algorithms.html",
                 "https://pytorch.org/docs/stable/notes/randomness.html"),
    ),
)
