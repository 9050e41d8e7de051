"""Data and losses: target ranges, NaN losses, DataLoader workers."""

from __future__ import annotations

from nbdebug.core._findings import Fix
from nbdebug.core.knowledge._schema import Entry

__all__ = ["ENTRIES"]

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
        sources=("https://pytorch.org/docs/stable/generated/torch.nn.CrossEntropyLoss.html",),
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
            r"to satisfy the constraint \w+\((?:[^\n()]|\([^\n()]*\))*\), but found invalid values",
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
        sources=("https://pytorch.org/docs/stable/autograd.html",),
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
)
