"""Family-level answers from a traceback's structure.

When no category's message matches, the structure can still place an error with certainty: a Python error raised
in the user's own file is the user's code (``user_code_error``), a library that checked its arguments and raised is
a call that library rejects (``library_raised``), a package failing while importing its own parts is an install that
does not fit (``import_failed``), and a launcher reporting that a worker died of a signal names the signal's family
(``SIGNAL_KINDS``).  Each rule gives way to ``unknown`` when the text carries another family's evidence (shapes,
devices, checkpoints, distributed training): a wrong family is worse than none.

The guards that drop a message match the structure contradicts (``contradicted``, ``frames_deny``) live in ``_guards``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from nbdebug.core.explain._claims import installed_command
from nbdebug.core.explain._guards import (  # noqa: F401 - contradicted, frames_deny: answered here too
    _COMPILER_CALL,
    _LOADING,
    _LOOKUPS,
    _OTHER_FRAMEWORK,
    _SHELL,
    contradicted,
    frames_deny,
)
from nbdebug.core.explain._installed import distribution_of
from nbdebug.core.explain._machinery import (
    compiler_call,
    deepspeed_line,
    distributed_wrapper,
    exporter_line,
    exporter_raised,
    launch_assert,
    runtime_operator_missing,
)
from nbdebug.core.explain._normalize import last_exception_line
from nbdebug.core.explain._raised_in import unpacks_its_own
from nbdebug.core.explain._sequence import ignored_exception
from nbdebug.core.explain._structure import Frame, Structure
from nbdebug.core.explain._structure import where as _where

__all__ = ["fallback", "signal_kind", "contradicted", "final_class", "frames_deny"]

# Evidence of a family that the generic answers do not address: with it, say unknown.
_TENSOR_WORDS = re.compile(r"(?i:tensor|shape|\bsize|dimension|\bdims?\b|dtype|device|cuda|gpu|cudnn|nccl|"
                           r"\bgrad|float16|bfloat16|half|memory|\bnan\b|\binf\b|mismatch)")
_CHECKPOINT_WORDS = re.compile(r"(?i:torch\.load|load_state_dict|state_dict|checkpoint|ckpt|safetensors|pickle|"
                               r"model loading|\.pth?\b|\.bin\b)")
# a message asking for a package: an environment's question, whoever raised it
_INSTALL_WORDS = re.compile(r"(?i:\binstall(?:ed|ing)?\b|\bpip\b|\bconda\b)")
# numbers in a list or tuple: sizes or counts of the user's data ("inconsistent numbers of samples: [16, 4]")
_QUANTITIES = re.compile(r"[\[(]\d{1,12}(?:, ?\d{1,12})+[\])]")
# libraries that decode data files (images, audio, video, arrays): their errors are about a file's contents
_DECODERS = frozenset({"PIL", "cv2", "imageio", "soundfile", "librosa", "audioread", "decord", "av", "h5py", "tifffile",
                       "skimage"})
_DECODE_WORDS = re.compile(r"(?i:cannot identify|decod|corrupt|truncat|(?:unsupported|unknown) (?:file )?format|"
                           r"invalid (?:header|data|file)|not a valid)")
# a file named in a message (a path, or a quoted name with a data file's extension): the file's contents are in question
_FILE_NAMED = re.compile(r"(?:^|[\s'\"(])(?:[A-Za-z]:\\|~?/|\./)[^\s'\"]{1,300}\.\w{1,6}\b"
                         r"|'[^'\s]{1,200}\.(?:jpe?g|png|bmp|tiff?|webp|gif|wav|flac|mp3|json|jsonl|csv|tsv|txt|ya?ml|"
                         r"parquet|arrow|h5|hdf5|npy|npz|pkl|zip|tar|gz)'")
# a library's own notice that a model's files were not found or not all loaded
_MODEL_FILES = re.compile(r"(?i:no [\w-]{1,40} model found|model not found|weights? of [^\n]{0,200}were not "
                          r"(?:initialized|used)|some weights [^\n]{0,100}were not)")
_DISTRIBUTED_WORDS = re.compile(r"(?i:deepspeed|\bzero[-_ ]?[0-3]?\b|fsdp|fully_shard|megatron|\bnccl\b|"
                                r"torch\.distributed|world_size|_prepare_deepspeed)")
# site-packages packages whose errors belong to a family of their own (distributed, XLA, kernels, compilers)
_OWN_FAMILY = frozenset({"deepspeed", "torch_xla", "triton", "numba", "horovod", "fairscale", "apex",
                         "bitsandbytes", "xformers", "flash_attn", "megatron", "colossalai", "jax", "tensorflow",
                         "keras", "onnxruntime", "tensorrt"})
# torch's own Python code that checks a call's arguments (the rest has families of its own: data, cuda, dist, ...)
_TORCH_API = re.compile(r"[/\\]torch[/\\](?:nn[/\\](?:modules|utils|init\.py|functional\.py)|optim[/\\])")

_USER_TYPES = ("NameError", "UnboundLocalError", "KeyError", "AttributeError", "TypeError", "IndexError",
               "ValueError", "ZeroDivisionError", "AssertionError", "SyntaxError", "IndentationError",
               "UnicodeDecodeError", "UnicodeEncodeError")
# a name error's own words (a missing name, never data) may be checked without the tensor words
_NAME_TYPES = ("NameError", "UnboundLocalError", "SyntaxError", "IndentationError")
_LIBRARY_TYPES = ("ValueError", "TypeError", "KeyError", "AttributeError", "NotImplementedError", "AssertionError",
                  "IndexError")


def _user_code(s: Structure, raw: str) -> tuple[str, dict[str, Any]] | None:
    from nbdebug.core.knowledge.usercode import USER_ERROR_STEPS

    frame = s.innermost
    if frame is None or not frame.is_user:
        return None
    kind = s.exc_type
    if kind not in _USER_TYPES:
        # another class raised by the code's own ``raise``: a check the project wrote (RuntimeError, Exception, ...)
        if "." in kind or not frame.source.startswith("raise ") or _DISTRIBUTED_WORDS.search(raw):
            return None
        kind = "raise"
    if s.exc_type not in _NAME_TYPES and (_TENSOR_WORDS.search(s.message) or kind == "raise" and
                                          _TENSOR_WORDS.search(frame.source)):
        return None  # a torch operation called from the user's line: a shape / device / dtype family
    if s.exc_type == "AssertionError" and _TENSOR_WORDS.search(frame.source):
        return None  # the assert's condition is its message: `assert torch.cuda.is_available()` is about the GPU
    if _COMPILER_CALL.search(frame.source):
        return None  # the value a compiler API returned (torch.jit.trace): the compile family's question
    if _INSTALL_WORDS.search(s.message):
        return None  # the code's own check that a package imports ('Please install mmdet'): the install, not the code
    if _CHECKPOINT_WORDS.search(raw):
        return None  # a loader that failed in the user's own helper: the file, not the code, may be the cause
    if s.exc_type == "AttributeError" and re.search(r"DataParallel|\.module\b", raw):
        return None
    where = _where(frame)
    return "user_code_error", {"exc_type": s.exc_type, "where": where,
                               "first_step_detail": USER_ERROR_STEPS[kind].format(where=where)}


def _library(s: Structure, raw: str) -> tuple[str, dict[str, Any]] | None:
    from nbdebug.core.knowledge.library import LIBRARY_STEP

    frame = s.innermost
    if frame is None or frame.owner in ("user", "stdlib") or frame.owner in _OWN_FAMILY or frame.owner in _SHELL:
        return None  # IPython's own code failing (its formatter on another error) is no call the user made
    own_class = s.exc_type.startswith(f"{frame.owner}.") or s.exc_type.startswith(f"{frame.owner.split('_')[0]}.")
    if s.short_type not in _LIBRARY_TYPES and not own_class:
        return None
    if frame.owner in _DECODERS and (own_class or _DECODE_WORDS.search(s.message)):
        return None  # a decoder failing on a file's bytes: the data's question as much as the call's
    if frame.owner == "torch" and not (_TORCH_API.search(frame.path) and frame.source.startswith("raise ")):
        return None  # torch's own checks outside its module/optimizer API have families of their own
    if s.owners & _OWN_FAMILY or _DISTRIBUTED_WORDS.search(raw):
        return None
    if (_TENSOR_WORDS.search(s.message) or _CHECKPOINT_WORDS.search(s.message) or _QUANTITIES.search(s.message)
            or _FILE_NAMED.search(s.message)):
        return None  # the library reports the data's sizes, a device or a file: another family's evidence
    if (s.short_type in ("KeyError", "IndexError") and frame.source and not frame.source.startswith("raise")
            and frame.func not in _LOOKUPS | {"pop"}):
        return None  # the library's own lookup failing ("KeyError: 0"), not a key asked for: nothing it rejected
    if "values to unpack" in s.message and unpacks_its_own(raw):
        return None  # the library unpacking its own method's result: its code, not the call
    if s.short_type in ("KeyError", "IndexError", "AttributeError") and (
            any(_LOADING.search(f.func) for f in s.frames[-4:]) or _CHECKPOINT_WORDS.search(raw)
            or _MODEL_FILES.search(raw)):
        # a lookup that failed while a loader read a file, or in a text saying the model's files were not found or
        # not loaded: the files' contents, as likely as the call
        return None
    user = s.innermost_user
    package = frame.owner
    where = _where(frame)
    call = f"the call at {_where(user)}" if user is not None else f"the code's call into {package}"
    dist = distribution_of(package)
    facts: dict[str, Any] = {"exc_type": s.short_type, "package": package, "where": where, "distribution": dist,
                             "first_step_detail": LIBRARY_STEP.format(package=package, where=where, call=call,
                                                                      dist=dist)}
    if user is not None:
        facts["user_where"] = _where(user)
    return "library_raised", facts


def _import_step(package: str) -> str:
    from nbdebug.core.knowledge.env import (
        IMPORT_STEP,
        IMPORT_STEP_COMPANION,
        IMPORT_STEP_TORCH,
        TORCH_COMPANIONS,
    )

    if package == "torch":
        return IMPORT_STEP_TORCH
    template = IMPORT_STEP_COMPANION if package in TORCH_COMPANIONS else IMPORT_STEP
    return template.format(package=package, dist=distribution_of(package))


_PACKAGE_PATH = re.compile(r"[/\\](?:site|dist)-packages[/\\](?P<pkg>\w{1,100})")


def _importing(frames: Sequence[Frame]) -> Frame | None:
    """The innermost frame of a library's module running its top-level code below the user's last frame, if any."""
    last_user = max((i for i, f in enumerate(frames) if f.is_user), default=-1)
    return next((f for f in reversed(frames[last_user + 1:])
                 if f.func == "<module>" and f.owner not in ("user", "stdlib")), None)


def _while_importing(s: Structure) -> bool:
    """Whether the error happened while a library's module ran its top-level code (the user's ``import`` line)."""
    return _importing(s.frames) is not None


def _import(s: Structure, raw: str) -> tuple[str, dict[str, Any]] | None:
    frame = s.innermost
    if s.short_type not in ("ImportError", "ModuleNotFoundError"):
        # any error raised while a library is being imported: its versions and its dependencies' do not fit
        if frame is None or frame.owner in ("user", "stdlib") or not _while_importing(s):
            # a chained root cause (torch.jit compiling a decorator, ctypes loading a library) that surfaced while a
            # library's module was being imported: the import that failed is that library's
            frame = _importing(s.outer) if s.chained else None
            if frame is None:
                return _user_import(s, raw)
        if _TENSOR_WORDS.search(s.message) or _DISTRIBUTED_WORDS.search(s.message):
            return None
    m = _PACKAGE_PATH.search(s.message)
    if frame is not None and frame.owner not in ("user", "stdlib"):
        package = frame.owner
    elif m is not None:
        package = m.group("pkg")
    else:
        return None  # the user's own import: a missing package or a project module, not a broken install
    step = _import_step(package)
    facts: dict[str, Any] = {"package": package, "first_step_detail": step}
    if frame is not None:
        facts["where"] = _where(frame)
    return "import_failed", facts


# what an import's own failure may still be about: the GPU, memory, distributed setup (not an op's name with "tensor")
_IMPORT_TIME_WORDS = re.compile(r"(?i:\bcuda\b|\bgpu\b|nccl|out of memory|\bdevice\b|\bshape\b|size mismatch)")
_ARROW = re.compile(r"^-{2,}> ?\d+ ([^\n]{0,300})", re.MULTILINE)
_IMPORT_OF = re.compile(r"(?:from (?P<from>[A-Za-z_]\w{0,100})[\w.]{0,200} import\b|import (?P<mod>[A-Za-z_]\w{0,100}))")


def _user_import(s: Structure, raw: str) -> tuple[str, dict[str, Any]] | None:
    """An error raised inside a library while the user's last line was an ``import`` (the frames between folded away,
    as Colab's "7 frames" does): the package that line imports failed inside its own import."""
    user, frame = s.innermost_user, s.innermost
    if user is None or frame is None or frame.owner in ("user", "stdlib") or frame.owner in _SHELL:
        return None
    m = _IMPORT_OF.match(user.source)
    if m is not None and _ARROW.search(raw):
        # IPython shows context lines first: only the arrow line under the user's frame ("----> 1 import x") failed
        arrow = _ARROW.search(raw, max(raw.find(user.path), 0))
        m = _IMPORT_OF.match(arrow.group(1)) if arrow is not None else None
    if m is None or _IMPORT_TIME_WORDS.search(s.message) or _DISTRIBUTED_WORDS.search(s.message):
        return None
    package = m.group("from") or m.group("mod")
    below = s.frames[s.frames.index(user) + 1:]
    if below and below[0].owner == package:
        return None  # the package's own frames are shown: whether it ran its module's code says it (_while_importing)
    return "import_failed", {"package": package, "where": _where(user), "first_step_detail": _import_step(package)}


# torch's old argument parser (<= 0.4): the types given against the one signature, position by position
_COMBINATION = re.compile(r"received an invalid combination of arguments - got \((?P<got>[^()\n]{0,600})\),? but "
                          r"expected \((?P<expected>[^()\n]{0,600})\)")
_TENSOR_TYPE = re.compile(r"\btorch\.(?:cuda\.)?(?P<kind>\w+)Tensor\b")


def _tensor_types(s: Structure, raw: str) -> tuple[str, dict[str, Any]] | None:
    """A tensor of one type given where the signature names another (FloatTensor for a LongTensor target): dtypes."""
    m = _COMBINATION.search(s.message or raw[-4000:])
    if m is None:
        return None
    got = [g.strip() for g in m.group("got").split(",")]
    expected = [e.strip(" []") for e in m.group("expected").split(",")]
    for given, wanted in zip(got, expected):
        a, b = _TENSOR_TYPE.match(given), _TENSOR_TYPE.match(wanted)
        if a and b and a.group("kind") != b.group("kind"):
            argument = wanted[b.end():].split(" or ")[0].strip()
            return "dtype_mismatch", {"dtype_a": b.group("kind"), "dtype_b": a.group("kind"),
                                      **({"argument": argument} if argument else {})}
    return None


# frames that only run to report one failure, whatever the message (which a cut paste may lack)
_REPORTING_FRAMES = (("_error_if_any_worker_fails", "dataloader_worker"),)


def fallback(s: Structure, raw: str, *, live: bool = False) -> tuple[str, dict[str, Any]] | None:
    """The family-level category the structure places an unmatched error in, with its facts; None: unknown.

    ``live``: an exception in this kernel.  Its panel already shows the user's own frame, line and values (the live
    evidence), so an error of the user's own code stays unknown there, quiet unless asked, as before.
    """
    for frame in reversed(s.frames[-3:]):
        for marker, slug in _REPORTING_FRAMES:
            if marker in frame.source or marker == frame.func:
                return slug, {}  # the DataLoader's watchdog: it runs only when a worker died
    from nbdebug.core.explain._raised_in import backward_raised

    if (placed := backward_raised(s, raw)) is not None:
        return placed  # a custom Function's backward failed: the autograd family, cut paste or not
    if (s.cut or not s.frames) and not live and (placed := exporter_line(raw)) is not None:
        return placed  # the ONNX exporter's words or class on an exception line the structure could not place
    if (placed := runtime_operator_missing(raw)) is not None:
        return placed  # ExecuTorch's runtime naming an operator without a kernel: the cause of what follows
    if not s.frames and (command := installed_command(raw)) is not None:
        return "command_not_on_path", {"command": command}  # pip said it is installed, the shell cannot find it
    if s.cut and not live:
        from nbdebug.core.explain._raised_in import cut_import

        return cut_import(s, raw)  # a notebook's cut paste whose cell imports the package that raised; else unknown
    if not s.frames and not s.cut and (placed := deepspeed_line(raw)) is not None:
        return placed  # a title or log line whose exception names DeepSpeed's internal objects
    if not s.exc_type or ignored_exception(raw):
        return None  # no final exception (or one Python only ignored): nothing to place
    if s.exc_type.endswith("Warning") or _OTHER_FRAMEWORK.search(raw):
        # a live warning raised as an error (a warnings filter set to "error"; a pasted text's warning lines never end
        # its structure) is no broken call; a script that also runs TensorFlow / Keras mixes two frameworks' names
        return None
    from nbdebug.core.explain import _raised_in as at
    from nbdebug.core.explain._source_line import command_line_key, empty_loop, loop_items

    rules = (_tensor_types, at.program_start, loop_items, command_line_key, empty_loop, at.lazy_import, _import,
             at.checkpoint_load, at.two_libraries, at.collate, at.distributed_call, distributed_wrapper,
             compiler_call, launch_assert, exporter_raised)
    for rule in rules + ((_library,) if live else (_user_code, _library)):
        placed = rule(s, raw)
        if placed is not None:
            return placed
    return None


_SELF_NAMING: frozenset[str] | None = None


def final_class(text: str) -> frozenset[str]:
    """The class of a pasted text's final exception line, when that class alone names a category.

    A live exception's class is matched against the entries' ``exception_types`` whatever its message; a pasted one
    whose message was cut ("ModuleNotFoundError: No mod") is read the same way.  Not a KeyError: its class says
    nothing of whose dict it was.
    """
    global _SELF_NAMING
    if _SELF_NAMING is None:
        from nbdebug.core.knowledge import entries

        _SELF_NAMING = frozenset(t for e in entries("explain") for t in e.exception_types) - {"KeyError"}
    name = last_exception_line(text)[0].rsplit(".", 1)[-1]
    return frozenset({name}) if name in _SELF_NAMING else frozenset()


def signal_kind(facts: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The category of a launcher's worker that died of a signal (``exitcode: -11``), from the crash table.

    Returns the category and the wrapper's facts worth keeping (exit code, rank, the signal's name).
    """
    from nbdebug.core.knowledge.crash import SIGNAL_KINDS, SIGNALS

    code = facts.get("exitcode")
    if not isinstance(code, int) or code >= 0 or -code not in SIGNAL_KINDS:
        return None
    kept = {k: v for k, v in facts.items() if k in ("exitcode", "rank", "local_rank", "signal", "signal_name")}
    kept.setdefault("signal_name", SIGNALS[-code][0])
    kept["signal_text"] = f"exit code {code}: {SIGNALS[-code][0]}, {SIGNALS[-code][1]}"
    return SIGNAL_KINDS[-code], kept
