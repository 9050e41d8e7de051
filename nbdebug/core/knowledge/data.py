"""Data and losses: target ranges, NaN losses, DataLoader workers."""

from __future__ import annotations

from nbdebug.core._findings import Fix, Severity
from nbdebug.core.knowledge._schema import Entry

__all__ = ["ENTRIES", "COLLATE_GRAD", "COLLATE_GRAD_STEP", "COLLATE_STRUCTURE"]

ENTRIES: tuple[Entry, ...] = (
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
            r"index -?\d+ is out of bounds for dimension \d+ with size \d+",
            r"Class values must be smaller than num_classes",
            r"Assertion [`']cur_target >= 0 && cur_target < n_classes[`'] failed",
        ),
        priority=65,
        facts=(
            (r"Target (?P<target>-?\d+) (?:is )?out of bounds", {"target": "int"}),
            (r"index (?P<index>-?\d+) is out of bounds for dimension (?P<dim>\d+) with size (?P<size>\d+)",
             {"index": "int", "dim": "int", "size": "int"}),
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
        sources=("https://pytorch.org/docs/stable/generated/torch.nn.CrossEntropyLoss.html",),
    ),
    Entry(
        slug="nan_loss",
        title="NaN / Inf in the loss or gradients",
        summary=(
            "A non-finite value (NaN or Inf) appeared[[: {function} returned NaN in its output {output_index}]]. "
            "Once a NaN reaches the weights every later step is NaN too."
        ),
        keywords=("invalid value encountered", "nan", "non-finite", "inf", "invalid values", "loss scale"),
        patterns=(
            r"invalid value encountered in double_scalars",
            r"(?:contained|contains) non-finite values",
            r"Function '\w+' returned nan values in its \d+(?:st|nd|rd|th) output",
            r"for gradients from .parameters. is non-finite",
            r"\b[Ll]oss (?:is|became|=) (?:nan|NaN|inf|Inf)\b",
            # training logs: "Train loss: nan", "loss=nan"
            r"\b[Ll]oss\s*[:=]\s*(?:nan|NaN|inf|Inf)\b",
            r"\bNaN (?:or Inf )?(?:loss|found in (?:the )?loss)",
            r"Detected (?:NaN|nan|inf|Inf) (?:in|values in) (?:the )?(?:loss|gradients?)",
            r"Loss became infinite or NaN",
            r"to satisfy the constraint \w+\((?:[^\n()]|\([^\n()]*\))*\), but found invalid values",
            r"Minimum loss scale reached",
            r"NaN or Inf found in input tensor",
            r"reducing loss scale to (?:0(?:\.0)?\b|\d(?:\.\d+)?e-\d{2,})",
            r"Non-finite values in `?[\w.]+",
            # a library's check of its input (scikit-learn's "Input contains NaN, infinity or a value too large",
            # "Input X contains NaN"), and torch.distributions' older wording of the constraint check above
            r"\b(?i:input|array|values|tensor|data)(?: [A-Za-z_]\w{0,30})? (?:contains|has) (?:NaN|nan|infinity|inf)\b",
            r"\bThe parameter \w+ has invalid values\b",
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
            Fix("Find the first module and step that produce NaN/Inf (nbdebug replays the step on a copy)",
                "with nbdebug.nan_sentinel(model, replay=True) as rec:   # or: %%nanhunt model --replay\n"
                "    train_step(batch)\n"
                "# gradient norms per layer over a run: with nbdebug.GradMonitor(model) as mon: ..."),
            Fix("Guard numerically fragile operations", "torch.log(p.clamp_min(1e-8))\nx / (x.norm(dim=-1, keepdim=True) + 1e-8)\nF.log_softmax(logits, -1)  # not log(softmax)"),
            Fix("Clip gradients and lower the learning rate", "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"),
            Fix("Find the first operation producing NaN (slow; one step only)", "with torch.autograd.detect_anomaly():\n    loss.backward()"),
            Fix("Check the data", "assert torch.isfinite(x).all() and torch.isfinite(y).all()"),
        ),
        first_step="Run the failing step under nbdebug.nan_sentinel (or %%nanhunt): it names the first module and "
        "operation whose output or gradient turned non-finite; then add an epsilon or a stable form there (e.g. "
        "LogBackward0 -> a log of 0).",
        sources=("https://pytorch.org/docs/stable/autograd.html",
                 "https://pytorch.org/docs/stable/autograd.html#anomaly-detection"),
    ),
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
            r"^[ \t]*File \"(?=[^\"\n]*[/\\]torch[/\\]utils[/\\]data[/\\])[^\"\n]*\", line \d+, in _worker_loop\b",
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
        sources=("https://pytorch.org/docs/stable/data.html#multi-process-data-loading",),
    ),
    Entry(
        slug="index_out_of_range",
        title="An index is outside an embedding or lookup table",
        summary=(
            "An index given to an embedding or index_select is outside the table[[: the embedding has "
            "{num_embeddings} rows and got index {index_max}]][[ (index {index} for a table of {size} rows)]]."
        ),
        keywords=("index out of range", "out of table"),
        patterns=(
            r"index out of range in self",
            r"Tried to access index \d+ out of table with \d+ rows",
            # before 1.5 the embedding's index_select raised from TH with the source file instead of "in self"
            r"index out of range at \S{0,160}THTensorEvenMoreMath\.cpp",
        ),
        priority=66,
        facts=(
            (r"Tried to access index (?P<index>\d+) out of table with (?P<size>\d+) rows", {"index": "int", "size": "int"}),
        ),
        causes=(
            "Token ids at or above the embedding's vocabulary size: the tokenizer and the model disagree (new special "
            "tokens added to the tokenizer, or a tokenizer from another checkpoint).",
            "A sequence longer than the position-embedding table (max_position_embeddings, e.g. 512 for BERT).",
            "A padding / unknown id outside the table (e.g. -1 or vocab_size used as padding_idx).",
            "Category ids for an nn.Embedding that were never re-numbered to 0..n-1.",
        ),
        fixes=(
            Fix("Compare the largest id with the table size", "print(ids.min().item(), ids.max().item(), emb.num_embeddings)"),
            Fix("Grow the embedding after adding tokens to the tokenizer", "model.resize_token_embeddings(len(tokenizer))"),
            Fix("Truncate sequences to the model's position limit",
                "enc = tokenizer(texts, truncation=True, max_length=model.config.max_position_embeddings)"),
            Fix("Re-number category ids to 0..n-1", "codes, uniques = pd.factorize(df['category'])\nemb = nn.Embedding(len(uniques), dim)"),
        ),
        first_step="Print ids.max() and ids.min() of the batch that failed next to num_embeddings of the embedding "
        "that raised: every id must be in [0, num_embeddings).",
        sources=("https://pytorch.org/docs/stable/generated/torch.nn.Embedding.html",
                 "https://github.com/huggingface/transformers/issues/1791"),
    ),
    Entry(
        slug="collate_mismatch",
        title="The DataLoader cannot stack samples of different sizes into a batch",
        summary=(
            "The DataLoader's collate function stacks the samples of a batch into one tensor, and they have different "
            "shapes[[: {left_shape} and {right_shape}]]."
        ),
        keywords=("stack expects each tensor to be equal size", "equal size"),
        patterns=(r"stack expects each tensor to be equal size, but got",),
        priority=64,
        # only when the text shows the collate step (default_collate, a collate_fn): a torch.stack in the user's
        # own code, even in a Dataset's __getitem__ run by a worker, is an ordinary shape mismatch
        extra={"requires": r"collate"},
        facts=(
            (r"stack expects each tensor to be equal size, but got (?P<left_shape>\[[\d, ]*\]) at entry \d+ and "
             r"(?P<right_shape>\[[\d, ]*\]) at entry \d+", {"left_shape": "shape", "right_shape": "shape"}),
        ),
        causes=(
            "Images of different sizes without a Resize / RandomCrop to one size in the transform.",
            "Variable-length sequences (text, audio, point clouds) with no padding in a collate_fn.",
            "Mixed channel counts: some images grayscale or RGBA among RGB ones.",
            "A per-sample target of variable size (boxes, masks) that the default collate tries to stack.",
        ),
        fixes=(
            Fix("Resize (or crop) every image to one size in the transform",
                "transform = T.Compose([T.Resize((224, 224)), T.ToTensor()])"),
            Fix("Pad variable-length sequences in a collate_fn",
                "from torch.nn.utils.rnn import pad_sequence\n"
                "def collate(batch):\n    xs, ys = zip(*batch)\n"
                "    return pad_sequence(xs, batch_first=True), torch.tensor(ys)\n"
                "loader = DataLoader(ds, batch_size=32, collate_fn=collate)"),
            Fix("Force one channel layout when loading images", "img = Image.open(path).convert('RGB')"),
            Fix("Keep variable-size targets as a list", "def collate(batch):\n    return tuple(zip(*batch))  # detection-style"),
        ),
        first_step="Print the shape of a few samples (ds[i][0].shape for i in range(8)): the sizes that differ "
        "tell whether to resize, pad or convert channels.",
        sources=("https://pytorch.org/docs/stable/data.html#dataloader-collate-fn",
                 "https://github.com/milesial/Pytorch-UNet/issues/285"),
    ),
    Entry(
        slug="batchnorm_single_sample",
        title="BatchNorm got a batch of one sample in training mode",
        summary=(
            "A BatchNorm layer in training mode needs more than one value per channel to compute a variance"
            "[[, and got input of size {input_shape}]]. Usually the last batch of the epoch has a single sample."
        ),
        keywords=("more than 1 value per channel",),
        patterns=(r"Expected more than 1 value per channel when training",),
        priority=67,
        facts=((r"got input size (?:torch\.Size\()?(?P<input_shape>\[[\d, ]*\])", {"input_shape": "shape"}),),
        causes=(
            "The dataset size leaves a last batch of one sample (len(ds) % batch_size == 1).",
            "A batch size of 1 in training (large images or videos on a small GPU).",
            "Global pooling makes the spatial size 1x1, so with batch 1 a BatchNorm after it sees one value per channel "
            "(ASPP / pyramid pooling heads).",
            "Running inference without model.eval().",
        ),
        fixes=(
            Fix("Drop the incomplete last batch", "loader = DataLoader(ds, batch_size=32, shuffle=True, drop_last=True)"),
            Fix("Switch to eval mode for inference", "model.eval()\nwith torch.no_grad():\n    out = model(x)"),
            Fix("Use a normalisation that does not depend on the batch",
                "nn.GroupNorm(num_groups=32, num_channels=c)  # instead of nn.BatchNorm2d(c)"),
        ),
        first_step="Check len(dataset) % batch_size: if it is 1, pass drop_last=True to the training DataLoader.",
        sources=("https://pytorch.org/docs/stable/generated/torch.nn.BatchNorm2d.html",
                 "https://github.com/open-mmlab/mmsegmentation/issues/272"),
    ),
    Entry(
        slug="multiprocessing_pickle",
        title="An object could not be pickled to start a worker process",
        summary=(
            "Starting worker processes with the 'spawn' method (the default on Windows and macOS) pickles the dataset, "
            "collate_fn and worker_init_fn[[; {object} is defined inside a function (or is a lambda), which pickle "
            "cannot send]]."
        ),
        keywords=("pickle local object", "can't pickle", "can't get attribute"),
        patterns=(
            r"Can't pickle local object",
            r"Can't pickle <function <lambda>",
            r"Can't get attribute '\w+' on <module '__main__'",
        ),
        priority=60,
        # only with a sign of a child process: the same messages come from torch.save / torch.load of a whole
        # model (a lambda attribute, a class defined in the training script), which is not this category
        extra={"requires": r"spawn|multiprocessing|[Ff]orkingPickler|DataLoader|Dataset|num_workers|worker|popen_|"
                           r"reduction\.py|__mp_main__|Process\b|Pool\b"},
        facts=(
            (r"Can't pickle local object '(?P<object>[\w.<>]+)'", {"object": "str"}),
            (r"Can't get attribute '(?P<object>\w+)' on <module '__main__'", {"object": "str"}),
        ),
        causes=(
            "A lambda or a nested function in the Dataset, its transform, collate_fn or worker_init_fn, with "
            "num_workers > 0 on Windows or macOS (spawn start method).",
            "A Dataset class defined in a notebook cell: spawned workers import __main__ and cannot find it "
            "(\"Can't get attribute ... on <module '__main__'>\").",
            "A closure created inside a function (get_loaders.<locals>.<lambda>) passed to the DataLoader.",
        ),
        fixes=(
            Fix("Replace the lambda with a function defined at module level",
                "def to_float(x):\n    return x.float()\n\nds = MyDataset(transform=to_float)  # not transform=lambda x: x.float()"),
            Fix("Use functools.partial for arguments, which pickles", "from functools import partial\ncollate = partial(pad_collate, pad_id=0)"),
            Fix("In a notebook: move the Dataset into a .py file and import it", "# my_data.py: class MyDataset(Dataset): ...\nfrom my_data import MyDataset"),
            Fix("Or load in the main process", "DataLoader(ds, batch_size=32, num_workers=0)"),
        ),
        first_step="Find the lambda or nested function named in the message and define it at the top level of a "
        "module (or set num_workers=0 to confirm that this is the cause).",
        sources=("https://pytorch.org/docs/stable/data.html#platform-specific-behaviors",
                 "https://docs.python.org/3/library/pickle.html#what-can-be-pickled-and-unpickled"),
    ),
    Entry(
        slug="tokenizer_padding",
        title="The tokenizer has no padding token",
        summary=(
            "Padding was requested[[ ({tokenizer})]], but the tokenizer defines no pad token (GPT-2, LLaMA and most "
            "decoder-only tokenizers ship without one)."
        ),
        keywords=("padding token", "pad samples"),
        patterns=(
            r"Asking to pad but the tokenizer does not have a padding token",
            r"You are attempting to pad samples but the tokenizer you are using \(\w+\) does not have one",
        ),
        priority=60,
        facts=((r"the tokenizer you are using \((?P<tokenizer>\w+)\)", {"tokenizer": "str"}),),
        causes=(
            "A decoder-only model's tokenizer (GPT-2, LLaMA, Mistral, Falcon) used with padding=True or a padding "
            "data collator.",
            "A tokenizer loaded from a checkpoint whose tokenizer_config.json has no pad_token.",
        ),
        fixes=(
            Fix("Reuse the end-of-sequence token for padding (and mask it in the loss)",
                "tokenizer.pad_token = tokenizer.eos_token\nmodel.config.pad_token_id = tokenizer.pad_token_id"),
            Fix("Or add a dedicated pad token and grow the embedding",
                "tokenizer.add_special_tokens({'pad_token': '[PAD]'})\nmodel.resize_token_embeddings(len(tokenizer))"),
            Fix("Pad on the left for batched generation with decoder-only models", "tokenizer.padding_side = 'left'"),
        ),
        first_step="Set tokenizer.pad_token = tokenizer.eos_token right after loading the tokenizer (and "
        "model.config.pad_token_id to match).",
        sources=("https://huggingface.co/docs/transformers/main_classes/tokenizer",
                 "https://github.com/huggingface/trl/issues/466"),
    ),
    Entry(
        slug="loss_broadcast",
        title="Loss input and target have different shapes: broadcasting can train the wrong objective",
        severity=Severity.WARNING,
        summary=(
            "The loss got a target and an input of different shapes[[ (target {target_shape}, input {input_shape})]]. "
            "{broadcast_detail}"
        ),
        keywords=("using a target size",),
        patterns=(r"Using a target size \((?:torch\.Size\()?\[[\w,\s]*\]\)?\) that is different to\s+(?:the\s+)?input size",),
        priority=30,
        extra={"warning": "yes",
               "broadcast_detail_default": "They are broadcast against each other: when the broadcast shape has more "
               "elements than either of them, the loss compares every prediction with every target and the model "
               "learns the wrong thing without any error; print both shapes to see which case this is."},
        facts=(
            (r"Using a target size \((?:torch\.Size\()?(?P<target_shape>\[[\d, ]*\])\)?\) that is different to the "
             r"input size \((?:torch\.Size\()?(?P<input_shape>\[[\d, ]*\])", {"target_shape": "shape", "input_shape": "shape"}),
        ),
        causes=(
            "A regression head that outputs (N, 1) with targets of shape (N,) (or the other way round): the loss "
            "becomes an (N, N) comparison.",
            "A .squeeze() that removed the batch dimension when the batch had one sample.",
            "Targets batched with a different layout than the predictions (an extra or missing channel dimension).",
        ),
        fixes=(
            Fix("Make the shapes equal before the loss", "loss = F.mse_loss(pred.squeeze(-1), y)  # (N, 1) -> (N,)\n"
                "# or: loss = F.mse_loss(pred, y.unsqueeze(-1))"),
            Fix("Assert the shapes in the training step", "assert pred.shape == y.shape, (pred.shape, y.shape)"),
            Fix("Turn this warning into an error while debugging",
                "import warnings\nwarnings.filterwarnings('error', message='Using a target size')"),
        ),
        first_step="Print pred.shape and y.shape right before the loss and reshape one of them so they are equal.",
        sources=("https://pytorch.org/docs/stable/generated/torch.nn.MSELoss.html",
                 "https://pytorch.org/docs/stable/notes/broadcasting.html"),
    ),
)

# words after "found 0 images" that count a subset of the samples, not the samples themselves
_NOT_A_SUBSET = r"(?! (?:with|that|which|having|missing|containing|without)\b)"

# What ``collate_failed`` says the samples' problem is: their structure, or (the message says a tensor requires grad)
# samples that carry autograd history, which a worker's collate cannot stack into shared memory (out=...).
COLLATE_STRUCTURE = ("the samples of one batch are not all of the same structure, or of a type the default collate "
                     "cannot stack")
COLLATE_GRAD = ("a sample is a tensor that requires grad (built from a parameter or a model in __getitem__), and a "
                "DataLoader worker's collate stacks into shared memory with out=..., which autograd does not allow")
COLLATE_GRAD_STEP = ("Return detached tensors from __getitem__ (x.detach(), or build the sample under torch.no_grad()): "
                     "a dataset's samples should carry no autograd history.")

ENTRIES += (
    Entry(
        slug="collate_failed",
        title="The DataLoader could not combine the samples of a batch",
        summary="{exc_type} was raised in the DataLoader's collate step[[ ({where})]][[: {collate_problem}]].",
        causes=("A sample of a type default_collate does not stack (a PIL image, a string list, None, a custom object): "
                "the transform does not end in a tensor, or __getitem__ returns it as is.",
                "Samples of different structure: a dict key some samples lack, tuples of different lengths, None for "
                "some items.",
                "Samples that require grad: a worker's collate stacks them with out=..., which autograd refuses."),
        fixes=(Fix("Look at a few samples' structure", "for i in range(4):\n    s = ds[i]\n    print(type(s), "
                   "getattr(s, 'keys', lambda: None)(), [type(v) for v in (s.values() if isinstance(s, dict) else s)])"),
               Fix("Convert images to tensors in the transform", "transform = T.Compose([T.Resize((224, 224)), T.ToTensor()])"),
               Fix("Combine the samples yourself", "loader = DataLoader(ds, batch_size=8, collate_fn=lambda b: tuple(zip(*b)))")),
        first_step="Print type() (and the keys) of a few samples, ds[i] for i in range(4): every sample must have the "
        "same structure of tensors, numbers, numpy arrays, dicts or lists; convert the odd one in __getitem__ or the "
        "transform, or pass a collate_fn that combines them.",
        sources=("https://pytorch.org/docs/stable/data.html#dataloader-collate-fn",),
        extra={"family": "dataloader"},
    ),
    Entry(
        slug="dataset_empty",
        title="The dataset is empty: the path or the filter found no samples",
        summary="The DataLoader (or the dataset) found no samples[[: {detail}]]; the data path or its filter finds nothing.",
        keywords=("num_samples=0", "found 0 files", "found no valid file", "couldn't find any class folder",
                  "found 0 images", "found 0 samples", "0 image files", "0 files"),
        patterns=(
            # RandomSampler on a dataset of length 0 (shuffle=True)
            r"num_samples should be a positive integer value, but got num_samples=0",
            # (not "found 0 images with corrupt EXIF": a count of something else among the samples)
            r"(?i:\bfound 0 (?:files|images|samples)\b" + _NOT_A_SUBSET + ")",
            r"Found no valid file for the classes",
            r"Couldn't find any class folder in",
            r"(?i:\btotal 0 (?:image )?files\b)",
        ),
        priority=55,
        facts=((r"(?P<detail>num_samples=0|(?i:found 0 (?:files|images|samples)\b" + _NOT_A_SUBSET + r"[^\n]{0,120})"
                r"|Couldn't find any class "
                r"folder in [^\n]{1,200})", {"detail": "str"}),),
        extra={"family": "dataloader"},
        causes=("The data path is relative to another working directory, or points to a folder of another layout "
                "(ImageFolder wants one subfolder per class).",
                "A file-extension filter or a split file that matches nothing.",
                "The dataset was not downloaded or extracted."),
        fixes=(Fix("Check the path and what it holds", "import os\nprint(os.path.abspath(root), os.listdir(root)[:10])\n"
                   "print(len(ds))"),),
        first_step="Print len(dataset) and the absolute path it reads (os.path.abspath(root), os.listdir(root)): fix "
        "the path or the folder layout until the dataset has samples.",
        sources=("https://pytorch.org/docs/stable/data.html#torch.utils.data.RandomSampler",
                 "https://pytorch.org/vision/stable/generated/torchvision.datasets.ImageFolder.html"),
    ),
)
