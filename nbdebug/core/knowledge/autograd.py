"""Tensors and autograd: shapes, views, dtypes, in-place operations, the graph."""

from __future__ import annotations

from nbdebug.core._findings import Fix
from nbdebug.core.knowledge._schema import Entry

__all__ = ["ENTRIES"]

ENTRIES: tuple[Entry, ...] = (
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
        sources=("https://pytorch.org/docs/stable/notes/broadcasting.html",),
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
        sources=("https://pytorch.org/docs/stable/tensor_view.html",),
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
            r"Input type \([^()\n]*\) and (?:weight|bias) type \([^()\n]*\) should be the same",
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
            (r"expected target dtype to be [\w ]{1,40}, but got (?P<dtype_a>\w+)", {"dtype_a": "str"}),
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
        sources=("https://pytorch.org/docs/stable/tensor_attributes.html",),
    ),
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
        sources=("https://pytorch.org/docs/stable/notes/autograd.html",),
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
        sources=("https://pytorch.org/docs/stable/notes/autograd.html",),
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
        sources=("https://pytorch.org/docs/stable/generated/torch.autograd.backward.html",),
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
        sources=("https://pytorch.org/docs/stable/notes/autograd.html",),
    ),
)
