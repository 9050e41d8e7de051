"""Family-level answers from a traceback's structure, and the guards that keep every answer on its family.

When no category's message matches, the structure can still place an error with certainty: a Python error raised
in the user's own file is the user's code (``user_code_error``), a library that checked its arguments and raised is
a call that library rejects (``library_raised``), a package failing while importing its own parts is an install that
does not fit (``import_failed``), and a launcher reporting that a worker died of a signal names the signal's family
(``SIGNAL_KINDS``).  Each rule gives way to ``unknown`` when the text carries another family's evidence (shapes,
devices, checkpoints, distributed training): a wrong family is worse than none.

The guards drop a message match that the structure contradicts: a match inside a warning printed before an
unrelated exception, a size mismatch inside an optimizer's own update, a torch attribute missing in a script that
also runs another framework.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from nbdebug.core._cells import is_cell_file, site_label
from nbdebug.core.explain._installed import distribution_of
from nbdebug.core.explain._normalize import last_exception_line
from nbdebug.core.explain._raised_in import library_importing, spawned_child, unpacks_its_own
from nbdebug.core.explain._sequence import exception_before_crash, ignored_exception
from nbdebug.core.explain._structure import Frame, Structure

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
# frames of a loader reading a checkpoint or a pretrained model's files
# (a data loader's frame -- pil_loader, default_loader -- reads one sample, not a model's file)
_LOADING = re.compile(r"(?i:load(?!er)|from_pretrained|state_dict|checkpoint|restore)")
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
# a requirement stated together with the hardware it needs (bf16 on an Ampere GPU): the device, not the version
_HARDWARE = re.compile(r"(?i:\bgpu\b|ampere|compute capability|\bbf16\b)")
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


def _where(frame: Frame) -> str:
    """The frame as the user knows it: ``In [12], line 3: code`` for a notebook cell, ``train.py, line 81, in main``."""
    if frame.is_user and is_cell_file(frame.path):
        return site_label(frame.path, frame.line)
    if frame.path.startswith("Cell In"):  # a pasted IPython 8 traceback: "Cell In[3], line 2"
        return f"{frame.path.removeprefix('Cell ')}, line {frame.line}"
    name = frame.path.replace("\\", "/").rsplit("/", 1)[-1]
    return f"{name}, line {frame.line}, in {frame.func}" if frame.line else f"{name}, in {frame.func}"


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
    if s.cut and not live:
        from nbdebug.core.explain._raised_in import cut_import

        return cut_import(s, raw)  # a notebook's cut paste whose cell imports the package that raised; else unknown
    if not s.exc_type or ignored_exception(raw):
        return None  # no final exception (or one Python only ignored): nothing to place
    if s.exc_type.endswith("Warning") or _OTHER_FRAMEWORK.search(raw):
        # a live warning raised as an error (a warnings filter set to "error"; a pasted text's warning lines never end
        # its structure) is no broken call; a script that also runs TensorFlow / Keras mixes two frameworks' names
        return None
    from nbdebug.core.explain import _raised_in as at

    rules = (_tensor_types, at.program_start, _import, at.checkpoint_load, at.two_libraries, at.collate,
             at.distributed_call)
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


_WARNING_LINE = re.compile(r"\b[A-Z]\w*Warning: |^\s*warn(?:ings\.warn)?\(|^WARNING\b", re.MULTILINE)
_OPTIMIZER_STATE = re.compile(r"\bexp_avg(?:_sq)?\b|\bmomentum_buffer\b|\bsquare_avg\b")
_OTHER_FRAMEWORK = re.compile(r"Using TensorFlow backend|[/\\](?:tensorflow|keras)[/\\]|^import (?:tensorflow|keras)\b",
                              re.MULTILINE)
_SHAPE_SLUGS = frozenset({"shape_mismatch", "loss_broadcast", "view_non_contiguous"})
_INDUCTOR = re.compile(r"torchinductor|[/\\]_inductor[/\\]|CppCompileError|InductorError")
_LOADED_SHAPES = re.compile(r"(?i:checkpoint|state_dict|copying a param|pretrained|\bload)")
_SHAPE_WORDS = re.compile(r"(?i:shape|dimension|\bdims?\b|\bsize)")


# the user-code answers about a value of the wrong kind, and the compiler APIs whose results have a family of their
# own (``trace, _ = torch.jit.trace(...)``: what torch.jit returns in this release, not the user's object)
_VALUE_SLUGS = frozenset({"wrong_object_attribute", "call_signature"})
_COMPILER_CALL = re.compile(r"\btorch\.(?:jit|compile|_dynamo|export|onnx|fx)\b")


# a KeyError from transformers' Auto classes' mapping: the model type, not a dict of the user's
_AUTO_MAPPING = re.compile(r"transformers[/\\]models[/\\]auto[/\\]configuration_auto\.py\", line \d+, in __getitem__"
                           r"\s*\n(?:[^\n]*\n)?\s*KeyError: ")


def _library_lookup(raw: str) -> bool:
    """Whether a bare KeyError / IndexError was raised in a library's own code, below the user's last frame.

    ``KeyError: 0`` raised inside transformers' pipeline indexes the library's own dict (a bug of that release, or a
    call it does not expect): not a dict of the user's.  The standard library's frames (``os.environ``) count for
    whoever called them; a user's frame last keeps the user's reading, and a loader's frame (``torch.load`` reading a
    legacy archive) the file's.
    """
    from nbdebug.core.explain._structure import read

    return _raised_by_library(read(raw[-20_000:]))


# a library's lookup methods: a key missing there is the key the user's line asked for (``enc['labels']``,
# ``out['loss']``, ``df['labels']``), whatever the library's code below raised
_LOOKUPS = frozenset({"__getitem__", "__getattr__", "get"})


def _user_lookup(s: Structure) -> bool:
    """Whether the frame right below the user's last one is a library's ``__getitem__`` / ``__getattr__`` / ``get``
    (read in the root cause's frames, and in the outer part of a chained one: pandas re-raises from its index)."""
    for frames in (s.frames, s.outer):
        last_user = max((i for i, f in enumerate(frames) if f.is_user), default=-1)
        if 0 <= last_user < len(frames) - 1 and frames[last_user + 1].func.rsplit(".", 1)[-1] in _LOOKUPS:
            return True
    return False


def _raised_by_library(s: Structure) -> bool:
    frame = next((f for f in reversed(s.frames) if f.owner != "stdlib"), None)
    return (frame is not None and not s.cut and s.short_type in ("KeyError", "IndexError")
            and frame.owner != "user" and not any(_LOADING.search(f.func) for f in s.frames[-4:])
            and not _user_lookup(s))


_UNPICKLING = re.compile(r"(?i:pickl|serializ|load|find_class|restore)")


def _not_unpickling(raw: str) -> bool:
    """Whether a whole traceback shows no frame reading a file: a ``.pt`` named elsewhere is no pickle being read."""
    from nbdebug.core.explain._structure import read

    s = read(raw[-20_000:])
    return bool(s.frames) and not s.cut and not any(
        _UNPICKLING.search(f.path.replace("\\", "/").rsplit("/", 1)[-1]) or _UNPICKLING.search(f.func)
        or _UNPICKLING.search(f.source) for f in s.frames)


def frames_deny(slug: str, error: BaseException) -> bool:
    """``contradicted`` for what a live exception's frames show (its text holds the messages only)."""
    if slug not in _VALUE_SLUGS | {"missing_key"}:
        return False
    from nbdebug.core.explain._raised_in import backward_raised
    from nbdebug.core.explain._structure import from_exception

    s = from_exception(error)
    return backward_raised(s, "") is not None or slug == "missing_key" and _raised_by_library(s)


def _failing_line(raw: str) -> str:
    """The source line of the traceback's innermost frame (empty without frames)."""
    from nbdebug.core.explain._structure import read

    frame = read(raw[-20_000:]).innermost
    return frame.source if frame is not None else ""


_IMPORT_LINE = re.compile(r"(?:from [\w.]{1,200} import|import [\w.]{1,200})\b")
# the interactive shell's own packages: an error raised there is the shell failing, not the user's code
_SHELL = frozenset({"IPython", "ipykernel", "jupyter_client"})


def _shell_raised(raw: str) -> bool:
    """Whether the root cause of a traceback was raised inside IPython / ipykernel's own files."""
    from nbdebug.core.explain._structure import read

    if "IPython" not in raw and "ipykernel" not in raw:
        return False
    frame = read(raw[-20_000:]).innermost
    return frame is not None and frame.owner in _SHELL


_MISSING_MODULE = re.compile(r"No module named '(?P<module>[\w.]{1,200})'")
_NO_DISTRIBUTION = re.compile(r"(?:No matching distribution found for|satisfies the requirement) (?P<pkg>[\w.-]{1,200})")


def _other_package_missing(raw: str) -> bool:
    """Whether the text's missing module is another package than the one pip found no release of.

    A traceback's ``No module named 'peft'`` followed by pip failing on ``perf``: the pip line is a failed attempt at
    a fix (a typo, another package), and the missing module is the error to answer.  With the same name, pip's
    failure is the cause and its answer stands.
    """
    missing = _MISSING_MODULE.search(raw)
    wanted = _NO_DISTRIBUTION.search(raw)
    if missing is None or wanted is None:
        return False
    module = missing.group("module").split(".")[0].lower().replace("_", "-")
    package = wanted.group("pkg").lower().replace("_", "-")
    return not (package.startswith(module) or module.startswith(package))


# a missing module named like a project's own folder (models.yolo, utils.general, src.data): the project's code off
# sys.path (or a pickle written inside that project), never a package to pip install
_PROJECT_NAMES = r"models?|utils?|src|lib|modules|networks?|nets|tools|common|core|dataset|data|configs?|train"
_PROJECT_MODULE = re.compile(r"(?i:no ?module ?named?) ?'?(?:" + _PROJECT_NAMES + r")(?:\.[\w.]{1,200})?'?(?![\w.])")
# an attribute missing from such a module, or from the project's settings module: the project's code, not a release
_PROJECT_ATTRIBUTE = re.compile(r"module '(?:" + _PROJECT_NAMES + r"|cfg|settings|options|args)"
                                r"(?:\.[\w.]{1,200})?' has no attribute")


# a name missing from a module whose file Python names: the project's own module (not under site-packages), or a
# folder without __init__.py ("unknown location"), lacks it -- the project's code, not a library's release
_IMPORT_FROM = re.compile(r"cannot import name '?\w{1,200}'? from '(?P<module>[\w.]{1,200})' \((?P<path>[^()\n]{1,500})\)")
# libraries whose source checkouts (editable installs) live outside site-packages: their releases still differ
_KNOWN_LIBRARIES = frozenset({"torch", "torchvision", "torchaudio", "torchtext", "numpy", "scipy", "transformers",
                              "diffusers", "accelerate", "peft", "timm", "datasets", "huggingface_hub", "ultralytics",
                              "mmcv", "mmdet", "mmengine", "pytorch_lightning", "lightning", "torchmetrics",
                              "deepspeed", "xformers", "triton", "detectron2", "allennlp", "fairseq", "sklearn"})


def _project_module(line: str) -> bool:
    from nbdebug.core.explain._structure import owner_of

    m = _IMPORT_FROM.search(line)
    if m is None or m.group("module").split(".")[0] in _KNOWN_LIBRARIES:
        return False
    path = m.group("path").strip()
    return path == "unknown location" or owner_of(path) == "user"


_NAN_WORDS = re.compile(r"(?i:\bnan\b|\binf\b|infinity|non-finite|not finite)")


def _later_exception(line: str, raw: str) -> bool:
    """Whether a log line is followed by a whole traceback ending in an exception whose message is not about it.

    ``loss: nan`` logged before ``RuntimeError: mat1 and mat2 shapes cannot be multiplied``: the exception stopped the
    run and is the error to answer; a NaN in the log before it is background (a message naming NaN keeps it).
    """
    from nbdebug.core.explain._structure import read

    s = read(raw[-20_000:])
    if not s.exc_type or s.cut or not s.frames or _NAN_WORDS.search(s.message):  # (read() skips warnings' lines)
        return False
    return line not in s.message and line[:80] not in raw[s.frames[0].start:]


def contradicted(slug: str, line: str, patterns: Sequence[re.Pattern[str]], raw: str, text: str) -> bool:
    """Whether the text's structure contradicts a category matched on ``line``.

    - a match on a warning's line, when the text ends with an exception of another kind that the category's
      patterns do not match anywhere outside warnings: the warning is background, not the cause;
    - a size mismatch raised in an optimizer's own update (``exp_avg``): the parameters and their optimizer state
      disagree (sharded, reloaded from another model), not the shapes of the user's tensors;
    - a torch attribute missing in a script that also runs TensorFlow / Keras: a name bound to the other framework's
      module as easily as a version that lacks it;
    - pip finding no release of a package other than the module the traceback misses (a retyped name);
    - a missing module named like a project's own folder (``models.yolo``): the project's code, not a package; a
      name missing from a module whose file is the project's own (or a folder without ``__init__.py``), likewise;
    - a NaN loss (a checkpoint said missing, a version requirement, no samples found) logged before a whole
      traceback whose exception is not about it: the exception is the error; the same for a ``PJRT_DEVICE`` setting
      before a traceback with no torch_xla in it;
    - an unpacking error in a library's line that unpacks its own method's result: the library's code, not the user's
      object;
    - a value of the wrong kind on a line that calls a compiler API (torch.jit, torch.compile, torch.export): what that
      API returns in the installed release, the compile family's question;
    - a value of the wrong kind raised in a library's top-level code while it is imported: its import, not a value;
    - a KeyError raised by transformers' Auto mapping: a model type the installed release does not know; any bare
      KeyError raised in a library's own frame (the user's last): the library's dict, not the user's;
    - a module a pickle needs, when the traceback's last line is an ``import`` statement: the code's own import (a
      package's old layout), not a checkpoint being read (a ``.pt`` named on the command line is no unpickling), nor
      when a whole traceback shows no frame that loads or unpickles, nor a '__main__' class a spawned worker rebuilds;
    - a compiler's error in torch.compile's generated code (inductor): the compile family, not an extension's build;
    - a value of the wrong kind, or a missing key, raised inside IPython's own code (its formatter failing on another
      error: ``'TypeError' object has no attribute '_render_traceback_'``): the shell's error hides the user's.
    """
    if slug in _SHAPE_SLUGS and _OPTIMIZER_STATE.search(raw):
        return True
    if slug in _VALUE_SLUGS | {"missing_key"} and ignored_exception(raw, line):
        return True  # raised where Python could only ignore it (at exit, in a __del__): no error of the user's values
    if slug == "native_crash" and exception_before_crash(line, raw):
        return True  # a Python exception stopped the program, then its native libraries crashed at shutdown
    if slug == "api_missing" and _OTHER_FRAMEWORK.search(raw):
        return True
    if slug == "no_matching_wheel" and _other_package_missing(raw):
        return True
    if slug == "package_missing" and _PROJECT_MODULE.search(line):
        return True
    if slug == "api_missing" and (_project_module(line) or _PROJECT_ATTRIBUTE.search(line)):
        return True
    if slug in ("nan_loss", "checkpoint_load_failed", "version_required", "dataset_empty", "cli_usage") and line and _later_exception(
            line, raw[-20_000:]):
        return True
    if slug == "version_required" and _HARDWARE.search(line):
        return True  # "You need torch>=1.10, using Ampere GPU": the device's question, not the package's
    if slug == "xla_error" and "PJRT_DEVICE" in line and "torch_xla" not in raw and _later_exception(line, raw[-20_000:]):
        return True  # an environment variable on a command line, before an error no XLA frame raised
    if slug in _VALUE_SLUGS and _COMPILER_CALL.search(_failing_line(raw)):
        return True
    from nbdebug.core.explain._raised_in import raised_in_backward

    if slug in _VALUE_SLUGS | {"missing_key"} and raised_in_backward(raw):
        return True  # raised in a custom Function's backward that the engine ran: the autograd family's question
    if slug in _VALUE_SLUGS and library_importing(raw):
        return True  # a library's module failing in its own top-level code: its import (import_failed), no value
    if slug == "wrong_object_attribute" and "values to unpack" in line and unpacks_its_own(raw):
        return True
    if slug == "missing_key" and (_AUTO_MAPPING.search(raw[-20_000:]) or _library_lookup(raw)):
        return True
    if slug == "checkpoint_module_missing" and (_IMPORT_LINE.match(_failing_line(raw)) or _not_unpickling(raw)):
        return True
    if slug == "checkpoint_module_missing" and "'__main__'" in line and spawned_child(raw):
        return True  # a spawned worker rebuilding the parent's objects: multiprocessing_pickle's question
    if slug in _VALUE_SLUGS | {"missing_key"} and _shell_raised(raw):
        return True
    if slug == "shape_reported" and _LOADED_SHAPES.search(line) or slug == "pattern_invalid" and _SHAPE_WORDS.search(line):
        return True  # a checkpoint's sizes are the state dict's question; a pattern's line naming a shape, the shape's
    if slug == "extension_build_failed" and _INDUCTOR.search(raw):
        return True  # the compiler failing on torch.compile's generated C++: the compile family, not an install
    if line and _WARNING_LINE.search(line):
        exc_type, exc_message = last_exception_line(text)
        if exc_type and not exc_type.endswith("Warning") and (not exc_message or exc_message[:80] not in line):
            rest = "\n".join(ln for ln in text.split("\n") if not _WARNING_LINE.search(ln))
            return not any(p.search(rest) for p in patterns)
    return False
