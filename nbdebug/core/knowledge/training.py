"""Training dynamics: what the doctor, GradMonitor and the NaN sentinel report, and the numbers they use.

No entry here has message patterns: these are findings of checks on a running (or one-batch) training loop,
built with ``nbdebug.core.knowledge.finding(slug, message, ...)``.  Sources are pages a user can open.

The last entries are never a finding's own kind: they are the causes the doctor names when it knows why a
finding happened (a learning rate too high or too low, the input scale, the time budget, another finding), and
a finding of that sort takes its fixes from the cause's entry (``fixes=entry("lr_too_high").fixes``).
``consequence_of_another`` holds templates: ``{message}``, ``{cause_title}`` and ``{cause_fix}`` are filled in
by the doctor.
"""

from __future__ import annotations

from nbdebug.core._findings import Fix, Severity
from nbdebug.core.knowledge._schema import Entry, Threshold

__all__ = ["ENTRIES", "GRADIENT_GUARDS", "GUARD_FIX", "THRESHOLDS"]

KARPATHY = "http://karpathy.github.io/2019/04/25/recipe/"
PASCANU = "https://arxiv.org/abs/1211.5063"  # Pascanu et al., On the difficulty of training RNNs (2013)
CLIP = "https://pytorch.org/docs/stable/generated/torch.nn.utils.clip_grad_norm_.html"
ANOMALY = "https://pytorch.org/docs/stable/autograd.html#anomaly-detection"
AMP = "https://pytorch.org/docs/stable/amp.html#gradient-scaling"
RANDOMNESS = "https://pytorch.org/docs/stable/notes/randomness.html"
DATA = "https://pytorch.org/docs/stable/data.html#single-and-multi-process-data-loading"
CROSS_ENTROPY = "https://pytorch.org/docs/stable/generated/torch.nn.CrossEntropyLoss.html"
CS231N = "https://cs231n.github.io/neural-networks-1/#actfun"
FINETUNE = "https://pytorch.org/tutorials/beginner/finetuning_torchvision_models_tutorial.html"
CS231N_PRE = "https://cs231n.github.io/neural-networks-2/#datapre"
OPTIM = "https://pytorch.org/docs/stable/optim.html#how-to-use-an-optimizer"
ADAMW = "https://arxiv.org/abs/1711.05101"  # Loshchilov & Hutter, Decoupled Weight Decay Regularization
MODES = "https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.train"
ZERO_GRAD = "https://pytorch.org/tutorials/recipes/recipes/zeroing_out_gradients.html"
NLL = "https://pytorch.org/docs/stable/generated/torch.nn.NLLLoss.html"
CS231N_INIT = "https://cs231n.github.io/neural-networks-2/#init"  # the pitfall: all zero initialization
OPT_HOOK = "https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.register_step_pre_hook.html"

_KAIMING = "torch.nn.init.kaiming_normal_(layer.weight, nonlinearity='relu')"
_CLIP_CODE = "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)"
_RAISE_LR = Fix("raise the learning rate (Adam: 1e-3 to 3e-3; SGD: 0.01 to 0.1 for this tiny problem)",
                "for g in opt.param_groups: g['lr'] = 1e-3")

# the first fix of a NaN gradient whose op the doctor named (its backward returned NaN): why that op's gradient is
# infinite, and the safe form; "{op}" is the op as the user wrote it
GUARD_FIX = "guard {op}'s input ({why})"
GRADIENT_GUARDS: dict[str, tuple[str, str]] = {
    "sqrt": ("sqrt of 0 has an infinite gradient: add an epsilon inside it, or use a safe norm such as "
             "F.pairwise_distance, which adds one", "torch.sqrt(x + 1e-12)"),
    "norm": ("the norm of a zero vector has a NaN gradient: add an epsilon, or use a safe norm",
             "torch.sqrt((v ** 2).sum(-1) + 1e-12)"),
    "log": ("log of 0 has an infinite gradient: clamp the input away from 0", "torch.log(x.clamp_min(1e-12))"),
    "div": ("a division by 0 has an infinite gradient: add an epsilon to the divisor", "a / (b + 1e-12)"),
    "pow": ("a fractional power of 0 has an infinite gradient: add an epsilon to the base", "(x + 1e-12) ** p"),
    "acos": ("acos at +-1 has an infinite gradient: clamp the input inside (-1, 1)",
             "torch.acos(x.clamp(-1 + 1e-6, 1 - 1e-6))"),
    "asin": ("asin at +-1 has an infinite gradient: clamp the input inside (-1, 1)",
             "torch.asin(x.clamp(-1 + 1e-6, 1 - 1e-6))"),
}


# a signal that vanishes with depth: the fixes the doctor tries on a copy (``doctor/_depth_fixes``), in words; the
# one that restores learning comes first, with what it measured.  "{what}" names the layers, "{init}" the init.
DEPTH_FIXES: dict[str, tuple[str, str]] = {
    "activation": ("replace the saturating activations ({what}) with ReLU (or SELU in a self-normalising net: "
                   "LeCun-normal init, no BatchNorm)", "nn.ReLU()  # in place of each {kind}"),
    "init": ("initialise the weights with a scale matched to the activation ({init}, std about 1/sqrt(fan_in)) "
             "instead of the current one ({what})", "{code}"),
    # a net with no activation modules (an LSTM/GRU keeps its tanh and sigmoid inside): each layer's own init
    "default_init": ("initialise the weights at each layer's own default init (reset_parameters(): about "
                     "1/sqrt(fan_in) or 1/sqrt(hidden_size)) instead of the current scale ({what})",
                     "for layer in model.modules():\n    if hasattr(layer, 'reset_parameters'):\n"
                     "        layer.reset_parameters()"),
}
# the variance-preserving init for the activation a net uses: (name, code of one layer)
MATCHED_INIT: dict[str, tuple[str, str]] = {
    "selu": ("LeCun normal", "nn.init.normal_(layer.weight, 0.0, (1 / layer.in_features) ** 0.5)"),
    "relu": ("He (kaiming) normal", _KAIMING),
    "saturating": ("Glorot (xavier) normal", "nn.init.xavier_normal_(layer.weight)"),
}

# where a forward stops depending on its input (``doctor/_lost_dependence``): the op met walking back from the
# output whose result is the same for every sample: (why, in words; the first fix; its code)
LOST_DEPENDENCE: dict[str, tuple[str, str, str]] = {
    "softmax_one": ("A softmax over a single unit is 1.0 whatever its input (it normalises one value against "
                    "itself), and its gradient is exactly zero",
                    "replace the softmax over the single output unit with a sigmoid (or give the raw logit to "
                    "BCEWithLogitsLoss), or use two output units with softmax / CrossEntropyLoss",
                    "prob = torch.sigmoid(logit)  # or: loss = nn.BCEWithLogitsLoss()(logit, y)"),
    "zero_factor": ("A product with a factor that is zero (a scale, a gate or a mask of zeros) is zero for every "
                    "sample", "find why the factor is zero (a scale initialised to 0, a mask of zeros, a gate "
                    "that is closed) and give it a non-zero start", ""),
    "zero_width": ("A layer with no output features passes nothing of the input on",
                   "give the layer its intended width (its out_features / out_channels is 0)", ""),
    "constant_like": ("The tensor is replaced by a constant of its shape, so what follows never sees the input",
                      "use the input itself where the constant (zeros_like, ones_like, fill_) stands", ""),
    "op": ("From here on every sample gives the same value",
           "check this op's arguments (the dimension it reduces or normalises over, a clamp or a constant it "
           "uses): it maps every sample's input to the same output", ""),
}

ENTRIES: tuple[Entry, ...] = (
    Entry(
        slug="label_negative",
        title="Targets below 0: ignored positions marked with a value the loss does not ignore",
        severity=Severity.ERROR,
        fixes=(
            Fix("set the ignored positions to -100 (CrossEntropyLoss's ignore_index), or pass ignore_index=-1",
                "labels[labels < 0] = -100  # or nn.CrossEntropyLoss(ignore_index=-1)"),
            Fix("remap labels to 0..C-1", "labels = labels - labels.min()  # or a label encoder"),
        ),
        sources=(CROSS_ENTROPY,),
        contexts=(),
    ),
    Entry(
        slug="label_out_of_range",
        title="Targets outside the output's class range",
        severity=Severity.ERROR,
        fixes=(
            Fix("make the last layer's out_features equal to the number of classes"),
            Fix("remap labels to 0..C-1", "labels = labels - labels.min()  # or a label encoder"),
            Fix("mark padding with the loss's ignore_index (-100 by default)",
                "F.cross_entropy(logits, y, ignore_index=-100)"),
        ),
        sources=(CROSS_ENTROPY,),
        contexts=(),
    ),
    Entry(
        slug="probabilities_to_loss",
        title="Probabilities fed to a loss that expects logits",
        severity=Severity.ERROR,
        fixes=(
            Fix("remove the final Softmax/Sigmoid and feed raw logits to CrossEntropyLoss/BCEWithLogitsLoss"),
            Fix("or keep probabilities and use NLLLoss on log-probabilities",
                "F.nll_loss(torch.log_softmax(logits, dim=1), y)"),
            Fix("give NLLLoss log-probabilities: log_softmax where the model applies softmax (or no softmax at all "
                "and CrossEntropyLoss)", "F.nll_loss(torch.log_softmax(logits, dim=1), y)"),
        ),
        sources=(CROSS_ENTROPY,),
        contexts=(),
    ),
    Entry(
        slug="initial_loss_off",
        title="Initial loss far from its expected value",
        severity=Severity.WARNING,
        fixes=(
            Fix("initialise the last layer small and its bias to 0 (or the log class prior)",
                "torch.nn.init.zeros_(model.head.bias); model.head.weight.data.mul_(0.01)"),
            Fix("check for an output scale (temperature, a multiplier) applied to the logits"),
        ),
        sources=(KARPATHY,),
        contexts=(),
    ),
    Entry(
        slug="activation_on_logits",
        title="An activation on the logits before a loss that expects raw logits",
        severity=Severity.ERROR,
        fixes=(
            Fix("remove the final ReLU/sigmoid: the last Linear's output is the logits",
                "model = nn.Sequential(*list(model.children())[:-1])  # or drop the activation in forward"),
            Fix("for multi-label targets use BCEWithLogitsLoss on the raw outputs (no sigmoid in the model)",
                "loss = F.binary_cross_entropy_with_logits(logits, y.float())"),
        ),
        sources=(CROSS_ENTROPY,),
        contexts=(),
    ),
    Entry(
        slug="frozen_parameters",
        title="Part of the model is frozen (requires_grad=False)",
        severity=Severity.WARNING,
        fixes=(
            Fix("if the whole model should train, unfreeze it", "for p in model.parameters(): p.requires_grad_(True)"),
            Fix("if freezing the backbone is deliberate, check that the optimizer gets the head's parameters",
                "opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)"),
        ),
        sources=(FINETUNE,),
        contexts=(),
    ),
    Entry(
        slug="unnormalised_inputs",
        title="Inputs far from unit scale",
        severity=Severity.WARNING,
        fixes=(
            Fix("divide raw pixels by 255, then standardise per channel",
                "x = (x / 255.0 - x_mean) / x_std  # or transforms.Normalize(mean, std) after ToTensor()"),
            Fix("standardise tabular features with training-set statistics",
                "x = (x - x_train.mean(0)) / x_train.std(0).clamp_min(1e-8)"),
        ),
        sources=(KARPATHY, CS231N_PRE),
        contexts=(),
    ),
    Entry(
        slug="no_gradient",
        title="Trainable parameters that get no gradient",
        severity=Severity.ERROR,
        fixes=(
            Fix("look for .detach(), .data, .item() or torch.no_grad() between these parameters and the loss"),
            Fix("remove unused modules, or freeze them on purpose", "p.requires_grad_(False)"),
            Fix("with DDP, unused parameters also need find_unused_parameters=True"),
        ),
        sources=(KARPATHY,),
        contexts=(),
    ),
    Entry(
        slug="nonfinite_forward",
        title="NaN or Inf in the forward pass",
        severity=Severity.ERROR,
        fixes=(
            Fix("guard log/sqrt/division inputs", "torch.log(x.clamp_min(1e-12))"),
            Fix("normalise the inputs; check the data for NaN/Inf", "assert torch.isfinite(x).all()"),
            Fix("use bfloat16 instead of float16, or keep softmax/logsumexp in float32"),
        ),
        sources=(ANOMALY,),
        contexts=(),
    ),
    Entry(
        slug="nonfinite_input",
        title="NaN or Inf in the batch itself",
        severity=Severity.ERROR,
        fixes=(
            Fix("impute or drop the NaN/Inf values in the data before training (the model only passes them on)",
                "assert torch.isfinite(x).all()  # at the data: impute missing values, or drop those rows"),
        ),
        sources=(ANOMALY,),
        contexts=(),
    ),
    Entry(
        slug="nonfinite_gradient",
        title="NaN or Inf in the gradients",
        severity=Severity.ERROR,
        fixes=(
            Fix("replay the step under detect_anomaly to name the op", "nbdebug.nan_sentinel(model, replay=True)"),
            Fix("guard sqrt/pow/division at 0 (their gradients are infinite there)",
                "torch.sqrt(x + 1e-12)"),
            Fix("clip gradients", _CLIP_CODE),
        ),
        sources=(ANOMALY, CLIP),
        contexts=(),
    ),
    Entry(
        slug="nonfinite_gradient_op",
        title="NaN or Inf in the gradients, made by a named op",
        severity=Severity.ERROR,
        fixes=(
            Fix("guard the op's input where its gradient is infinite (add an epsilon / use a safe form)",
                "torch.sqrt(x + 1e-12)  # or x.clamp_min(1e-12).log(), F.pairwise_distance(a, b)"),
            Fix("clip gradients", _CLIP_CODE),
        ),
        sources=(ANOMALY, CLIP),
        contexts=(),
    ),
    Entry(
        slug="exploding_gradients",
        title="Gradient norms growing without bound",
        severity=Severity.ERROR,
        fixes=(
            Fix("lower the learning rate (by 10x) and add warmup"),
            Fix("clip gradients", _CLIP_CODE),
            Fix("add normalisation (LayerNorm/BatchNorm) and check the initialisation scale"),
        ),
        sources=(PASCANU, CLIP),
        contexts=(),
    ),
    Entry(
        slug="vanishing_gradients",
        title="Gradient norms collapsing toward zero, layer by layer",
        severity=Severity.WARNING,
        fixes=(
            Fix("replace saturating activations (sigmoid/tanh) with ReLU/GELU"),
            Fix("use a variance-preserving init and residual connections",
                "torch.nn.init.kaiming_normal_(layer.weight, nonlinearity='relu')"),
            Fix("add normalisation layers between blocks"),
        ),
        sources=(PASCANU,),
        contexts=(),
    ),
    Entry(
        slug="dead_activations",
        title="ReLU units that never fire",
        severity=Severity.WARNING,
        fixes=(
            Fix("check the bias initialisation before the ReLU (a large negative bias kills units)"),
            Fix("lower the learning rate; use LeakyReLU/GELU", "torch.nn.LeakyReLU(0.01)"),
            Fix("normalise the inputs of the layer"),
        ),
        sources=(CS231N,),
        contexts=(),
    ),
    Entry(
        slug="dead_activations_at_init",
        title="ReLU units that never fire from the start",
        severity=Severity.WARNING,
        fixes=(
            # silent before any update: the learning rate did not kill them, and lowering it revives none
            Fix("re-initialise the biases before the ReLU (a large negative bias kills units)"),
            Fix("use LeakyReLU/GELU", "torch.nn.LeakyReLU(0.01)"),
        ),
        sources=(CS231N,),
        contexts=(),
    ),
    Entry(
        slug="cannot_overfit",
        title="The loss does not approach zero on one repeated batch",
        severity=Severity.ERROR,
        fixes=(
            Fix("look for a frozen layer, a detached tensor or a loss that does not match the output"),
            Fix("raise the learning rate for this tiny problem"),
            Fix("check the loss reduction (mean vs sum) against the gradient magnitude"),
        ),
        sources=(KARPATHY,),
        contexts=(),
    ),
    Entry(
        slug="ignores_input",
        title="The output does not depend on the input",
        severity=Severity.ERROR,
        fixes=(
            Fix("check that the forward pass uses its input (not a constant, a cached tensor or a detached copy)"),
            Fix("decode one batch and check that inputs and targets line up"),
        ),
        sources=(KARPATHY,),
        contexts=(),
    ),
    Entry(
        slug="zero_init",
        title="Weights initialised to a constant",
        severity=Severity.ERROR,
        fixes=(
            Fix("initialise these weights with small random values (check the init / initializer range: an "
                "initializer_factor or std of 0, a fill_(0) or zeros_ meant for a bias)",
                "for m in model.modules():\n    if hasattr(m, 'reset_parameters'):\n        m.reset_parameters()"),
        ),
        sources=(CS231N_INIT,),
        contexts=(),
    ),
    Entry(
        slug="vanishing_signal",
        title="The signal vanishes with depth",
        severity=Severity.ERROR,
        fixes=(Fix("use fewer layers, or add normalisation (BatchNorm) after each layer or residual connections"),
               Fix("initialise each layer with He (kaiming) init for ReLU", _KAIMING)),
        sources=(PASCANU, CS231N_INIT),
        contexts=(),
    ),
    Entry(
        slug="mixes_batch",
        title="One sample's output depends on other samples of the batch",
        severity=Severity.ERROR,
        fixes=(
            Fix("check view/reshape against transpose/permute where the batch and another dimension swap places",
                "x = x.transpose(0, 1)  # not x.view(S, B): view keeps the memory order and mixes the samples"),
            Fix("look for an operation over the batch dimension (a mean or a sum over dim 0, a normalisation across "
                "samples) in the forward"),
        ),
        sources=(KARPATHY,),
        contexts=(),
    ),
    Entry(
        slug="labels_unrelated",
        title="Labels that do not follow from the inputs",
        severity=Severity.ERROR,
        fixes=(
            Fix("shuffle inputs and labels together (one permutation for both, or shuffle=True in the DataLoader)",
                "perm = torch.randperm(len(X)); X, y = X[perm], y[perm]"),
            Fix("decode a few samples with their labels and look at them"),
        ),
        sources=(KARPATHY,),
        contexts=(),
    ),
    Entry(
        slug="dataloader_bottleneck",
        title="The training loop waits for data",
        severity=Severity.WARNING,
        fixes=(
            Fix("raise num_workers and pin memory",
                "DataLoader(ds, num_workers=4, pin_memory=True, persistent_workers=True)"),
            Fix("move decoding/augmentation out of __getitem__ or cache preprocessed data"),
            Fix("pack many small files into a binary format (WebDataset, memory-mapped arrays)"),
        ),
        sources=(DATA,),
        contexts=(),
    ),
    Entry(
        slug="not_reproducible",
        title="Two runs with the same seed diverge",
        severity=Severity.WARNING,
        fixes=(
            Fix("seed everything before building the model and data", "nbdebug.set_reproducible(0)"),
            Fix("seed every generator you create (numpy default_rng, torch.Generator, random.Random)"),
            Fix("find non-deterministic kernels", "torch.use_deterministic_algorithms(True)"),
        ),
        sources=(RANDOMNESS,),
        contexts=(),
    ),
    Entry(
        slug="gradient_spike",
        title="A gradient norm far above its running mean",
        severity=Severity.WARNING,
        fixes=(
            Fix("clip gradients", _CLIP_CODE),
            Fix("look at the batch of that step (dirty data, an outlier)"),
            Fix("lower the learning rate or lengthen warmup"),
        ),
        sources=(PASCANU, CLIP),
        contexts=(),
    ),
    Entry(
        slug="gradient_clipped",
        title="Gradients clipped",
        severity=Severity.INFO,
        fixes=(
            Fix("clipping on most steps hides the real gradient scale: lower the learning rate, or raise max_norm "
                "to about the typical pre-clip norm", "TrainingArguments(..., max_grad_norm=1.0)"),
        ),
        sources=(CLIP,),
        contexts=(),
    ),
    Entry(
        slug="skipped_steps",
        title="Steps skipped by the AMP GradScaler (inf/NaN gradients)",
        severity=Severity.INFO,
        fixes=(
            Fix("a few skipped steps while the scale calibrates are normal"),
            Fix("many in a row: look for overflow (use bfloat16, lower the learning rate, clip after unscale_)",
                "scaler.unscale_(opt); " + _CLIP_CODE),
        ),
        sources=(AMP,),
        contexts=(),
    ),
    Entry(
        slug="loss_spike",
        title="The loss jumps far above its recent level",
        severity=Severity.WARNING,
        fixes=(
            Fix("clip gradients and lower the learning rate", _CLIP_CODE),
            Fix("look at the batch of that step"),
        ),
        sources=(KARPATHY,),
        contexts=(),
    ),
    Entry(
        slug="loss_plateau",
        title="The loss stopped moving",
        severity=Severity.INFO,
        fixes=(
            Fix("raise the learning rate or change the schedule"),
            Fix("overfit one batch to check that the model can learn at all", "nbdebug.doctor(model, (x, y), loss_fn)"),
        ),
        sources=(KARPATHY,),
        contexts=(),
    ),
    Entry(
        slug="chance_plateau",
        title="The loss sits at chance level -log(1/C)",
        severity=Severity.ERROR,
        fixes=(
            Fix("overfit one batch to check the model can learn at all", "nbdebug.doctor(model, (x, y), loss_fn)"),
            Fix("train on zeroed inputs: if the loss is the same, the model ignores its input"),
            Fix("check that labels and inputs line up and that no input is silently dropped"),
        ),
        sources=(KARPATHY,),
        contexts=(),
    ),
    Entry(
        slug="no_optimizer_steps",
        title="No optimizer step was recorded",
        severity=Severity.WARNING,
        fixes=(
            Fix("build the model (and its optimizer) in an earlier cell: a cell that rebinds the model trains a new "
                "object the monitor does not watch"),
            Fix("make sure the loop calls optimizer.step() (a torch.optim optimizer over the model's parameters)"),
            Fix("loops without a torch optimizer: call the monitor's step() after each update",
                "mon.step()  # or _gradmonitor.step() inside %%gradmonitor"),
        ),
        sources=(OPT_HOOK,),
        contexts=(),
    ),
    Entry(
        slug="optimizer_coverage",
        title="The optimizer does not hold the model's trainable parameters",
        severity=Severity.ERROR,
        fixes=(
            Fix("build the optimizer over every trainable parameter of the model you train",
                "opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)"),
            Fix("build the optimizer after the model is final (after .to(device), after replacing a head), from "
                "the same object you train"),
        ),
        sources=(KARPATHY, OPTIM),
        contexts=(),
    ),
    Entry(
        slug="weight_decay_high",
        title="Weight decay overpowers the loss's gradient",
        severity=Severity.WARNING,
        fixes=(
            Fix("use a weight decay of 0.01 to 0.1 with AdamW (decoupled), or 1e-4 to 5e-4 with SGD",
                "opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)"),
            Fix("leave biases and norm layers out of weight decay (a second parameter group with weight_decay=0)"),
        ),
        sources=(ADAMW, OPTIM),
        contexts=(),
    ),
    Entry(
        slug="eval_mode",
        title="The model was left in eval mode for training",
        severity=Severity.WARNING,
        fixes=(
            Fix("switch to train mode before the training loop (and back to eval for validation)",
                "model.train()"),
        ),
        sources=(MODES,),
        contexts=(),
    ),
    Entry(
        slug="grads_accumulate",
        title="Gradients accumulate across steps (zero_grad() is not called)",
        severity=Severity.WARNING,
        fixes=(
            Fix("clear the gradients once per optimizer step",
                "opt.zero_grad(set_to_none=True)\nloss.backward()\nopt.step()"),
            Fix("accumulating on purpose: call zero_grad() after every N-th step, and divide the loss by N"),
        ),
        sources=(ZERO_GRAD,),
        contexts=(),
    ),
    Entry(
        slug="loss_below_minimum",
        title="The loss goes below what its definition allows",
        severity=Severity.ERROR,
        fixes=(
            Fix("give NLLLoss log-probabilities (log_softmax), or give CrossEntropyLoss the raw logits",
                "loss = F.nll_loss(F.log_softmax(logits, dim=1), y)  # or F.cross_entropy(logits, y)"),
            Fix("check which tensors the loss receives: (outputs, targets), in that order"),
        ),
        sources=(CROSS_ENTROPY, NLL),
        contexts=(),
    ),
    Entry(
        slug="fits_too_easily",
        title="The batch is learned too easily: the answer reaches the model another way",
        severity=Severity.WARNING,
        fixes=(
            Fix("make sure no input holds the target (a label column left in the features, a future token)"),
            Fix("for next-token prediction, shift the labels against the inputs",
                "logits, labels = logits[:, :-1], input_ids[:, 1:]"),
            Fix("compute the loss on the model's output and the batch's targets, not on two views of one tensor"),
            Fix("mask the padding out of the labels with -100, so the loss is not taken over padding",
                "labels[attention_mask == 0] = -100"),
        ),
        sources=(KARPATHY,),
        contexts=(),
    ),
    # -- causes named in the fixes of other findings (see the module's docstring) --------------------------------
    Entry(
        slug="lr_too_high",
        title="The learning rate is too high for this model",
        severity=Severity.WARNING,
        fixes=(
            Fix("lower the learning rate (by 10x, then again until the loss falls steadily)",
                "for g in opt.param_groups: g['lr'] *= 0.1"),
            Fix("add warmup and clip gradients", _CLIP_CODE),
        ),
        sources=(KARPATHY,),
        contexts=(),
    ),
    Entry(
        slug="lr_too_low",
        title="The learning rate is too low, or the run too short, for this problem",
        severity=Severity.INFO,
        fixes=(
            _RAISE_LR,
            Fix("give the overfit run more steps", "nbdebug.doctor(model, batch, loss_fn, steps=500)"),
        ),
        sources=(KARPATHY,),
        contexts=(),
    ),
    Entry(
        slug="input_scale_downstream",
        title="Logits and activations driven by the scale of the inputs",
        severity=Severity.WARNING,
        fixes=(
            Fix("normalise the inputs to about unit scale (divide pixels by 255, then standardise)",
                "x = (x / 255.0 - mean) / std  # or transforms.Normalize(mean, std) after ToTensor()"),
            Fix("standardise tabular features with statistics of the training set",
                "x = (x - x_train.mean(0)) / x_train.std(0).clamp_min(1e-8)"),
        ),
        sources=(KARPATHY, CS231N_PRE),
        contexts=(),
    ),
    Entry(
        slug="overfit_out_of_time",
        title="The overfit run stopped at the time budget before its verdict was clear",
        severity=Severity.INFO,
        fixes=(
            # no "raise the learning rate" here: a run cut short says nothing against the lr (no experiment ran)
            Fix("give the doctor more time", "nbdebug.doctor(model, batch, loss_fn, time_budget=None)"),
        ),
        sources=(KARPATHY,),
        contexts=(),
    ),
    Entry(
        slug="ids_as_numbers",
        title="Ids fed to the model as numbers",
        severity=Severity.WARNING,
        fixes=(Fix("look the ids up in an nn.Embedding (one per id field) instead of casting them to float",
                   "self.user = nn.Embedding(num_users, dim)  # then self.user(user_ids), not a Linear on "
                   "user_ids.float()"),
               Fix("or one-hot encode a field with few distinct values", "F.one_hot(ids, num_classes).float()")),
        sources=(KARPATHY,),
        contexts=(),
    ),
    Entry(
        slug="nonfinite_loss_code",
        title="A loss that takes the log of a probability",
        severity=Severity.ERROR,
        fixes=(Fix("compute the loss from the logits in a fused, stable form (BCEWithLogitsLoss, F.logsigmoid, "
                   "log_softmax) instead of the log of a sigmoid or softmax",
                   "loss = F.binary_cross_entropy_with_logits(logits, y)  # not -(y * log(sigmoid(logits)) + ...)"),
               Fix("or keep the probabilities away from 0 and 1 before the log", "torch.log(p.clamp(1e-7, 1 - 1e-7))")),
        sources=(ANOMALY,),
        contexts=(),
    ),
    Entry(
        slug="nonfinite_half_precision",
        title="Weights trained in half precision",
        severity=Severity.ERROR,
        fixes=(Fix("train in float32 (model.float()), with autocast for the speed of half precision",
                   "model.float()\nwith torch.autocast(device_type='cuda', dtype=torch.bfloat16):\n"
                   "    loss = loss_fn(model(x), y)"),
               Fix("or, for float16 autocast, scale the loss with a GradScaler; keep the optimizer's eps "
                   "representable (eps=1e-4 in float16)",
                   "scaler = torch.amp.GradScaler()\nscaler.scale(loss).backward(); scaler.step(opt); scaler.update()")),
        sources=(ANOMALY,),
        contexts=(),
    ),
    Entry(
        slug="init_too_small",
        title="Weights initialised far too small",
        severity=Severity.ERROR,
        fixes=(Fix("re-initialise the layers at a variance-preserving scale: PyTorch's default init (drop the "
                   "custom normal_(std=...)), or He (kaiming) init for ReLU",
                   "for m in model.modules():\n    if isinstance(m, (nn.Linear, nn.Conv2d)): m.reset_parameters()"),
               Fix("initialise each layer with He (kaiming) init for ReLU", _KAIMING)),
        sources=(CS231N_INIT,),
        contexts=(),
    ),
    Entry(
        slug="init_too_large",
        title="Weights initialised far too large",
        severity=Severity.WARNING,
        fixes=(Fix("initialise the layers at a variance-preserving scale: PyTorch's default init (or a config's "
                   "initializer_range at its usual 0.02)",
                   "for m in model.modules():\n    if isinstance(m, (nn.Linear, nn.Conv2d)): m.reset_parameters()"),
               Fix("initialise the last layer small and its bias to 0",
                   "torch.nn.init.zeros_(model.head.bias); model.head.weight.data.mul_(0.01)")),
        sources=(CS231N_INIT, KARPATHY),
        contexts=(),
    ),
    Entry(
        slug="batch_axis_softmax",
        title="A softmax taken over the batch's samples",
        severity=Severity.ERROR,
        fixes=(
            Fix("take the (log-)softmax over the class dimension (dim=-1), not over dim 0, the batch",
                "F.log_softmax(logits, dim=-1)"),
            Fix("or drop the log_softmax and give the raw logits to CrossEntropyLoss",
                "loss = nn.CrossEntropyLoss()(logits, y)"),
        ),
        sources=(NLL,),
        contexts=(),
    ),
    Entry(
        slug="batch_axis_view",
        title="A view or reshape taken for a transpose",
        severity=Severity.ERROR,
        fixes=(
            Fix("use transpose/permute, not view/reshape, where the batch and another dimension swap places",
                "x = x.transpose(0, 1)"),
        ),
        sources=(KARPATHY,),
        contexts=(),
    ),
    Entry(
        slug="model_too_small",
        title="A model too small for the batch",
        severity=Severity.ERROR,
        fixes=(
            Fix("add a hidden layer with a non-linearity between the input and the output layer",
                "model = nn.Sequential(nn.Linear(d_in, 64), nn.ReLU(), nn.Linear(64, n_out))"),
        ),
        sources=(KARPATHY,),
        contexts=(),
    ),
    Entry(
        slug="consequence_of_another",
        title="A finding caused by another finding",
        severity=Severity.WARNING,
        summary="{message}; this follows from the finding above, {cause_title}: fix that first",
        fixes=(Fix("fix that first ({cause_title}): {cause_fix}"),),
        sources=(KARPATHY,),
        contexts=(),
    ),
)

_NBDEBUG = "nbdebug default"

THRESHOLDS: tuple[Threshold, ...] = (
    Threshold("spike_score", 50.0, "gradient spike score (norm / running mean) above which a step is a spike",
              _NBDEBUG),
    Threshold("spike_ema", 0.9, "decay of the running mean of each gradient norm", _NBDEBUG),
    Threshold("spike_warmup", 5.0, "steps a running mean needs before spike scores are reported", _NBDEBUG),
    Threshold("explode_growth", 1e3,
              "growth of the global gradient norm (late / early median) that counts as exploding", PASCANU),
    Threshold("vanish_ratio", 1e-4, "smallest/largest per-layer gradient norm ratio below which gradients vanish",
              PASCANU),
    Threshold("signal_vanish_ratio", 1e-3,
              "share of the first layer's input-dependent output scale (std over the samples) below which a deeper "
              "layer's output has lost the signal at init", PASCANU),
    Threshold("init_small_rel", 0.03, "share of the std of PyTorch's default init for a layer's fan-in under which "
              "a Linear/conv layer's weights start too small", CS231N_INIT),
    Threshold("init_loss_gross", 2.0, "multiple of the chance loss at or above which a classifier's loss at init is a "
              "broken init or output scale (a warning whatever training does); under it, a copy with the output layer "
              "started small is trained as long as the user's run to judge it", KARPATHY),
    Threshold("init_large_rel", 5.0, "multiple of the std of PyTorch's default init for a layer's fan-in over which "
              "a Linear/conv layer's weights start too large", CS231N_INIT),
    Threshold("init_gain_min", 1e-3, "the output's spread over the samples against the input's at init under which "
              "layers that start too small have lost the signal", CS231N_INIT),
    Threshold("vanish_depth_correlation", 0.6,
              "rank correlation of per-layer gradient size with depth above which a spread is a vanishing decay",
              PASCANU),
    Threshold("input_scale_std", 5.0, "input std (or |mean|) above which inputs count as unnormalised", CS231N_PRE),
    Threshold("overfit_still_rel", 0.02, "relative loss change on one batch below which the loss has not moved",
              KARPATHY),
    Threshold("head_learns_rel", 0.05,
              "share of its initial loss a run must go below the label frequencies' loss when the rest of the model "
              "is frozen on purpose: then the trainable part learns from the input, and not memorising the batch is "
              "no fault (half of overfit_learns_rel: a head on frozen features may learn little)", KARPATHY),
    Threshold("still_params_rel", 1e-4,
              "relative change of the parameters after 8 steps below which (with a loss that has not moved) they "
              "do not move at all, and the overfit run stops", _NBDEBUG),
    Threshold("tiny_lr", 1e-5, "learning rate below which a loss that does not move is blamed on the lr", KARPATHY),
    Threshold("loss_spike_mad", 8.0,
              "loss above its recent median by this many median absolute deviations (and the factor) is a spike",
              _NBDEBUG),
    Threshold("generalise_margin", 0.1,
              "accuracy on a second batch above the commonest-class rate needed to show that labels follow inputs",
              KARPATHY),
    Threshold("generalise_learned_rel", 0.3,
              "share of its initial loss (or of the label frequencies' loss) the overfit run must shed before a "
              "second batch is compared: a model that learned that much of one batch predicts others above chance "
              "when labels follow inputs", KARPATHY),
    Threshold("padding_in_loss_share", 0.1,
              "share of the label positions a loss counts that are padding, above which the loss is over padding",
              _NBDEBUG),
    Threshold("loss_spike_over_max", 1.5,
              "loss above this many times the highest of its last 5 windows (and the factor) is a spike",
              _NBDEBUG),
    Threshold("vanish_abs", 1e-8, "global gradient norm below which the gradients have vanished", _NBDEBUG),
    Threshold("loss_spike_factor", 3.0, "loss above this many times its recent median counts as a spike", _NBDEBUG),
    Threshold("plateau_rel_change", 0.01, "relative change of the windowed loss below which it is a plateau",
              _NBDEBUG),
    Threshold("chance_tolerance", 0.1, "relative distance to -log(1/C) that counts as 'at chance level'", KARPATHY),
    Threshold("overfit_rel", 0.1, "final/initial loss ratio a model must beat on one repeated batch", KARPATHY),
    Threshold("overfit_fail_rel", 0.5,
              "final/initial loss ratio above which a model cannot overfit one batch (error)", KARPATHY),
    Threshold("overfit_abs", 0.05, "final loss below which overfitting one batch counts as done", KARPATHY),
    Threshold("overfit_learns_rel", 0.1,
              "share of its initial loss a run on one batch must shed to count as learning: then a batch not fitted "
              "in time is a note (a higher lr fits it faster; a head on frozen features need not memorise it), "
              "not a fault", KARPATHY),
    Threshold("noisy_learns_rel", 0.5,
              "share of its initial loss (or of the label frequencies' loss) a noisy run must shed (with dropout, "
              "measured with dropout off) to count as learning the batch: then a training loss kept up by the "
              "model's own noise (dropout, noise layers, sampling), where a lower lr does not do better, is no "
              "fault", KARPATHY),
    Threshold("init_loss_rel", 0.5, "relative distance of the initial loss from -log(1/C) that is 'far'", KARPATHY),
    Threshold("init_loss_vs_mean", 4.0,
              "a regression's initial loss this many times the loss of predicting the targets' mean is 'far above'",
              KARPATHY),
    Threshold("dead_fraction", 0.5, "fraction of ReLU units silent on the whole batch that is reported", CS231N),
    Threshold("zero_input_margin", 0.2, "zero-input final loss must exceed this share of the initial loss gap",
              KARPATHY),
    Threshold("input_use_rel", 1e-3, "relative change of the output with the inputs zeroed above which the model uses "
              "its input (a forward on a constant or a cached tensor changes it by 0)", KARPATHY),
    Threshold("restores_rel", 0.25,
              "share of the initial loss an experiment must gain over the user's setup (at the same step) to count "
              "as restoring learning", KARPATHY),
    Threshold("restores_gain", 5.0,
              "how many times as far as the user's setup an experiment's loss must fall (at the same step, and by a "
              "tenth of its start) to count as restoring learning to a run that barely moves", KARPATHY),
    Threshold("too_easy_steps", 3.0, "steps within which fitting a batch counts as too easy", KARPATHY),
    Threshold("reconstruction_correlation", 0.5,
              "correlation of a loss's target with an input of the same shape above which the target is that input "
              "made noisy or degraded (a denoiser, an image-to-image model): the input holds the target by design",
              _NBDEBUG),
    Threshold("shuffled_fit_rel", 0.5,
              "loss with targets shuffled against inputs, as a share of the initial loss, below which the loss "
              "does not depend on which target goes with which input", KARPATHY),
    Threshold("accumulate_correlation", 0.97,
              "correlation of the global gradient norm with the step above which the norm grows linearly", _NBDEBUG),
    Threshold("accumulate_growth", 10.0, "growth of the global gradient norm (last / first) that counts as "
              "accumulation when it is linear in the step", _NBDEBUG),
    Threshold("data_wait_abs", 0.005,
              "seconds of waiting per batch below which the DataLoader is not reported, whatever its share of a tiny "
              "model's step: an in-memory dataset indexed and collated in the main process takes 0.6-0.7 ms for a "
              "batch of 256 on an idle CPU and several ms on a loaded one, so a lower floor would report that noise "
              "(a slow dataset that waits 1-5 ms per batch is missed)", DATA),
    Threshold("data_wait_fraction", 0.5, "share of step time spent waiting for the DataLoader that is a bottleneck",
              DATA),
)
