"""Per-category reasoning on the parsed facts: derived numbers, notes, and fixes that depend on them.

Each analyser gets the facts (a dict it may extend) and the normalised text, and returns notes plus fixes to
put first.  They stay small: the knowledge itself is in ``nbdebug.core.knowledge``; this is only arithmetic
and choices that a regular expression cannot make (e.g. "is the cached-but-unused memory larger than the
request?").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from nbdebug._units import fmt_bytes
from nbdebug.core.explain._diagnosis import Fix

__all__ = ["ANALYSERS", "relative_import_runner"]

Analysis = tuple[list[str], list[Fix]]

# Assertion text in a CUDA kernel -> what it means.
_ASSERTIONS = (
    ("n_classes", "a class label is outside [0, num_classes) in cross_entropy / nll_loss"),
    ("srcIndex < srcSelectDimSize", "an index passed to an embedding / index_select is >= the table size"),
    ("index out of bounds", "an index passed to indexing / gather is out of range"),
    ("idx_dim >= 0 && idx_dim < index_size", "an index passed to gather / scatter is out of range"),
    ("target_val >= zero && target_val <= one", "binary_cross_entropy targets are outside [0, 1]"),
    ("input_val >= zero && input_val <= one", "binary_cross_entropy inputs are not probabilities (apply sigmoid, "
     "or use binary_cross_entropy_with_logits)"),
)

_EXPANDABLE = Fix(
    "Reduce fragmentation: let the allocator grow segments (set before the first CUDA allocation)",
    "import os\nos.environ['PYTORCH_CUDA_ALLOC_CONF'] = 'expandable_segments:True'",
)


def _oom(facts: dict[str, Any], text: str) -> Analysis:
    notes: list[str] = []
    fixes: list[Fix] = []
    allocated = facts.get("allocated_by_pytorch")
    # Before 1.4 the message said "cached": memory held by the allocator but not used by tensors (PR #13751).
    cached = facts.pop("cached", None)
    if cached is not None and "reserved_but_unallocated" not in facts:
        facts["reserved_but_unallocated"] = cached
    if "reserved_by_pytorch" in facts and allocated is not None and "reserved_but_unallocated" not in facts:
        facts["reserved_but_unallocated"] = max(facts["reserved_by_pytorch"] - allocated, 0)
    if "reserved_but_unallocated" in facts and allocated is not None and "reserved_by_pytorch" not in facts:
        facts["reserved_by_pytorch"] = allocated + facts["reserved_but_unallocated"]
    tried = facts.get("tried_to_allocate")
    unused = facts.get("reserved_but_unallocated")
    total = facts.get("total_capacity")
    if tried is not None and total is not None and tried > total:
        notes.append(f"The single allocation ({fmt_bytes(tried)}) is larger than the whole GPU ({fmt_bytes(total)}): "
                     "no allocator setting can make it fit; the tensor itself must get smaller "
                     "(batch, resolution, sequence length, or chunk the operation).")
    if unused is not None and tried is not None and unused > 0:
        if unused >= tried or (facts.get("reserved_by_pytorch") and unused >= 0.2 * facts["reserved_by_pytorch"]):
            notes.append(f"{fmt_bytes(unused)} is reserved by PyTorch's caching allocator but not used by any tensor, "
                         f"{'more than' if unused >= tried else 'a large share next to'} the {fmt_bytes(tried)} requested: "
                         "the free cached blocks are too fragmented to hold the request. expandable_segments:True "
                         "lets the allocator grow segments instead of splitting them.")
            fixes.append(_EXPANDABLE)
        else:
            notes.append(f"Only {fmt_bytes(unused)} is cached but unused, less than the {fmt_bytes(tried)} requested: "
                         "fragmentation is not the problem; the live tensors themselves fill the GPU.")
    free = facts.get("free")
    if free is not None and tried is not None and free >= tried:
        notes.append(f"The driver reports {fmt_bytes(free)} free, at least the request: the free memory is not in one "
                     "piece, or it was freed by the allocator's retry only after this message was built.")
    process = facts.get("process_memory")
    reserved = facts.get("reserved_by_pytorch")
    if process is not None and reserved is not None and process > reserved:
        facts["non_pytorch_memory"] = process - reserved
        notes.append(f"{fmt_bytes(process - reserved)} of this process's memory is outside PyTorch's allocator "
                     "(CUDA context, cuBLAS/cuDNN workspaces, other libraries).")
    others = facts.get("other_processes")
    if others:
        held = sum(p["bytes"] for p in others)
        notes.append(f"{len(others)} process(es) hold {fmt_bytes(held)} on this GPU (pids "
                     f"{', '.join(str(p['pid']) for p in others)}); another kernel or job may be using the GPU.")
    return notes, fixes


def _assert(facts: dict[str, Any], text: str) -> Analysis:
    notes = ["The CUDA context is poisoned: restart the kernel (or process) before running anything else on the GPU.",
             "For a readable error, re-run the same batch on CPU (model.cpu(), inputs .cpu()) or with "
             "CUDA_LAUNCH_BLOCKING=1 (and TORCH_USE_CUDA_DSA=1 on builds compiled with it)."]
    assertion = facts.get("assertion", "")
    for needle, meaning in _ASSERTIONS:
        if needle in assertion or (not assertion and needle in text):
            facts["likely_cause"] = meaning
            notes.insert(0, f"The failed assertion means {meaning}.")
            break
    return notes, []


def _poisoned(facts: dict[str, Any], text: str) -> Analysis:
    return (["The CUDA context is poisoned: restart the kernel (or process) before using the GPU again."], [])


def _state_dict(facts: dict[str, Any], text: str) -> Analysis:
    missing = _keys(text, "Missing")
    unexpected = _keys(text, "Unexpected")
    facts["missing_count"] = len(missing)
    facts["unexpected_count"] = len(unexpected)
    if missing:
        facts["missing_keys"] = missing[:10]
    if unexpected:
        facts["unexpected_keys"] = unexpected[:10]
    notes: list[str] = []
    fixes: list[Fix] = []
    for prefix, origin in (("module.", "DistributedDataParallel / DataParallel"), ("_orig_mod.", "torch.compile")):
        if unexpected and all(k.startswith(prefix) for k in unexpected) and (
            not missing or {k[len(prefix):] for k in unexpected} & set(missing)
        ):
            facts["key_prefix"] = prefix
            facts["prefix_explanation"] = (f"The checkpoint's keys carry a '{prefix}' prefix added by {origin}; "
                                           "the model's keys do not.")
            fixes.append(Fix("Strip the wrapper prefix (one line)",
                             f"model.load_state_dict({{k.removeprefix('{prefix}'): v for k, v in sd.items()}})"))
            break
        if missing and all(k.startswith(prefix) for k in missing) and (
            not unexpected or {k[len(prefix):] for k in missing} & set(unexpected)
        ):
            facts["key_prefix"] = prefix
            facts["prefix_explanation"] = (f"The model is wrapped ({origin}) so its keys start with '{prefix}', "
                                           "but the checkpoint was saved unwrapped.")
            attr = "module" if prefix == "module." else "_orig_mod"
            fixes.append(Fix("Load into the wrapped model's inner module (one line)", f"model.{attr}.load_state_dict(sd)"))
            break
    if "size mismatch for" in text:
        notes.append("Some parameters also differ in shape (see 'size mismatch' lines): the architectures differ.")
    return notes, fixes


# module-level names, so that tests/test_patterns_redos.py checks them with every other pattern
_MISSING_KEYS = re.compile(r'Missing key\(s\) in state_dict: ((?:"[^"]*"(?:, )?)+)')
_UNEXPECTED_KEYS = re.compile(r'Unexpected key\(s\) in state_dict: ((?:"[^"]*"(?:, )?)+)')
_KEY_LISTS = {"Missing": _MISSING_KEYS, "Unexpected": _UNEXPECTED_KEYS}
_QUOTED = re.compile(r'"([^"]*)"')


def _keys(text: str, kind: str) -> list[str]:
    m = _KEY_LISTS[kind].search(text)
    return _QUOTED.findall(m.group(1)) if m else []


def _size_mismatch(facts: dict[str, Any], text: str) -> Analysis:
    params = facts.get("mismatched_params") or []
    facts["mismatch_count"] = len(params)
    notes = []
    if params and all(p.split(".")[0] == params[0].split(".")[0] for p in params):
        notes.append(f"All mismatches are in '{params[0].split('.')[0]}': if that is the classifier head and you are "
                     "fine-tuning on other classes, drop those keys and load with strict=False.")
    return notes, []


_PERMUTE_TO_CHANNELS_FIRST = {1: "x.permute(0, 2, 1)  # (N, L, C) -> (N, C, L)",
                              2: "x.permute(0, 3, 1, 2)  # (N, H, W, C) -> (N, C, H, W)",
                              3: "x.permute(0, 4, 1, 2, 3)  # (N, D, H, W, C) -> (N, C, D, H, W)"}


def _prod(values: Any) -> int:
    n = 1
    for v in values:
        n *= int(v)
    return n


def layout_hint(shape: Any, *, in_features: int | None = None, in_channels: int | None = None,
                spatial: int = 0) -> tuple[str, Fix] | None:
    """When a layer got an input of the right size but the wrong layout, say which layout fix it needs.

    ``shape`` is the input the layer received; ``in_features`` (Linear-like) or ``in_channels`` with ``spatial``
    dimensions (convolutions) is what it is configured for.  Tried in order: the forgotten flatten (trailing
    dimensions multiply to ``in_features``), features in dimension 1 instead of last (a 2-D input whose first
    dimension equals ``in_features`` is not taken for transposed: a batch size may equal it by chance),
    channels-last into a channels-first convolution, a missing channel/batch dimension.  None when the layout
    explains nothing (then the sizes themselves disagree).
    """
    dims = [int(d) for d in shape]
    if in_features is not None and dims and dims[-1] != in_features:
        if len(dims) >= 3 and _prod(dims[1:]) == in_features:
            rest = " x ".join(str(d) for d in dims[1:])
            return (f"The input {dims} holds {rest} = {in_features} values per sample, exactly in_features: it was "
                    f"not flattened. Flatten before this layer (x.flatten(1)), so it gets ({dims[0]}, {in_features}).",
                    Fix("Flatten before this layer", f"x = x.flatten(1)  # {tuple(dims)} -> ({dims[0]}, {in_features})\n"
                        "# in nn.Sequential: nn.Flatten() before the Linear"))
        if len(dims) >= 3 and dims[1] == in_features:
            return (f"The input {dims} has its {in_features} features in dimension 1 (channels-first), but a Linear "
                    "layer works on the last dimension: move them last (x.transpose(1, -1)).",
                    Fix("Move the feature dimension last", f"x = x.transpose(1, -1)  # {tuple(dims)} -> features last"))
    if in_channels is not None and spatial and dims:
        if len(dims) == spatial + 2 and dims[1] != in_channels and dims[-1] == in_channels:
            code = _PERMUTE_TO_CHANNELS_FIRST.get(spatial, "x = x.movedim(-1, 1)")
            return (f"The input {dims} is channels-last (its last dimension is {in_channels} = in_channels), but "
                    "convolutions take channels first (N, C, H, W): permute it before this layer.",
                    Fix("Put the channels first", "x = " + code if not code.startswith("x =") else code))
        if len(dims) == spatial and in_channels == 1:
            return (f"The input {dims} has no channel dimension (and no batch dimension): add them, x[None, None] "
                    f"gives (1, 1, {', '.join(map(str, dims))}).",
                    Fix("Add the channel (and batch) dimension", "x = x[None, None]  # or x.unsqueeze(0).unsqueeze(0)"))
    return None


def _matmul_hint(left: tuple[int, ...], right: tuple[int, ...], kind: str = "") -> tuple[list[str], list[Fix]]:
    """For "mat1 and mat2 shapes cannot be multiplied (a x b and c x d)": the notes and fixes that fit, best first.

    ``kind`` is where the multiply came from, when the traceback shows it: ``"linear"`` (an nn.Linear /
    F.linear, whose mat2 is weight.T: (in_features, out_features)), ``"matmul"`` (a plain x @ w, torch.mm,
    torch.matmul: no in_features involved), or ``""`` (unknown: a pasted message).  A transpose is suggested
    first only for a plain matmul; otherwise the in_features reading of the summary comes first and a transpose
    is at most a note after it (a batch size equal to in_features is a coincidence, not evidence).
    """
    a, b = left
    c, d = right
    if b == c:
        return [], []
    per_sample = c // b if b and c % b == 0 else 0
    if per_sample >= 4 and a % per_sample == 0:
        batch = a // per_sample
        return ([f"If the batch size is {batch}, each sample holds {per_sample} x {b} = {c} values, exactly "
                 f"in_features, spread over extra dimensions (e.g. ({batch}, {per_sample}, {b})): the input was "
                 "probably not flattened. Flatten before this layer (x.flatten(1))."],
                [Fix("Flatten before this layer", "x = x.flatten(1)  # (N, C, H, W) -> (N, C*H*W)\n"
                     "# in nn.Sequential: nn.Flatten() before the Linear")])
    first = [Fix("Transpose the first operand", "out = x.T @ w")] if a == c else []
    second = [Fix("Transpose the second operand", "out = x @ w.T  # w stored as (out_features, in_features)")] if b == d else []
    if kind == "matmul":  # no Linear layer: the transpose readings are the only ones
        notes = []
        if first:
            notes.append(f"mat1 is {a}x{b} and mat2 {c}x{d}: mat1 looks transposed (its first dimension, {a}, is what "
                         f"mat2 expects). Use mat1.T ({b}x{a}).")
        if second:
            notes.append(f"mat1 is {a}x{b} and mat2 {c}x{d}: mat2 looks transposed (its second dimension, {d}, matches "
                         f"mat1's {b}). Use mat2.T ({d}x{c}): a weight stored as (out, in) is applied as x @ w.T.")
        return notes, first + second
    fixes = [Fix("Make in_features match the input (or the layer before output in_features)",
                 f"nn.Linear({b}, {d})  # in_features = the input's last dimension ({b}), not {c}\n"
                 f"# or: nn.LazyLinear({d}) infers in_features on the first call")]
    notes = []
    if first:
        notes.append(f"mat1 is {a}x{b}: if your input is laid out (features, batch) = ({b}, {a}) rather than "
                     f"(batch, features), pass x.T; a batch size of {a} equal to in_features={c} is otherwise a "
                     "coincidence, and the in_features fix above is the one to try first.")
    if second and kind != "linear":  # a Linear's mat2 is its own weight.T: the user cannot transpose it
        notes.append(f"mat1 is {a}x{b} and mat2 {c}x{d}: if this is your own x @ w rather than an nn.Linear, w may "
                     f"be stored as (out, in): use x @ w.T ({d}x{c}).")
    return notes, fixes


def _shape(facts: dict[str, Any], text: str) -> Analysis:
    notes: list[str] = []
    fixes: list[Fix] = []
    left, right = facts.get("left_shape"), facts.get("right_shape")
    if left and right and len(left) == 2 and len(right) == 2 and ("mat1 and mat2" in text or "m1: [" in text):
        facts["shape_detail"] = (f"A matrix multiply got {left[0]}x{left[1]} and {right[0]}x{right[1]}: the inner "
                                 f"dimensions {left[1]} and {right[0]} must be equal. In a Linear layer this means the "
                                 f"input has {left[1]} features but the layer expects in_features={right[0]}.")
        more_notes, more_fixes = _matmul_hint(tuple(left), tuple(right), str(facts.get("matmul_kind", "")))
        notes += more_notes
        fixes += more_fixes
    elif "size_a" in facts and "size_b" in facts and "dim" in facts and "tensor_index" not in facts:
        facts["shape_detail"] = (f"Two tensors have sizes {facts['size_a']} and {facts['size_b']} in dimension "
                                 f"{facts['dim']}; element-wise operations need them equal (or 1 to broadcast).")
    elif "expected_channels" in facts:
        facts["shape_detail"] = (f"A convolution expects {facts['expected_channels']} input channels but the input "
                                 f"{list(facts.get('input_shape', ()))} has {facts['got_channels']} (dimension 1 is "
                                 "channels, in N, C, H, W order).")
        shape = facts.get("input_shape") or ()
        hint = layout_hint(shape, in_channels=facts["expected_channels"], spatial=max(len(shape) - 2, 0))
        if hint is not None:
            notes.append(hint[0])
            fixes.append(hint[1])
    elif "tensor_index" in facts:
        facts["shape_detail"] = (f"torch.cat needs equal sizes outside dimension {facts['dim']}: expected "
                                 f"{facts['size_a']} but tensor {facts['tensor_index']} has {facts['size_b']}.")
    elif "target_shape" in facts:
        facts["shape_detail"] = (f"view/reshape to {list(facts['target_shape'])} is impossible for a tensor with "
                                 f"{facts['numel']} elements.")
    elif "input_batch" in facts:
        facts["shape_detail"] = (f"The loss got {facts['input_batch']} predictions but {facts['target_batch']} targets: "
                                 "logits and labels must have the same batch size (check flatten / view before the loss).")
    elif left and right:
        facts["shape_detail"] = f"Shapes {list(left)} and {list(right)} cannot be combined by this operation."
    elif "input_shape" in facts and "op" in facts:
        facts["shape_detail"] = (f"{facts['op']} got an input of shape {list(facts['input_shape'])}, with the wrong "
                                 "number of dimensions (missing batch or channel dimension?).")
        unbatched = facts.get("unbatched_dims")
        if isinstance(unbatched, int) and len(facts["input_shape"]) == unbatched - 1:
            notes.append(f"{facts['op']} takes {unbatched}-D (C, ...) or {unbatched + 1}-D (N, C, ...) input; "
                         f"{list(facts['input_shape'])} has no channel dimension: add it (x.unsqueeze(0), or "
                         "x[None, None] for a batch of one).")
            fixes.append(Fix("Add the missing channel (and batch) dimension",
                             "x = x.unsqueeze(0)      # (H, W) -> (1, H, W): one channel\nx = x[None, None]       # (H, W) -> (1, 1, H, W): a batch of one"))
    elif "expected_dims" in facts and "got_dims" in facts:
        expected, got = facts["expected_dims"], facts["got_dims"]
        facts["shape_detail"] = f"The layer expects {expected}-D input but got {got}-D input."
        if got == expected - 1:
            notes.append(f"One dimension short: usually the batch dimension of a single sample. Add it with "
                         f"x.unsqueeze(0) ({got}-D -> {expected}-D).")
            fixes.append(Fix("Add the batch dimension", "x = x.unsqueeze(0)  # one sample -> a batch of one"))
    return notes, fixes


_PTXAS = re.compile(r"ptxas fatal\s*:|\bPTXASError\b|Internal Triton PTX codegen error")


def _compile(facts: dict[str, Any], text: str) -> Analysis:
    from nbdebug.core.knowledge.compile import PTX_STEP, PTXAS_STEP

    if _PTXAS.search(text):  # the assembler (and the GPU it does not know), not what Dynamo traced
        facts["first_step_detail"] = PTXAS_STEP if "for option 'gpu-name'" in text else PTX_STEP
    notes = []
    if "limit_name" in facts:
        notes.append("cache_size_limit was renamed recompile_limit (torch._dynamo.config.recompile_limit); past the "
                     "limit the function silently runs eagerly (or raises with fail_on_recompile_limit_hit).")
    return notes, []


def _child(facts: dict[str, Any], text: str) -> Analysis:
    code = facts.get("exitcode")
    if code is not None and code < 0:
        import signal as _signal

        try:
            name = _signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        facts.setdefault("signal_name", name)
        meaning = "killed by SIGKILL, usually the host's out-of-memory killer" if -code == 9 else f"killed by {name}"
        facts["signal_meaning"] = meaning
    return [], []


def _nccl_timeout(facts: dict[str, Any], text: str) -> Analysis:
    if isinstance(facts.get("ranks"), list):
        facts["ranks"] = ", ".join(str(r) for r in facts["ranks"])
    return [], []


def _cuda_unavailable(facts: dict[str, Any], text: str) -> Analysis:
    reason = facts.get("reason", "")
    if reason == "Torch not compiled with CUDA enabled":
        return ["This PyTorch is a CPU-only build: install a CUDA build to use the GPU (or run on the CPU)."], []
    if "unknown error" in reason or "No CUDA GPUs" in reason:
        return ["This usually means CUDA_VISIBLE_DEVICES names GPUs this machine does not have, or was changed after "
                "CUDA started in this process (a notebook kernel keeps the first value: restart it)."], []
    return [], []


# what shows the hardware (or driver) is at fault, beyond a kernel that failed to run: the Xids of a failing GPU
# (the same list as the entry's pattern; Xid 13/31/43 are usually the program's own faults), ECC, off the bus
_HARDWARE_XIDS = frozenset({48, 63, 64, 74, 79, 92, 94, 95, 119, 120})
_HARDWARE_EVIDENCE = re.compile(r"ECC|(?i:fallen off the bus|\bGPU is lost\b)")


def _hardware(facts: dict[str, Any], text: str) -> Analysis:
    xid = facts.get("xid")
    if xid in _HARDWARE_XIDS or _HARDWARE_EVIDENCE.search(text):
        where = "".join(part for part, value in ((f": {facts.get('fault')}", facts.get("fault")),
                                                 (f" (Xid {xid})", xid in _HARDWARE_XIDS)) if value)
        facts["hardware_detail"] = (f"The GPU reported a fault that comes from the hardware or the driver, not from "
                                    f"the program{where}. Every process on that GPU fails; the same code usually runs "
                                    "elsewhere.")
        return [], []
    facts["hardware_detail"] = ("A kernel on the GPU failed to run ('unspecified launch failure'), with no sign of a "
                                "hardware fault in the text (no Xid of a failing GPU, no ECC error, no GPU fallen off "
                                "the bus). Suspect a custom CUDA kernel (an extension) or an out-of-bounds access in "
                                "one first, and the GPU or its power supply second.")
    notes = ["'unspecified launch failure' alone does not prove a hardware fault: when it happens at the same "
             "operation every time, suspect a custom CUDA kernel (extension) or, on a desktop GPU, the display "
             "watchdog; when it happens at random steps, the GPU or its power supply."]
    if isinstance(xid, int):
        notes.append(f"Xid {xid} is not among the Xids of a failing GPU: Xid 13, 31 and 43 usually come from the program "
                     "itself (an illegal instruction or an out-of-bounds memory access in a kernel).")
    return notes, [Fix("Find the kernel that failed, then check the GPU",
                       "CUDA_LAUNCH_BLOCKING=1 python train.py  # the traceback now stops at the kernel that failed\n"
                       "sudo dmesg -T | grep -i xid            # Xid 48/79/94/95: the GPU; none: look at the kernel")]


def _broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    out = []
    for x, y in zip(reversed((1,) * (len(b) - len(a)) + a), reversed((1,) * (len(a) - len(b)) + b)):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    return tuple(reversed(out))


def _loss_broadcast(facts: dict[str, Any], text: str) -> Analysis:
    target, pred = facts.get("target_shape"), facts.get("input_shape")
    if not isinstance(target, tuple) or not isinstance(pred, tuple):
        return [], []
    shape = _broadcast_shape(pred, target)
    if shape is None:
        return [], []
    n_pred, n_target, n_out = (max(1, _prod(t)) for t in (pred, target, shape))
    if n_out > max(n_pred, n_target):
        facts["broadcast_detail"] = (f"They are broadcast against each other, so the loss compares every prediction "
                                     f"with every target (the loss is averaged over shape {list(shape)}) and the model "
                                     "learns the wrong thing without any error.")
        return [f"Input {list(pred)} and target {list(target)} broadcast to {list(shape)}: {n_out} differences instead "
                f"of {max(n_pred, n_target)}, every prediction compared with every target. The loss still decreases, "
                "towards the mean of the targets, not the right answer for each sample."], []
    if n_pred == n_target:  # only dimensions of size 1 differ: element i still meets element i
        facts["broadcast_detail"] = (f"They broadcast to shape {list(shape)}, with no more elements than either of "
                                     "them, so each prediction still meets only its own target: harmless here. Reshape "
                                     "one of them to match the other to silence the warning.")
        return [], []
    small, big = (target, pred) if n_target < n_pred else (pred, target)
    facts["broadcast_detail"] = (f"They broadcast to shape {list(shape)}: the smaller one, {list(small)}, is repeated "
                                 f"along its missing or size-1 dimensions to fill {list(big)}, so each of its values "
                                 "is compared with several of the other's. That is right only if this reuse is "
                                 "intended; otherwise the model learns the wrong thing: make the two shapes equal.")
    return [], []


def _grad_strides(facts: dict[str, Any], text: str) -> Analysis:
    sizes, grad, bucket = facts.get("grad_sizes"), facts.get("grad_strides"), facts.get("bucket_strides")
    if not (isinstance(sizes, tuple) and isinstance(grad, tuple) and isinstance(bucket, tuple)):
        return [], []
    if len(sizes) == len(grad) == len(bucket):
        differing = [i for i in range(len(sizes)) if grad[i] != bucket[i]]
        if differing and all(sizes[i] == 1 for i in differing):
            return [f"The strides differ only in dimensions of size 1 (sizes {list(sizes)}): the memory layout is the "
                    "same, so this warning is harmless here (typical of 1x1 convolution weights)."], []
        if len(sizes) == 4 and grad[1] == 1 and bucket[1] != 1:
            return [f"The gradient of this {list(sizes)} weight is in channels_last layout (stride 1 on dimension 1) "
                    "while DDP's bucket is contiguous: convert the model to channels_last before wrapping it in DDP."], []
    return [], []


def _optimizer(facts: dict[str, Any], text: str) -> Analysis:
    if "empty parameter list" in text:
        facts["setup_detail"] = ("The optimizer was given no parameters: the model (or the filter applied to its "
                                 "parameters) yielded nothing to optimise.")
    elif "more than one parameter group" in text:
        # raised while the optimizer is built (add_param_group), not when a state is loaded
        facts["setup_detail"] = ("A parameter is listed in two parameter groups: each parameter may be in only one "
                                 "group. Deduplicate the groups, typically a 'rest' group built from "
                                 "model.parameters() that also holds the parameters given a group of their own.")
        facts["first_step_detail"] = ("Print, for each parameter group, the names of its parameters and look for a name "
                                      "that is in two groups; build the groups so that each parameter is in one.")
        return [], [Fix("Deduplicate the parameter groups: each parameter in one group only",
                        "head = {id(p) for p in model.head.parameters()}\n"
                        "rest = [p for p in model.parameters() if id(p) not in head]\n"
                        "optimizer = torch.optim.AdamW([{'params': rest},\n"
                        "                               {'params': model.head.parameters(), 'lr': 1e-3}], lr=1e-4)")]
    elif "parameter group" in text:
        facts["setup_detail"] = ("The optimizer state being loaded was saved for a different set of parameters: the "
                                 "number of parameter groups, or of parameters in a group, differs from this optimizer.")
    elif "non-leaf Tensor" in text or "can only optimize Tensors" in text:
        facts["setup_detail"] = ("The optimizer was given something that is not a parameter: a tensor computed from "
                                 "one (a non-leaf), or another object.")
    return [], []


# the innermost frame as IPython 8+ prints a cell, or the interactive prompt (a kernel's own file: is_cell_file)
_PROMPT = re.compile(r"^(?:Cell In\[\d+\]|<stdin>|<string>)$")


def relative_import_runner(structure: Any) -> dict[str, str]:
    """What ran a failed relative import, from its innermost frame (a pasted traceback's or a live one's): a notebook
    cell gets its own first step (import absolutely); no frame, nothing (the summary then names neither)."""
    from nbdebug.core._cells import is_cell_file
    from nbdebug.core.knowledge.usercode import (
        RELATIVE_IMPORT_CELL,
        RELATIVE_IMPORT_CELL_STEP,
        RELATIVE_IMPORT_SCRIPT,
    )

    frame = structure.innermost
    if frame is None:
        return {}
    if _PROMPT.match(frame.path) or is_cell_file(frame.path):
        return {"runner": RELATIVE_IMPORT_CELL, "first_step_detail": RELATIVE_IMPORT_CELL_STEP}
    return {"runner": RELATIVE_IMPORT_SCRIPT}


def _extension(facts: dict[str, Any], text: str) -> Analysis:
    from nbdebug.core.knowledge.env import NINJA_STEP

    if str(facts.get("reason", "")).startswith("Ninja is required"):  # torch's JIT loader, before any compiling
        facts["first_step_detail"] = NINJA_STEP
        return [], [Fix("Install ninja", "%pip install ninja")]
    return [], []


def _symbol(facts: dict[str, Any], text: str) -> Analysis:
    from nbdebug.core.knowledge.env import TPU_LIBRARY_STEP

    if str(facts.get("symbol", "")).startswith("Tpu") and "not available in this library" in text:
        facts["first_step_detail"] = TPU_LIBRARY_STEP  # two libtpu builds in one process, not an extension's build
    return [], []


_HUB_REFUSED = re.compile(r"GatedRepoError|RepositoryNotFoundError|gated repo|Can't load (?:the )?\w[\w ]{0,30} for '"
                          r"|\b40[13] Client Error")


def _hub(facts: dict[str, Any], text: str) -> Analysis:
    from nbdebug.core.knowledge.io import HUB_ACCESS_STEP

    if _HUB_REFUSED.search(text):
        facts["first_step_detail"] = HUB_ACCESS_STEP  # the Hub's access and the name, before the files' contents
    return [], []


def _local_service(facts: dict[str, Any], text: str) -> Analysis:
    from nbdebug.core.knowledge.env import VISDOM_PORT, VISDOM_STEP

    if facts.get("port") == VISDOM_PORT:
        facts["first_step_detail"] = VISDOM_STEP  # Visdom's default port: its dashboard was not started
    return [], []


def _registry(facts: dict[str, Any], text: str) -> Analysis:
    from nbdebug.core.knowledge.library import REGISTRY_LISTS

    prefix = re.split(r"[_./-]", str(facts.get("name", "")), maxsplit=1)[0] or "vit"
    for marker, fix in REGISTRY_LISTS:
        if re.search(marker, text):  # the library that raised, by its own wording
            return [], [Fix(fix.title, fix.code.replace("{prefix}", prefix))]
    return [], []


def _two_libraries(facts: dict[str, Any], text: str) -> Analysis:
    from nbdebug.core.explain._installed import distribution_of
    from nbdebug.core.knowledge import entry
    from nbdebug.core.knowledge.env import LIBRARIES_CODE

    if not (facts.get("package") and facts.get("caller")):
        return [], []
    code = LIBRARIES_CODE.format(caller_dist=distribution_of(facts["caller"]), dist=distribution_of(facts["package"]))
    return [], [Fix(entry("libraries_disagree").fixes[0].title, code)]  # the entry's fix, with the two names


def _library(facts: dict[str, Any], text: str) -> Analysis:
    dist = facts.get("distribution") or facts.get("package") or "<package>"
    return [], [Fix("See the installed release", f"import importlib.metadata as md\nprint(md.version('{dist}'))")]


# the old THC runtime's words for cuBLAS's status codes ("cublas runtime error : the GPU program failed to execute")
_CUBLAS_WORDS = (("the GPU program failed to execute", "CUBLAS_STATUS_EXECUTION_FAILED"),
                 ("resource allocation failed", "CUBLAS_STATUS_ALLOC_FAILED"),
                 ("library not initialized", "CUBLAS_STATUS_NOT_INITIALIZED"),
                 ("architecture mismatch", "CUBLAS_STATUS_ARCH_MISMATCH"))
# a torch release named in the text: "torch==0.4.1", "torch 1.0.0", "PyTorch version: 0.4.1"
_TORCH_RELEASE = re.compile(r"(?i:\btorch|\bpytorch)(?: version)?[ =:]{1,3}v?(?P<major>\d{1,2})\.(?P<minor>\d{1,3})\b")
_ARCH_STEP = ("Compare the GPU's compute capability with the architectures this torch build has kernels for "
              "(torch.cuda.get_device_capability() against torch.cuda.get_arch_list()), and install a torch release "
              "built for this GPU.")


def _cublas(facts: dict[str, Any], text: str) -> Analysis:
    status = facts.get("status") or next((code for words, code in _CUBLAS_WORDS if words in text), "")
    if status:
        facts["status"] = status
    release = _TORCH_RELEASE.search(text)
    old = release is not None and int(release.group("major")) < 1
    if status in ("CUBLAS_STATUS_ALLOC_FAILED", "CUBLAS_STATUS_NOT_INITIALIZED"):
        facts["first_step_detail"] = ("Check the GPU's free memory first (nvidia-smi, torch.cuda.memory_reserved()): "
                                      f"{status} means cuBLAS could not allocate its handle or workspace; free memory "
                                      "or a smaller batch, and another process holding the GPU, are the usual causes.")
    elif status in ("CUBLAS_STATUS_ARCH_MISMATCH", "CUBLAS_STATUS_NOT_SUPPORTED") or (
            status == "CUBLAS_STATUS_EXECUTION_FAILED" and old):
        facts["first_step_detail"] = _ARCH_STEP
        if old:
            return ([f"torch {release.group('major')}.{release.group('minor')} (named in the text) predates the GPUs "  # type: ignore[union-attr]
                     "of the last years: its CUDA kernels were not built for them, so cuBLAS calls fail to run."], [])
    return [], []


ANALYSERS: dict[str, Callable[[dict[str, Any], str], Analysis]] = {
    "cublas_error": _cublas,
    "cuda_oom": _oom,
    "device_side_assert": _assert,
    "illegal_memory_access": _poisoned,
    "state_dict_keys": _state_dict,
    "size_mismatch_state_dict": _size_mismatch,
    "shape_mismatch": _shape,
    "torch_compile": _compile,
    "child_failed": _child,
    "nccl_timeout": _nccl_timeout,
    "cuda_unavailable": _cuda_unavailable,
    "cuda_hardware_fault": _hardware,
    "loss_broadcast": _loss_broadcast,
    "ddp_grad_strides": _grad_strides,
    "optimizer_setup": _optimizer,
    "library_raised": _library,
    "extension_build_failed": _extension,
    "undefined_symbol": _symbol,
    "checkpoint_load_failed": _hub,
    "local_service_unreachable": _local_service,
    "registry_name_missing": _registry,
    "libraries_disagree": _two_libraries,
}
