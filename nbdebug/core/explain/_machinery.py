"""Family-level answers for errors raised inside a framework's own machinery, read from a traceback's structure.

``_family`` places an error raised in the user's file (``user_code_error``), in a library checking its arguments
(``library_raised``) or in a package's import (``import_failed``); both of the first two step aside when the text
names distributed training, and the user's rule steps aside for a line that calls a compiler, because those errors
belong to families of their own.  These rules answer them, each from the evidence it needs and nothing less:

- ``distributed_wrapper_raised``: a complete traceback whose innermost frame (below the standard library's) is
  DeepSpeed's own code, or accelerate's / transformers' DeepSpeed integration, raising one of Python's check
  classes (a config, a partitioned parameter, a step ZeRO does not allow); or, with no frames, an exception line whose
  message names DeepSpeed (its internal objects, its name or its config), and no file.  Not a cut traceback (its error may be any family's: a cut backward
  through ZeRO was labelled autograd, a cut ``deepspeed.initialize`` an install that did not fit), not an import, an
  ``AttributeError`` (a DeepSpeed op that was never built, a release without a name), a recursion, nor a message
  naming an install, a build, a version, memory or a device-side fault.
- ``compiler_call_rejected``: a Python error raised in the user's own line that calls torch's compiler or exporter
  (``torch.jit.trace``, ``torch.compile``, ``torch.onnx.export``, ``torch.export``), about the value that call
  returned or takes ("'function' object is not iterable" after ``a, b = torch.jit.trace(...)``): the compiler API of
  the installed torch is not the one the code was written for.  Not a message about tensors, an install or a file.
- ``distributed_launch_check``: an ``assert`` in the user's own code whose condition reads what the launcher set (the
  world size, a rank, whether the process group exists), not the GPUs' count.
- ``onnx_export_failed``: an error raised in torch's ONNX exporter's own frames (or, without frames, its classes and
  words): an operator or construct it cannot convert at the opset asked for, named so by the message or its class.
  Its checks on its own arguments are answered apart: an opset this torch does not know (``onnx_opset_unsupported``),
  ``dynamic_axes`` the dynamo-based exporter cannot translate (``onnx_exporter_arguments``).  Not an
  ``AttributeError`` or an import (releases that do not fit), an install or memory.
- ``runtime_operator_missing``: the ExecuTorch runtime's own words for an operator with no registered kernel (``kernel
  'aten::x.out' not found``, ``Missing operator: [4] aten::x.out``, ``OperatorMissing``), an operator named with its
  namespace.
"""

from __future__ import annotations

import re
from typing import Any

from nbdebug.core.explain._structure import Frame, Structure, where

__all__ = ["ONNX_OPSET_REFUSED", "compiler_call", "deepspeed_line", "distributed_wrapper", "exporter_line",
           "exporter_raised", "in_exporter_pass", "launch_assert", "runtime_operator_missing"]

# packages whose whole code is distributed-training machinery (its checks are the wrapper's, not the model's)
_WRAPPER_OWNERS = frozenset({"deepspeed", "fairscale", "megatron", "colossalai"})
# a library's integration of DeepSpeed: accelerate's plugin and prepare step, transformers' Trainer integration
_WRAPPER_PATH = re.compile(r"[/\\]accelerate[/\\]utils[/\\](?:deepspeed|megatron_lm)\.py$"
                           r"|[/\\]transformers[/\\](?:integrations[/\\])?deepspeed\.py$")
_WRAPPER_FUNC = re.compile(r"^(?:_prepare_deepspeed|_prepare_megatron_lm|deepspeed_init|deepspeed_config)$")
# the classes a wrapper's own checks raise (and DeepSpeed's own exception classes)
_CHECK_CLASSES = frozenset({"ValueError", "AssertionError", "RuntimeError", "NotImplementedError", "TypeError",
                            "KeyError", "IndexError"})
# another family's evidence in the message: an install or build, a release, memory, a device-side fault
_NOT_THE_WRAPPER = re.compile(r"(?i:\binstall|\bpip\b|\bconda\b|cuda_home|\bnvcc\b|\bninja\b|\bbuild|compil|"
                              r"undefined symbol|\.so\b|\bversions?\b|out of memory|\boom\b|device-side|"
                              r"illegal memory|cublas|cudnn|no kernel image|not supported on this gpu)")
# DeepSpeed's internal objects named in a message: its parameter conversion, its engine and optimizers, ZeRO's
# per-parameter attributes and status
_DEEPSPEED_OBJECTS = re.compile(r"_convert_to_deepspeed_param|\bDeepSpeed(?:Engine|ZeroOptimizer\w*|ZeRo\w*)\b|"
                                r"\bdeepspeed\.(?:runtime|ops|moe|zero)\.|\bds_(?:tensor|id|status|numel|shape)\b|"
                                r"\bZeroParamStatus\b|\bpartition_parameters\b")
# DeepSpeed named in a message: its internal objects, its name, its config and the config's own keys
_DEEPSPEED_NAMED = re.compile(_DEEPSPEED_OBJECTS.pattern + r"|(?i:\bdeepspeed\b|deepspeed_config|\bds_config\b)"
                              r"|\b(?:train_micro_batch_size_per_gpu|micro_batch_per_gpu|zero_optimization)\b")
_FILE_IN_MESSAGE = re.compile(r"[\w-]\.(?:json|ya?ml|py|pt|bin)\b|No such file")
# an exception line anywhere in a line (a title: "DeepSpeed+LoRA got RuntimeError: ...")
_EXCEPTION_IN_LINE = re.compile(r"\b(?P<cls>ValueError|AssertionError|RuntimeError|NotImplementedError|TypeError|"
                                r"KeyError|IndexError)\b:? (?P<msg>[^\n]{1,1000})")


def _is_wrapper(frame: Frame) -> bool:
    return (frame.owner in _WRAPPER_OWNERS or bool(_WRAPPER_PATH.search(frame.path))
            or frame.owner in ("accelerate", "transformers") and bool(_WRAPPER_FUNC.match(frame.func)))


def _facts(s: Structure, frame: Frame) -> dict[str, Any]:
    facts: dict[str, Any] = {"exc_type": s.short_type, "package": frame.owner, "where": where(frame)}
    user = s.innermost_user
    if user is not None:
        facts["user_where"] = where(user)
    return facts


def distributed_wrapper(s: Structure, raw: str) -> tuple[str, dict[str, Any]] | None:
    """An error a distributed-training wrapper's own code raised (DeepSpeed, accelerate's or transformers' DeepSpeed
    integration): its configuration or a step it does not allow, whatever the model."""
    frames = [f for f in s.frames if f.owner != "stdlib"]
    if not frames or s.cut or not _is_wrapper(frames[-1]):
        return None
    own_class = s.exc_type.startswith(f"{frames[-1].owner}.")
    if s.short_type not in _CHECK_CLASSES and not own_class or _NOT_THE_WRAPPER.search(s.message):
        return None
    last_user = max((i for i, f in enumerate(frames) if f.is_user), default=-1)
    if any(f.func == "<module>" for f in frames[last_user + 1:]):
        return None  # raised while the wrapper's package was being imported: import_failed's question
    return "distributed_wrapper_raised", _facts(s, frames[-1])


def deepspeed_line(raw: str) -> tuple[str, dict[str, Any]] | None:
    """A text without frames whose last exception line names DeepSpeed (its internal objects, its name, its config's
    keys; an issue's title, a log line) and no file: DeepSpeed's own code, or its integration's, raised it."""
    found = None
    for m in _EXCEPTION_IN_LINE.finditer(raw[-4000:]):
        found = m  # the last exception line: the error that ended the text
    if found is None or not _DEEPSPEED_NAMED.search(found.group("msg")) or _NOT_THE_WRAPPER.search(found.group(0)):
        return None
    if _FILE_IN_MESSAGE.search(found.group("msg")):
        return None  # a config file that is not where the code says: the path's question, not the wrapper's
    return "distributed_wrapper_raised", {"exc_type": found.group("cls"), "package": "deepspeed"}


# the user's line calls torch's tracer, compiler or exporter
_COMPILER_API = re.compile(r"\btorch\.(?:jit\.(?:trace(?:_module)?|script)|compile|onnx\.export|export\.export)\s*\(")
_CALL_CLASSES = frozenset({"TypeError", "ValueError", "AttributeError"})
# what the message must be about: the object the call returned or was given (not a tensor, a file or an install)
_RETURNED_VALUE = re.compile(r"(?:'\w{1,100}' object is not (?:iterable|subscriptable|callable)|cannot unpack "
                             r"non-iterable|values to unpack|'\w{1,100}' object has no attribute '\w{1,100}')")


def compiler_call(s: Structure, raw: str) -> tuple[str, dict[str, Any]] | None:
    """A Python error raised in the user's line that calls torch's compiler or exporter, about the value the call
    returned or was given: the compiler API of the installed torch is not the one the code was written for."""
    frame = s.innermost
    if frame is None or not frame.is_user or s.short_type not in _CALL_CLASSES or s.chained:
        return None
    m = _COMPILER_API.search(frame.source)
    if m is None or not _RETURNED_VALUE.search(s.message):
        return None
    from nbdebug.core.knowledge.compile import COMPILER_CALL_STEP

    api = m.group(0).rstrip("( ")
    return "compiler_call_rejected", {"exc_type": s.short_type, "api": api, "where": where(frame),
                                      "first_step_detail": COMPILER_CALL_STEP.format(api=api)}


# the quantities a launcher sets: the number of processes and this process's place among them
_LAUNCH_NAMES = re.compile(r"\b(?:world_size|local_rank|global_rank|node_rank|num_processes|nproc_per_node|num_nodes|"
                           r"WORLD_SIZE|LOCAL_RANK|get_world_size\(\)|get_rank\(\)|is_initialized\(\))")
# the GPU's own count or presence: the CUDA family's question, not the launch's
_DEVICE_NAMES = re.compile(r"(?i:cuda|gpu|device)")


def launch_assert(s: Structure, raw: str) -> tuple[str, dict[str, Any]] | None:
    """An ``assert`` in the user's own code whose condition reads what the launcher set (the world size, a rank,
    whether the process group exists): the run was launched with fewer or more processes, or without the launcher,
    than the script requires."""
    frame = s.innermost
    if frame is None or not frame.is_user or s.short_type != "AssertionError" or s.chained:
        return None
    if not frame.source.startswith("assert ") or not _LAUNCH_NAMES.search(frame.source):
        return None
    if _DEVICE_NAMES.search(frame.source):
        return None  # the GPUs' count or availability: the CUDA family's question
    from nbdebug.core.knowledge.dist import LAUNCH_CHECK_STEP

    site = where(frame)
    return "distributed_launch_check", {"where": site, "condition": frame.source[len("assert "):].strip(),
                                        "first_step_detail": LAUNCH_CHECK_STEP.format(where=site)}


# torch's ONNX exporter (the TorchScript-based one and the dynamo-based one) and onnxscript, which the latter calls
_EXPORTER_PATH = re.compile(r"[/\\]torch[/\\]onnx[/\\]")
_EXPORTER_OWNERS = frozenset({"onnxscript"})
# the exporter's own words: an operator it cannot convert at an opset, an export it gave up on
_EXPORTER_WORDS = re.compile(r"Exporting the operator [^\n]{1,200} to ONNX opset version \d{1,3}|"
                             r"\bONNX export (?:of|failed)\b|Unsupported: ONNX export")
# an exception line (anywhere in a line: a test runner's "E   RuntimeError: ...") in the exporter's words or classes
_EXCEPTION_ANYWHERE = re.compile(r"(?P<cls>\b(?:torch\.onnx\.(?:errors\.)?)?[A-Z]\w{0,60}(?:Error|Exception)): "
                                 r"(?P<msg>[^\n]{1,1000})")
# what onnx_export_failed answers: an operator or construct of the model the exporter could not convert (its classes
# for that, or its words); not its checks on its own arguments (an opset it does not know, dynamic_axes the new
# exporter cannot translate), whose answers are a release's and an argument's
_CANNOT_CONVERT = re.compile(r"\b(?:UnsupportedOperatorError|SymbolicValueError|ConversionError|TorchExportError|"
                             r"DispatchError)\b|Exporting the operator\b|\bONNX export (?:of|failed)\b|"
                             r"Unsupported: ONNX export|Couldn't export (?:Python )?operator")
# the exporter's line converting the traced graph (a pass over it, an operator's symbolic): whatever it raises there
# is about a construct of the model ("untraced buffer": pytorch/pytorch#3736)
_CONVERTING = re.compile(r"\b_jit_pass_onnx\w{0,40}\(|\b_run_symbolic_function\(|\bsymbolic_fn\(")
_OPSET = re.compile(r"opset version (\d{1,3})")
# the exporter's checks on its own arguments: an opset this torch's exporter does not know (torch >= 2.9 names its
# argument), the TorchScript exporter's dynamic_axes that the dynamo-based one (the default since 2.9) cannot translate
ONNX_OPSET_REFUSED = re.compile(r"Unsupported (?:ONNX opset version|onnx_opset_version): (?P<opset>\d{1,3})\b")
_AXES_NOT_SHAPES = re.compile(r"Failed to convert 'dynamic_axes' to 'dynamic_shapes'")


def _exporter_argument(message: str) -> tuple[str, dict[str, Any]] | None:
    """The exporter refusing one of its own arguments, with the category that answers it (a release's question)."""
    if (m := ONNX_OPSET_REFUSED.search(message)) is not None:
        return "onnx_opset_unsupported", {"opset": int(m.group("opset"))}
    if _AXES_NOT_SHAPES.search(message):
        return "onnx_exporter_arguments", {}
    return None
_NOT_THE_EXPORTER = re.compile(r"(?i:\binstall|\bpip\b|\bconda\b|out of memory|no module named)")


def in_exporter_pass(s: Structure) -> bool:
    """Whether the innermost frame (below the standard library's) is torch's ONNX exporter running one of its own
    graph passes (``_jit_pass_onnx_constant_fold``, ``_jit_pass_onnx_eval_peephole``): it computed with the traced
    graph's constants, not with the model's forward."""
    frames = [f for f in s.frames if f.owner != "stdlib"]
    return bool(frames) and _EXPORTER_PATH.search(frames[-1].path) is not None and \
        "_jit_pass_onnx" in frames[-1].source


def exporter_line(raw: str) -> tuple[str, dict[str, Any]] | None:
    """A text whose structure says nothing (no frames, or an exception line printed before its frames) with an
    exception line in the exporter's own words or classes: torch's ONNX exporter raised it."""
    found = None
    for m in _EXCEPTION_ANYWHERE.finditer(raw[-4000:]):
        if m.group("cls").startswith("torch.onnx.") or _EXPORTER_WORDS.search(m.group("msg")) or \
                _exporter_argument(m.group("msg")) is not None:
            found = m
    if found is None or _NOT_THE_EXPORTER.search(found.group(0)):
        return None
    if (argument := _exporter_argument(found.group("msg"))) is not None:
        return argument
    if not _CANNOT_CONVERT.search(found.group(0)):
        return None
    facts: dict[str, Any] = {"exc_type": found.group("cls").rsplit(".", 1)[-1]}
    opset = _OPSET.search(found.group(0))
    if opset is not None:
        facts["opset"] = int(opset.group(1))
    return "onnx_export_failed", facts


def exporter_raised(s: Structure, raw: str) -> tuple[str, dict[str, Any]] | None:
    """An error torch's ONNX exporter raised: an operator or construct of the model it cannot convert at the opset
    asked for.  Read from its frames (the innermost below the standard library's is ``torch/onnx``'s or onnxscript's,
    a complete traceback; ``exporter_line`` reads a text without them); not an ``AttributeError`` or an import (a
    release of onnxscript or onnx that does not fit torch's), nor a message about an install or memory."""
    if s.cut or s.short_type in ("AttributeError", "ImportError", "ModuleNotFoundError"):
        return None
    if _NOT_THE_EXPORTER.search(s.message):
        return None
    frames = [f for f in s.frames if f.owner != "stdlib"]
    if not frames or not (_EXPORTER_PATH.search(frames[-1].path) or frames[-1].owner in _EXPORTER_OWNERS):
        return None
    if (argument := _exporter_argument(s.message)) is not None:
        return argument  # its checks on its own arguments: a release's answer, not an operator's
    if not _CANNOT_CONVERT.search(f"{s.exc_type}: {s.message}") and not _CONVERTING.search(frames[-1].source):
        return None  # neither its words for a construct it cannot convert nor raised while converting the graph
    facts = _facts(s, frames[-1])
    opset = _OPSET.search(s.message)
    if opset is not None:
        facts["opset"] = int(opset.group(1))
    return "onnx_export_failed", facts


# the ExecuTorch runtime's words for an operator no kernel is registered for (its operator registry, a method's load)
_ET_OPERATOR_MISSING = re.compile(r"kernel '(?P<op>\w{1,60}::[\w.]{1,200})' not found"
                                  r"|Missing operator: \[\d{1,6}\] (?P<op2>\w{1,60}::[\w.]{1,200})"
                                  r"|\bOperatorMissing\b")


def runtime_operator_missing(raw: str) -> tuple[str, dict[str, Any]] | None:
    """The ExecuTorch runtime saying an operator of the program has no kernel registered (in its log or its error,
    whatever the traceback that follows): the runner was built without that kernel library, or no library has it."""
    found = None
    for m in _ET_OPERATOR_MISSING.finditer(raw[-8000:]):
        found = m
    if found is None:
        return None
    op = found.group("op") or found.group("op2")
    return "runtime_operator_missing", ({"operator": op} if op else {})
