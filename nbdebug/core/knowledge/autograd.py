"""Tensors and autograd: shapes, views, dtypes, in-place operations, the graph."""

from __future__ import annotations

from nbdebug.core._findings import Fix, Severity
from nbdebug.core.knowledge._schema import Entry

__all__ = ["ENTRIES"]

ENTRIES: tuple[Entry, ...] = (
    Entry(
        slug="shape_mismatch",
        title="Tensor shapes do not match",
        summary="{shape_detail}",
        keywords=("(unbatched) or", "d tensor got", "matrix and matrix", "shape", "size", "dimension", "channels", "reduction dim", "batch_size", "broadcast", "input_size",
                  "multi-target", "mat1", "matmul", "hidden", "dimensional", "indices", "dims", "per channel",
                  "should contain", "must be a matrix", "d input (got", "d tensor, got", "d tensor as input",
                  "batch1", "batch2"),
        patterns=(
            r"mat1 and mat2 shapes cannot be multiplied",
            r"size mismatch, m1: \[",
            # the old THC wording of a matrix product given a tensor that is not 2-D
            r"\bmatrix and matrix expected\b",
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
            # torch's matrix products name their operands: mm's mat1/mat2, bmm/baddbmm's batch1/batch2 and self
            r"\b(?:mat1|batch1|self) dim \d must match (?:mat2|batch[12]) ?dim ?\d",
            # advanced indexing with index tensors whose shapes do not broadcast (x[rows, cols])
            r"shape mismatch: indexing tensors could not be broadcast\b",
            r"both arguments to matmul need to be at least 1D",
            r"Expected hidden(?:\[\d\])? size \(",
            r"The shape of the mask \[[\d, ]*\] at index \d+ does not match the shape of the indexed tensor",
            r"Kernel size can't be greater than actual input size",
            r"inconsistent tensor size",
            r"sizes do not match",
            r"Output size is too small",
            r"Expected \d+-dimensional input for \d+-dimensional weight",
            # a library checking a tensor's number of dimensions ("Expected 2D Tensor, got 1D.", torchaudio.save)
            r"[Ee]xpected (?:a )?\d-?D [Tt]ensor(?: as input)?,? (?:but )?got (?:a )?\d-?D\b",
            r"too many indices for (?:tensor of dimension \d+|array\b)",  # numpy's too: fewer dimensions than indexed
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
            r"size mismatch \(got input: \[[\d, ]*\], target: \[[\d, ]*\]\)",
            r"running_(?:mean|var) should contain \d+ elements not \d+",
            r"\bself must be a matrix\b",
            r"Trying to create tensor with negative dimension",
            r"expected \dD input \(got \dD input\)",
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
            (r"Expected (?P<unbatched_dims>\d+)D \(unbatched\) or \d+D \(batched\) input to (?P<op>\w+), but got input of "
             r"size: (?P<input_shape>\[[\d, ]*\])", {"unbatched_dims": "int", "op": "str", "input_shape": "shape"}),
            (r"expected (?P<expected_dims>\d)D input \(got (?P<got_dims>\d)D input\)", {"expected_dims": "int", "got_dims": "int"}),
            (r"[Ee]xpected (?:a )?(?P<expected_dims>\d)-?D [Tt]ensor(?: as input)?,? (?:but )?got (?:a )?(?P<got_dims>\d)-?D\b",
             {"expected_dims": "int", "got_dims": "int"}),
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
        # any library's own check of a tensor's shape (einops, gpytorch, botorch, captum, a model's assert): not torch's
        # wording, which shape_mismatch knows, but the same question -- the message names the shape it got
        slug="shape_reported",
        title="The code that raised rejected a tensor's shape",
        summary=("The code that raised (a library's, or the code's own check) checked the shape of a tensor it was given[[ ({reported_shape})]] and "
                 "refused it: a dimension is missing or extra, or a size does not fit what the operation needs."
                 "[[ An axis of length {axis_length} does not split into parts of {part_length}.]]"),
        keywords=("shape", "dim", "divide", "divisible", "broadcast", "to match", "have the same", "matrices",
                  "expected", "no elements", "does not have an identity", "thnn", "thcunn"),
        patterns=(
            # a reduction with no identity (max, min, argmax) over an empty tensor: a batch, a selection or a detection
            # list that came out empty
            r"\boperation does not have an identity\b",
            # the old THNN / THCUNN kernels' own checks of a size ("Assertion `THIndexTensor_(size)(target, 0) ==
            # batch_size' failed"): a dimension of one input that disagrees with another's
            r"Assertion `[^`'\n]{0,200}\b(?:size|batch_size|nDimension|dim)\b[^`'\n]{0,200}' failed\.? {1,3}at [^\n]{0,300}TH(?:C|CU)?NN",
            r"\bExpected reduction dim \d+ to have non-zero size\b",
            # a count of dimensions against the expected one ("Expected 4 dimensions, got 5", "expected 3 dims.
            # Received 2-dim tensor", "expected input to have 3 dimensions but got 2")
            # "Expected 3D tensor, but got 2D", "Expected x to have ndim 3 but got 2", "Expected Y with dimension 2 (got
            # Y.dim()=1)")
            # (an array's: scikit-learn's check_array names the reshape to apply itself, for an ndarray)
            r"\b[Ee]xpected (?![^\n]{0,60}?\barray\b)[^\n]{0,60}?\b(?:\d{1,2} ?(?:dimensions?|dims?)\b|\d-?D\b|(?:dimension|ndim|dim)s? (?:of )?=?"
            r"\d{1,2}\b)[^\n]{0,60}?\b(?i:got|received|but|instead)\b",
            # an old matrix product, an equation's subscripts against a tensor's dimensions (numpy's own "could not be
            # broadcast together" stays unknown: an array of the data's, not a tensor a library checked)
            r"\bmatrices expected, got \dD\b",
            r"\bdoes not match the number of dimensions\b",
            r"\b(?:must|should) have the same (?:shape|size|number of dimensions|length)s?\b",
            r"\bshapes? of [^\n]{1,80}? (?:are|is) (?:mismatched|incompatible|not compatible)\b",
            r"\b(?i:wrong shape|wrong number of dimensions)\b[^\n]{0,80}?\b(?i:expected|got|received)\b",
            # two tensors that must agree ("Expected X and Y to have the same number of dimensions", "... the same
            # batch shape")
            r"\b[Ee]xpected [^\n]{1,80}? to have the same (?:number of dimensions|(?:batch |event )?shapes?|sizes?|"
            r"lengths?|number of (?:rows|columns|samples|elements|points))\b",
            # a size that does not split into the requested parts (einops' "(h ph)" with ph=2 on a length of 7)
            r"\bcan't divide axis of length \d+ in chunks of \d+",
            r"\b(?i:dimension|axis|dim|length|size) \d+ (?:of size \d+ )?(?:is )?not divisible by \d+",
            # two counts of the data that must agree ("Expect number of features to match number of nodes. Got 195
            # and 196 instead."): one tensor's rows against the other's
            r"\b(?i:expect(?:ed|s)?|must) (?:the )?(?:number|length|size|count)s? of [^\n]{1,80}? to match "
            r"[^\n]{0,120}?\b(?i:got)\b \d{1,12} (?:and|vs\.?|!=) \d{1,12}",
            # a shape mismatch said in words (on a checkpoint's line it is the state dict's: explain._guards)
            r"(?i:\bshape mismatch\b|\bincompatible shapes\b|\bshapes? (?:do(?:es)? not|don't|doesn't) match\b|"
            r"\bshapes? (?:are|is) not broadcastable\b|\bnot broadcastable\b|\bcannot be broadcast(?:ed)? together\b)",
            # a shape printed next to the complaint ("input of shape torch.Size([2, 3]) but expected ...")
            r"\b(?i:shape)\b[^\n]{0,40}?(?:torch\.Size\(\[\d[\d, ]{0,60}\]\)|\[\d{1,7}(?:, ?\d{1,7}){1,8}\]|\(\d{1,7}(?:, ?\d{1,7}){1,8}\))"
            r"[^\n]{0,120}?(?i:\bbut\b|\bexpected\b|\bmust\b|\bshould\b|\bmismatch\b|\bincompatible\b|\binstead\b)",
        ),
        priority=36,  # below every message that names the operation (shape_mismatch, a state_dict's sizes)
        facts=((r"(?i:shape)\b[:=]? ?(?P<reported_shape>torch\.Size\(\[\d[\d, ]{0,60}\]\)|\[\d{1,7}(?:, ?\d{1,7}){0,8}\])",
                {"reported_shape": "str"}),
               (r"axis of length (?P<axis_length>\d{1,12}) in chunks of (?P<part_length>\d{1,12})",
                {"axis_length": "int", "part_length": "int"})),
        extra={"family": "shape"},
        causes=(
            "The tensor has a dimension more or fewer than the operation expects: no batch dimension, a batch of "
            "one squeezed away, frames or heads folded into the batch twice.",
            "A size that does not fit the operation: an image or sequence length not divisible by the patch, "
            "window or stride the model uses at that stage.",
            "A tensor in another layout than the library documents ((batch, n, d) against (n, batch, d)).",
        ),
        fixes=(
            Fix("Print the shape right before the call and compare it with the documented one",
                "print(x.shape)  # e.g. (B, C, H, W) expected, (C, H, W) given"),
            Fix("Add the missing batch dimension", "x = x.unsqueeze(0)  # (C, H, W) -> (1, C, H, W)"),
            Fix("Resize or pad inputs to a size every stage divides", "img = img.resize((256, 256))"),
        ),
        first_step="Read the shape in the message against what the call expects (its pattern or documentation): add "
        "or remove the dimension that differs, or resize the input so that each size divides as the model needs.",
        sources=("https://pytorch.org/docs/stable/generated/torch.unsqueeze.html",
                 "https://pytorch.org/docs/stable/notes/broadcasting.html"),
    ),
    Entry(
        # placed by the traceback's structure (``_raised_in.backward_raised``): no message names it
        slug="backward_function_raised",
        title="A custom autograd Function's backward (or a backward hook) raised",
        summary=("{exc_type} was raised while the autograd engine ran backward[[ (last frame shown: {where})]]: "
                 "the code the engine called -- a custom torch.autograd.Function's backward, or a hook on a tensor or "
                 "module -- failed, not the line that started the backward pass[[ ({user_where})]]."),
        causes=("A custom Function's backward reads something its forward did not store (an attribute set only "
                "on one branch, a tensor not passed to ctx.save_for_backward).",
                "An old-style Function (an instance with self.x) run on a torch release that only supports the "
                "static forward(ctx, ...) / backward(ctx, ...) form.",
                "A backward hook that returns or reads a value of the wrong kind."),
        fixes=(Fix("Store everything backward needs in forward, on every path",
                   "@staticmethod\ndef forward(ctx, x):\n    ctx.save_for_backward(x)\n    ctx.scale = 2.0  # set "
                   "on every branch\n    return x * ctx.scale"),
               Fix("Check the Function against autograd's numerical gradient",
                   "torch.autograd.gradcheck(MyFunction.apply, (x.double().requires_grad_(),))")),
        first_step="Find the custom autograd.Function (or hook) in the model whose backward runs here and make its "
        "forward store, on every path, what backward reads (ctx.save_for_backward, ctx attributes); gradcheck it.",
        sources=("https://pytorch.org/docs/stable/notes/extending.html",),
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
            # the same refusal in torch 1.x's wording (an in-place op writing a Float result into a Byte tensor)
            r"output with backend \w+ and dtype (?P<have>\w+) doesn't match the desired backend \w+ and dtype (?!(?P=have)\b)\w+",
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
    Entry(
        slug="grad_non_scalar",
        title="backward() on a tensor that is not a single number",
        summary=(
            "backward() without an argument needs a scalar (one-element) output; it was called on a tensor with "
            "several elements, usually a loss that was never reduced."
        ),
        keywords=("implicitly created only for scalar",),
        patterns=(r"grad can be implicitly created only for scalar outputs",),
        # a paste cut off before the error line still shows autograd's raise statement
        frames=(r'^[ \t]*raise RuntimeError\("grad can be implicitly created only for scalar outputs"\)',),
        priority=60,
        causes=(
            "A loss built with reduction='none' (or an element-wise expression) that was not averaged before backward().",
            "nn.DataParallel gathers one loss per GPU into a vector: the loss has as many elements as GPUs.",
            "torch.autograd.grad(outputs, inputs) on a non-scalar output without grad_outputs.",
        ),
        fixes=(
            Fix("Reduce the loss to a scalar", "loss = criterion(out, y).mean()  # or .sum()\nloss.backward()"),
            Fix("With nn.DataParallel, average the per-GPU losses", "loss = model(x, y).mean()\nloss.backward()"),
            Fix("For a vector-Jacobian product, pass the weights explicitly", "out.backward(torch.ones_like(out))"),
        ),
        first_step="Print loss.shape right before backward(): reduce it with .mean() (or .sum()) so it is a "
        "single number.",
        sources=("https://pytorch.org/docs/stable/generated/torch.Tensor.backward.html",
                 "https://github.com/muzairkhattak/multimodal-prompt-learning/issues/37"),
    ),
    Entry(
        slug="numpy_conversion",
        title="A tensor cannot be converted to NumPy as it is",
        summary=(
            ".numpy() works only on a CPU tensor outside the autograd graph[[; this one is on {device}]]"
            "[[; this one {grad_state}]]."
        ),
        keywords=("numpy",),
        patterns=(
            r"Can't call `?numpy\(\)`? on (?:Tensor|Variable) that requires grad",
            r"can't convert (?:cuda|mps|xla|xpu)?:?\d* ?device type tensor to numpy",
            r"can't convert CUDA tensor to numpy",
        ),
        priority=61,
        facts=(
            (r"can't convert (?P<device>(?:cuda|mps|xla|xpu)(?::\d+)?) device type tensor", {"device": "str"}),
            (r"on (?:Tensor|Variable) that (?P<grad_state>requires grad)", {"grad_state": "str"}),
        ),
        causes=(
            "Logging, plotting or computing a metric with NumPy / matplotlib / sklearn on a tensor that is still on "
            "the GPU or still part of the graph.",
            "np.sum / np.array applied to a CUDA tensor (NumPy calls .numpy() implicitly).",
        ),
        fixes=(
            Fix("Detach, move to the CPU, then convert", "arr = t.detach().cpu().numpy()"),
            Fix("For one number, use .item()", "loss_value = loss.item()"),
            Fix("Compute metrics in torch and convert only the result", "acc = (pred.argmax(1) == y).float().mean().item()"),
        ),
        first_step="Replace t.numpy() with t.detach().cpu().numpy() at the line that raised.",
        sources=("https://pytorch.org/docs/stable/generated/torch.Tensor.numpy.html",),
    ),
    Entry(
        slug="tensor_to_python",
        title="A tensor with several elements used as one Python value",
        summary=(
            "A tensor with more than one element was used where Python needs a single value: an if / while / "
            "and / or condition, int() / float(), .item(), or torch.tensor() of a list of tensors."
        ),
        keywords=("value of tensor with more than one", "only one element tensors", "cannot be converted to scalar"),
        patterns=(
            r"(?:Boolean|bool) value of Tensor with more than one (?:value|element) is ambiguous",
            r"only one element tensors can be converted to Python scalars",
            r"a Tensor with \d+ elements cannot be converted to Scalar",
        ),
        priority=60,
        causes=(
            "A comparison on a whole tensor in an if statement (if loss > best, if mask) where one element was meant.",
            "torch.tensor(list_of_tensors): each element is converted with float(), which fails for tensors of "
            "several elements.",
            ".item() / int() on a batch rather than on one value (the batch size was assumed to be 1).",
        ),
        fixes=(
            Fix("Reduce the condition explicitly", "if (pred == y).all():   # or .any()\n    ..."),
            Fix("Stack a list of tensors instead of torch.tensor(list)", "labels = torch.stack(labels)  # or torch.cat"),
            Fix("Take one element, or convert the whole tensor", "value = t[0].item()\nvalues = t.tolist()"),
        ),
        first_step="At the line that raised, print the tensor's shape: use .all() / .any() for a condition, "
        "torch.stack for a list of tensors, or .tolist() for many values.",
        sources=("https://pytorch.org/docs/stable/generated/torch.Tensor.item.html",
                 "https://pytorch.org/docs/stable/generated/torch.stack.html"),
    ),
    Entry(
        slug="inference_tensor",
        title="A tensor made under torch.inference_mode() was used for training",
        summary=(
            "A tensor created inside torch.inference_mode() reached a computation that autograd records; inference "
            "tensors can never be saved for backward."
        ),
        keywords=("inference tensor", "inferences tensor"),
        patterns=(
            r"Inferences? tensors? (?:cannot|can't) be saved for backward",
            r"(?i:inference tensors? saved for backward)",
            r"Inference tensors do not track version counter",
            r"Inplace update to inference tensor outside InferenceMode is not allowed",
        ),
        priority=60,
        causes=(
            "Data (or cached features, embeddings, masks) computed under torch.inference_mode() and reused in the "
            "training step.",
            "A model or buffer created or loaded inside inference_mode (e.g. an evaluation/generation step that "
            "builds state the trainer later reuses, as in RLHF/GRPO loops).",
            "A library that wraps a function in @torch.inference_mode() whose outputs you backpropagate through.",
        ),
        fixes=(
            Fix("Use torch.no_grad() where the result is reused in training", "with torch.no_grad():\n    feats = encoder(x)"),
            Fix("Or clone the inference tensor into a normal tensor", "feats = feats.clone()  # outside inference_mode"),
        ),
        first_step="Find where the tensor in the failing operation was created: if it was inside "
        "torch.inference_mode(), use torch.no_grad() there or .clone() it before training.",
        sources=("https://pytorch.org/docs/stable/generated/torch.autograd.grad_mode.inference_mode.html",),
    ),
    Entry(
        slug="nonleaf_grad_access",
        title=".grad read on a tensor that is not a leaf: it is always None",
        severity=Severity.WARNING,
        summary=(
            "Code read .grad of a tensor produced by an operation (not a leaf tensor). Autograd does not keep "
            "gradients of intermediate tensors, so the value is None and any code relying on it (gradient logging, "
            "clipping, saliency maps, a manual update) silently does nothing."
        ),
        keywords=("not a leaf tensor",),
        patterns=(r"The \.grad attribute of a Tensor that is not a leaf Tensor is being accessed",),
        priority=30,
        extra={"warning": "yes"},
        causes=(
            "A parameter replaced by an expression (w = torch.randn(3, requires_grad=True) * 0.01, or .to(device) after "
            "requires_grad=True): the name now refers to a non-leaf tensor.",
            "Reading the gradient of an activation or input image (saliency) without retain_grad().",
            "A model wrapper that hands out views or copies of the parameters.",
        ),
        fixes=(
            Fix("Create leaf tensors directly with requires_grad", "w = (torch.randn(3) * 0.01).requires_grad_()\n"
                "# or: w = torch.randn(3, device=device, requires_grad=True)"),
            Fix("Keep the gradient of an intermediate tensor", "x.retain_grad()\nloss.backward()\nprint(x.grad)"),
            Fix("Read gradients from the model's parameters", "for name, p in model.named_parameters():\n    print(name, p.grad)"),
        ),
        first_step="Print t.is_leaf and t.grad_fn for the tensor whose .grad is read: if it has a grad_fn, make "
        "the leaf the thing you read (or call t.retain_grad() before backward).",
        sources=("https://github.com/pytorch/pytorch/pull/30531",
                 "https://pytorch.org/docs/stable/generated/torch.Tensor.retain_grad.html"),
    ),
    Entry(
        slug="checkpoint_no_grad",
        title="Activation checkpointing got no input that requires grad: gradients will be None",
        severity=Severity.WARNING,
        summary=(
            "torch.utils.checkpoint was called on inputs none of which require grad. With the reentrant "
            "implementation the checkpointed block then gets no gradients: its parameters do not train, while the "
            "run goes on."
        ),
        keywords=("none of the inputs have requires_grad",),
        patterns=(r"None of the inputs have requires_grad=True\. Gradients will be None",),
        priority=30,
        extra={"warning": "yes"},
        causes=(
            "Reentrant checkpointing (use_reentrant=True, the old default) of the first block, whose input is the "
            "data or a frozen embedding output.",
            "Fine-tuning with a frozen base model (LoRA / adapters) and gradient checkpointing: the embedding output "
            "does not require grad.",
            "Checkpointing inside torch.no_grad() or at evaluation time (harmless then).",
        ),
        fixes=(
            Fix("Use the non-reentrant implementation", "out = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)"),
            Fix("Hugging Face models with frozen embeddings (PEFT / LoRA)",
                "model.enable_input_require_grads()\nmodel.gradient_checkpointing_enable(gradient_checkpointing_kwargs={'use_reentrant': False})"),
            Fix("Or make the input require grad", "x = x.requires_grad_()"),
        ),
        first_step="Pass use_reentrant=False to torch.utils.checkpoint.checkpoint (or call "
        "model.enable_input_require_grads() for a Hugging Face model), then check the block's parameters get a .grad.",
        sources=("https://pytorch.org/docs/stable/checkpoint.html",
                 "https://github.com/huggingface/transformers/issues/23170"),
    ),
)

ENTRIES += (
    Entry(
        # torch's own C++ check inside the autograd engine (its source path names it): the engine's invariant broke,
        # a torch bug (many fixed in later releases) or a use the engine does not support, not the user's shapes
        slug="autograd_internal_assert",
        title="An internal check of torch's autograd engine failed",
        summary=("A consistency check inside torch's autograd engine failed during backward[[ ({check})]]: torch's "
                 "own code found its graph in a state it does not expect."),
        keywords=("autograd",),  # (the path's separators vary: /, \\, and doubled in a repr)
        patterns=(
            # "torch/csrc/autograd/input_buffer.cpp:14: add: Assertion `...` failed." (old releases), and
            # "X INTERNAL ASSERT FAILED at ".../torch/csrc/autograd/variable.cpp":224" (later ones, any path separator)
            r"torch[/\\]{1,2}csrc[/\\]{1,2}autograd[/\\]{1,2}[\w/\\.]{1,200}:\d+: \w+: Assertion",
            r"INTERNAL ASSERT FAILED at \"?[^\n\"]{0,300}?torch[/\\]{1,2}csrc[/\\]{1,2}autograd[/\\]",
            r"ASSERT FAILED at [^\n]{0,300}?torch/csrc/autograd/",
        ),
        priority=60,  # below the engine's messages that name the user's mistake (backward twice, in-place)
        facts=((r"Assertion [`\"](?P<check>[^`\"\n]{1,200})[`\"] failed", {"check": "str"}),
               (r"(?P<check>[^\n:]{1,200}) INTERNAL ASSERT FAILED", {"check": "str"})),
        causes=(
            "A bug of the installed torch release in the autograd engine (the message asks to report it; many such "
            "checks were fixed in later releases).",
            "A use the engine does not support: a custom autograd.Function or a C++ extension (built for another torch) "
            "returning gradients or saved tensors the engine does not expect, or in-place changes to a saved tensor "
            "under no_grad.",
        ),
        fixes=(
            Fix("Install the current torch release (with its matching companions)",
                "pip install -U torch torchvision torchaudio"),
            Fix("Find the operation whose backward fails", "torch.autograd.set_detect_anomaly(True)  # then run the "
                "step again: the traceback names the forward op"),
        ),
        first_step="Upgrade torch to the current release and run the step again (the check is torch's own; many were "
        "fixed bugs); if it still fails, run it with torch.autograd.set_detect_anomaly(True) to find the operation "
        "and check any custom autograd.Function or C++ extension it uses.",
        sources=("https://pytorch.org/docs/stable/autograd.html#anomaly-detection",
                 "https://pytorch.org/docs/stable/notes/extending.html"),
    ),
)
