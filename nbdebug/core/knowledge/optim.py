"""Optimizers, schedulers and mixed precision: how the training step is set up."""

from __future__ import annotations

from nbdebug.core._findings import Fix, Severity
from nbdebug.core.knowledge._schema import Entry

__all__ = ["ENTRIES"]

ENTRIES: tuple[Entry, ...] = (
    Entry(
        slug="optimizer_setup",
        title="The optimizer was built from (or restored to) the wrong parameters",
        summary="{setup_detail}",
        keywords=("empty parameter list", "parameter group", "non-leaf tensor", "can only optimize tensors",
                  "more than one parameter group"),
        patterns=(
            r"optimizer got an empty parameter list",
            r"loaded state dict contains a parameter group that doesn't match the size of optimizer's group",
            r"loaded state dict has a different number of parameter groups",
            r"some parameters appear in more than one parameter group",
            r"can't optimize a non-leaf Tensor",
            r"optimizer can only optimize Tensors, but one of the params is",
        ),
        priority=62,
        extra={"setup_detail_default": "The optimizer's parameters are not what the code expects."},
        causes=(
            "model.parameters() is empty: a model whose layers are kept in a plain list or dict instead of "
            "nn.ModuleList / nn.ModuleDict, or a filter(lambda p: p.requires_grad, ...) after freezing everything.",
            "Resuming an optimizer state saved for a different model or a different set of trainable parameters "
            "(layers added, removed, frozen or unfrozen since the checkpoint).",
            "A generator (model.parameters()) consumed once before being given to the optimizer.",
            "The same parameter in two parameter groups: a group built from model.parameters() next to a group for "
            "a sub-module whose parameters it already holds (raised when the optimizer is built).",
            "Tensors that are results of operations (w * 0.1, .to(device) after requires_grad) passed as parameters.",
        ),
        fixes=(
            Fix("Check what the optimizer will get", "params = [p for p in model.parameters() if p.requires_grad]\n"
                "print(len(params), sum(p.numel() for p in params))"),
            Fix("Register sub-layers so they count as parameters", "self.blocks = nn.ModuleList(blocks)  # not a Python list"),
            Fix("When the trainable set changed, restore the weights but start a fresh optimizer",
                "model.load_state_dict(ckpt['model'])\noptimizer = torch.optim.AdamW(model.parameters(), lr=lr)  # skip ckpt['optimizer']"),
            Fix("Build the optimizer from the model as it is at resume time, before loading its state",
                "optimizer = make_optimizer(model)  # same freezing / groups as when saving\noptimizer.load_state_dict(ckpt['optimizer'])"),
        ),
        first_step="Print the number of parameters the optimizer receives (and, when resuming, compare "
        "len(g['params']) per group with the checkpoint's optimizer state).",
        sources=("https://pytorch.org/docs/stable/optim.html",
                 "https://github.com/pytorch/pytorch/issues/50402"),
    ),
    Entry(
        slug="scheduler_order",
        title="lr_scheduler.step() called before optimizer.step()",
        severity=Severity.WARNING,
        summary=(
            "scheduler.step() ran before any optimizer.step() had. PyTorch checks only the first step, so this is "
            "either a loop that steps the scheduler first (the first value of the schedule is skipped and the whole "
            "schedule is off by one step), or, under mixed precision (GradScaler, the Hugging Face Trainer with "
            "fp16), a correct loop whose first optimizer step GradScaler skipped because the gradients overflowed "
            "at its initial scale: then it is harmless."
        ),
        keywords=("lr_scheduler.step()", "has been overridden after learning rate scheduler"),
        patterns=(
            r"Detected call of `?lr_scheduler\.step\(\)`? before `?optimizer\.step\(\)`?",
            # the same check when something (apex amp, a wrapper) replaced optimizer.step after the scheduler was built
            r"Seems like `?optimizer\.step\(\)`? has been overridden after learning rate scheduler",
        ),
        priority=30,
        extra={"warning": "yes"},
        causes=(
            "scheduler.step() placed before optimizer.step() in the loop (the pre-1.1 order), or at the start of "
            "each epoch instead of the end.",
            "A mixed-precision GradScaler skipped the first optimizer.step() because the gradients overflowed "
            "(harmless when it happens once at the start).",
            "A warm-up implemented by stepping the scheduler before training starts.",
        ),
        fixes=(
            Fix("Step the optimizer, then the scheduler", "loss.backward()\noptimizer.step()\nscheduler.step()\noptimizer.zero_grad()"),
            Fix("With GradScaler, step the scheduler only when the optimizer stepped",
                "scale = scaler.get_scale()\nscaler.step(optimizer)\nscaler.update()\n"
                "if scaler.get_scale() >= scale:  # not skipped\n    scheduler.step()"),
        ),
        first_step="Under GradScaler / AMP (or the Hugging Face Trainer with fp16), a single warning at the start is "
        "harmless: the first step was skipped for inf gradients at scale 65536. To tell the two apart, look at the "
        "loop: scaler.step(optimizer) (or optimizer.step()) before scheduler.step() and scaler.get_scale() "
        "dropping from 65536.0 after the first step mean the skipped step; scheduler.step() first (or no scaler) "
        "means the order is wrong: step the optimizer first.",
        sources=("https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate",),
    ),
    Entry(
        slug="amp_fp16_gradients",
        title="GradScaler got fp16 gradients: the model itself is in half precision",
        summary=(
            "GradScaler.unscale_ found gradients in float16. Mixed precision expects float32 parameters (the master "
            "weights) with autocast doing the float16 math; a model converted with .half() (or loaded in fp16) has "
            "fp16 gradients that cannot be unscaled safely."
        ),
        keywords=("unscale fp16 gradients",),
        patterns=(r"Attempting to unscale FP16 gradients", r"to unscale FP16 gradients"),
        frames=(r'^[ \t]*raise ValueError\("Attempting to unscale FP16 gradients',),
        priority=72,
        causes=(
            "model.half() (or torch_dtype=torch.float16 when loading) combined with torch.cuda.amp.GradScaler / "
            "Trainer(fp16=True).",
            "Trainable adapter / LoRA weights created in float16 on a model loaded in float16 (old PEFT versions "
            "did this).",
            "A single layer (or a custom parameter) cast to float16 by hand.",
        ),
        fixes=(
            Fix("Keep the parameters in float32 and let autocast use fp16",
                "model = model.float()\nscaler = torch.amp.GradScaler('cuda')\nwith torch.autocast('cuda', dtype=torch.float16):\n"
                "    loss = criterion(model(x), y)\nscaler.scale(loss).backward()\nscaler.step(optimizer)\nscaler.update()"),
            Fix("Cast only the trainable parameters to float32 (adapters on a frozen fp16 model)",
                "for p in model.parameters():\n    if p.requires_grad:\n        p.data = p.data.float()"),
            Fix("On GPUs with bf16, use bfloat16 autocast without a scaler", "with torch.autocast('cuda', dtype=torch.bfloat16):\n    loss = ..."),
        ),
        first_step="Print {p.dtype for p in model.parameters() if p.requires_grad}: every trainable parameter must "
        "be float32 when GradScaler is used.",
        sources=("https://pytorch.org/docs/stable/amp.html#gradient-scaling",
                 "https://github.com/huggingface/peft/issues/341"),
    ),
)
