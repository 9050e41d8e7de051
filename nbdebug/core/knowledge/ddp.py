"""DistributedDataParallel and FSDP: the errors and warnings of data-parallel training itself.

(Collective timeouts, NCCL and rendezvous errors are in ``dist``.)  The DDP reducer's messages are quoted from
``torch/csrc/distributed/c10d/reducer.cpp``; the FSDP ones from ``torch/distributed/fsdp/_flat_param.py``.
"""

from __future__ import annotations

from nbdebug.core._findings import Fix, Severity
from nbdebug.core.knowledge._schema import Entry

__all__ = ["ENTRIES"]

_DEBUG_DETAIL = Fix(
    "Let DDP name the parameters (all ranks, before init_process_group)",
    "TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --nproc_per_node=2 train.py",
)

ENTRIES: tuple[Entry, ...] = (
    Entry(
        slug="ddp_unused_parameters",
        title="DDP: some parameters got no gradient in the last iteration",
        summary=(
            "DistributedDataParallel expects a gradient for every parameter in every iteration; some parameters did "
            "not take part in computing the loss[[ (indices {unused_indices} on rank {rank})]][[: {unused_names}]]."
        ),
        keywords=("finished reduction in the prior iteration", "parameters that were not used in producing"),
        patterns=(
            r"Expected to have finished reduction in the prior iteration before starting a new one",
            # PyTorch Lightning's own wording of the same error
            r"LightningModule has parameters that were not used in producing the loss",
        ),
        priority=74,
        facts=(
            (r"Parameter indices which did not receive grad for rank (?P<rank>\d+): (?P<unused_indices>\d+(?: \d+)*)",
             {"rank": "int", "unused_indices": "str"}),
            (r"Parameters which did not receive grad for rank \d+: (?P<unused_names>[\w.]+(?:, [\w.]+)*)",
             {"unused_names": "str"}),
        ),
        causes=(
            "A layer defined in __init__ but not used in forward (an unused head, a branch taken only for some inputs "
            "or some iterations, an auxiliary classifier switched off).",
            "Outputs of forward() that do not enter the loss (a returned tensor ignored by the loss function).",
            "Frozen-by-hand layers whose parameters still have requires_grad=True but are detached in forward.",
        ),
        fixes=(
            _DEBUG_DETAIL,
            Fix("Remove the unused layers, or freeze them before wrapping",
                "for p in model.aux_head.parameters():\n    p.requires_grad_(False)\nmodel = DDP(model, device_ids=[rank])"),
            Fix("If the set of used parameters really changes between iterations (costs an extra graph traversal "
                "every iteration)", "model = DDP(model, device_ids=[rank], find_unused_parameters=True)"),
            Fix("If the same parameters are unused in every iteration, declare the graph static",
                "model = DDP(model, device_ids=[rank], static_graph=True)"),
        ),
        first_step="Run one step with TORCH_DISTRIBUTED_DEBUG=DETAIL (or without DDP, checking which "
        "p.grad is None after backward) to get the names, then remove or freeze those parameters.",
        sources=("https://pytorch.org/docs/stable/notes/ddp.html",
                 "https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html",
                 "https://github.com/open-mmlab/mmdetection/pull/4742"),
    ),
    Entry(
        slug="ddp_ready_twice",
        title="DDP: a parameter received its gradient twice in one iteration",
        summary=(
            "DistributedDataParallel saw the autograd hook of one parameter fire twice in one backward pass"
            "[[ (index {param_index})]][[: {param_name}]]. DDP reduces every parameter once per iteration."
        ),
        keywords=("mark a variable ready only once", "marked as ready twice"),
        patterns=(
            r"Expected to mark a variable ready only once",
            r"has been marked as ready twice",
        ),
        priority=74,
        facts=(
            (r"Parameter at index (?P<param_index>\d+)(?: with name (?P<param_name>[\w.]+))? has been marked as ready twice",
             {"param_index": "int", "param_name": "str"}),
        ),
        causes=(
            "Reentrant activation checkpointing (torch.utils.checkpoint with use_reentrant=True, or Hugging Face "
            "gradient_checkpointing) around layers whose parameters DDP tracks — the checkpointed part runs its own "
            "backward.",
            "A module (or a tied weight) used twice in one forward pass together with find_unused_parameters=True "
            "or checkpointing.",
            "A parameter used outside forward() (in the loss function or a regulariser), so its hook fires in a "
            "second backward.",
        ),
        fixes=(
            Fix("Use non-reentrant checkpointing", "out = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)\n"
                "# Hugging Face: model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={'use_reentrant': False})"),
            Fix("If the graph is the same every iteration, tell DDP", "model = DDP(model, device_ids=[rank], static_graph=True)"),
            Fix("Drop find_unused_parameters=True when every parameter is used", "model = DDP(model, device_ids=[rank])"),
            _DEBUG_DETAIL,
        ),
        first_step="If gradient checkpointing is on, switch it to use_reentrant=False; otherwise set "
        "TORCH_DISTRIBUTED_DEBUG=DETAIL to get the parameter's name and look for where it is used twice.",
        sources=("https://pytorch.org/docs/stable/checkpoint.html",
                 "https://github.com/huggingface/accelerate/issues/3536"),
    ),
    Entry(
        slug="fsdp_setup",
        title="FSDP cannot flatten this module's parameters",
        summary=(
            "FSDP flattens the parameters of each wrapped unit into one tensor, so they must agree"
            "[[: this unit mixes {dtype_a} and {dtype_b}]][[: {mismatch}]]."
        ),
        keywords=("flatten tensors", "cannot flatten", "flatparameter", "fsdp-managed module", "compute device and `device_id`"),
        patterns=(
            r"Must flatten tensors with uniform (?:dtype|`?requires_grad`?)",
            r"`?FlatParameter`? requires uniform (?:dtype|`?requires_grad`?)",
            r"Must flatten tensors on the same device",
            r"Cannot flatten integer dtype tensors",
            r"An FSDP-managed module unexpectedly has parameters on",
            r"Inconsistent compute device and `device_id`",
        ),
        priority=70,
        facts=(
            (r"uniform dtype but got (?P<dtype_a>torch\.\w+) and (?P<dtype_b>torch\.\w+)", {"dtype_a": "str", "dtype_b": "str"}),
            (r"(?P<mismatch>uniform `?requires_grad`?|on the same device|unexpectedly has parameters on \S+|"
             r"Inconsistent compute device)", {"mismatch": "str"}),
        ),
        causes=(
            "Mixed dtypes in one unit: a model loaded in bf16/fp16 with some parameters (LoRA adapters, norms kept "
            "in fp32, quantised layers) in another dtype.",
            "Frozen and trainable parameters in one unit (PEFT / partial fine-tuning) with use_orig_params=False.",
            "Parameters on different devices (some on CPU, some on GPU, or on meta) when FSDP wraps the model.",
        ),
        fixes=(
            Fix("Allow frozen and trainable parameters in one unit", "model = FSDP(model, use_orig_params=True, ...)\n"
                "# accelerate config: fsdp_use_orig_params: true"),
            Fix("Give every parameter one dtype before wrapping; let MixedPrecision cast for compute",
                "model = model.to(torch.float32)\nmp = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)\n"
                "model = FSDP(model, mixed_precision=mp, use_orig_params=True)"),
            Fix("Place the model on its device when wrapping", "model = FSDP(model, device_id=torch.cuda.current_device())"),
            Fix("Find the odd ones out", "from collections import Counter\n"
                "print(Counter((p.dtype, p.requires_grad, p.device.type) for p in model.parameters()))"),
        ),
        first_step="Print Counter((p.dtype, p.requires_grad, p.device.type) for p in model.parameters()) before "
        "wrapping: cast to one dtype and pass use_orig_params=True when frozen and trainable parameters mix.",
        sources=("https://pytorch.org/docs/stable/fsdp.html",
                 "https://github.com/pytorch/pytorch/pull/98221",
                 "https://github.com/huggingface/peft/issues/484"),
    ),
    Entry(
        slug="ddp_grad_strides",
        title="DDP: gradient layout differs from DDP's buckets (slower every step)",
        severity=Severity.WARNING,
        summary=(
            "A parameter's gradient has a different memory layout than DDP's communication bucket"
            "[[ (grad strides {grad_strides}, bucket strides {bucket_strides})]], so DDP copies it into the bucket on "
            "every backward. Training is correct but slower and uses more memory."
        ),
        keywords=("grad strides do not match",),
        patterns=(r"Grad strides do not match bucket view strides",),
        priority=30,
        extra={"warning": "yes"},
        facts=(
            (r"grad\.sizes\(\) = (?P<grad_sizes>\[[\d, ]*\]), strides\(\) = (?P<grad_strides>\[[\d, ]*\])",
             {"grad_sizes": "shape", "grad_strides": "shape"}),
            (r"bucket_view\.sizes\(\) = \[[\d, ]*\], strides\(\) = (?P<bucket_strides>\[[\d, ]*\])", {"bucket_strides": "shape"}),
        ),
        causes=(
            "The model (or some conv weights) converted to channels_last after DDP was constructed, or inputs in "
            "channels_last producing channels_last weight gradients for 1x1 / depthwise convolutions.",
            "A parameter replaced or re-strided (transposed, .set_(), a non-contiguous view) after wrapping.",
        ),
        fixes=(
            Fix("Convert the memory format before wrapping in DDP",
                "model = model.to(memory_format=torch.channels_last)\nmodel = DDP(model, device_ids=[rank])"),
            Fix("Make parameters contiguous before wrapping",
                "for p in model.parameters():\n    p.data = p.data.contiguous()\nmodel = DDP(model, device_ids=[rank])"),
            Fix("Let gradients live in the buckets (saves the copy and memory)",
                "model = DDP(model, device_ids=[rank], gradient_as_bucket_view=True)"),
        ),
        first_step="Find where the model's memory format changes (.to(memory_format=torch.channels_last)) and do "
        "it before constructing DDP.",
        sources=("https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html",
                 "https://github.com/pytorch/pytorch/issues/70222"),
    ),
)

ENTRIES += (
    Entry(
        slug="wrapped_model_attribute",
        title="A method or attribute was read from the DDP / DataParallel wrapper instead of the model",
        summary=("The model is wrapped in {wrapper}, which has the model's forward but not its own methods and "
                 "attributes[[ (.{attr})]]: those live on the wrapped model, wrapper.module."),
        keywords=("dataparallel' object has no attribute", "fullyshardeddataparallel' object has no attribute"),
        patterns=(r"'(?:DistributedDataParallel|DataParallel|FullyShardedDataParallel)' object has no attribute '\w+'",),
        priority=46,
        facts=((r"'(?P<wrapper>DistributedDataParallel|DataParallel|FullyShardedDataParallel)' object has no attribute "
                r"'(?P<attr>\w{1,80})'", {"wrapper": "str", "attr": "str"}),),
        causes=("Code written for a bare model (model.generate, model.postprocess, model.config) running on the "
                "wrapped model after DDP / DataParallel / accelerate.prepare wrapped it.",),
        fixes=(Fix("Reach the model inside the wrapper",
                   "inner = model.module   # or accelerator.unwrap_model(model)\ninner.postprocess(...)"),),
        first_step="Call the method on the wrapped model, model.module (or accelerator.unwrap_model(model)), not on "
        "the DistributedDataParallel / DataParallel wrapper.",
        sources=("https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html",
                 "https://huggingface.co/docs/accelerate/package_reference/accelerator"),
    ),
)
