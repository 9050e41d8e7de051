"""The guards that keep every answer on its family: a message match that the text's structure contradicts is dropped.

``contradicted`` reads a pasted text (its lines, its frames); ``frames_deny`` a live exception's frames (its text holds
the messages only).  Each guard names the structure that makes a category's reading wrong for this text: a warning
printed before an unrelated exception, a size mismatch inside an optimizer's own update, a torch attribute missing in
a script that also runs another framework, a value error raised inside IPython's own code, and the rest listed on
``contradicted``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from nbdebug.core.explain._claims import lacks_evidence, next_over_parameters
from nbdebug.core.explain._normalize import last_exception_line
from nbdebug.core.explain._raised_in import (
    backward_raised,
    library_importing,
    not_a_program,
    raised_in_backward,
    spawned_child,
    unpacks_its_own,
)
from nbdebug.core.explain._sequence import exception_before_crash, ignored_exception
from nbdebug.core.explain._source_line import loop_unpacks, native_alloc_at_import, option_lookup
from nbdebug.core.explain._structure import Structure, from_exception, owner_of, read
from nbdebug.core.knowledge.install import BUILD_KILLED, BUILD_STOPPED

__all__ = ["contradicted", "frames_deny"]

# a requirement stated together with the hardware it needs (bf16 on an Ampere GPU): the device, not the version
_HARDWARE = re.compile(r"(?i:\bgpu\b|ampere|compute capability|\bbf16\b)")
# frames of a loader reading a checkpoint or a pretrained model's files
# (a data loader's frame -- pil_loader, default_loader -- reads one sample, not a model's file)
_LOADING = re.compile(r"(?i:load(?!er)|from_pretrained|state_dict|checkpoint|restore)")
_WARNING_LINE = re.compile(r"\b[A-Z]\w*Warning: |^\s*warn(?:ings\.warn)?\(|^WARNING\b", re.MULTILINE)
_OPTIMIZER_STATE = re.compile(r"\bexp_avg(?:_sq)?\b|\bmomentum_buffer\b|\bsquare_avg\b")
_OTHER_FRAMEWORK = re.compile(r"Using TensorFlow backend|[/\\](?:tensorflow|keras)[/\\]|^import (?:tensorflow|keras)\b",
                              re.MULTILINE)
_SHAPE_SLUGS = frozenset({"shape_mismatch", "loss_broadcast", "view_non_contiguous"})
_INDUCTOR = re.compile(r"torchinductor|[/\\]_inductor[/\\]|CppCompileError|InductorError")
_LOADED_SHAPES = re.compile(r"(?i:checkpoint|state_dict|copying a param|pretrained|\bload)")
_SHAPE_WORDS = re.compile(r"(?i:shape|dimension|\bdims?\b|\bsize)")
# a word the shell ran as a command that is an option or a name=value setting (shell_argument_run's reading)
_ARGUMENT_RUN = re.compile(r"(?:^|: )(?:-{1,2}[A-Za-z][\w.-]{0,80}(?:=[^\s:]{0,200})?|[A-Za-z_]\w{0,80}[.-][\w.-]{0,80}="
                           r"[^\s:]{0,200}): ?(?:command )?not found|command not found: (?:-{1,2}[A-Za-z]|"
                           r"[A-Za-z_]\w{0,80}[.-][\w.-]{0,80}=)")
# an environment variable's assignment the shell ran as a command: bash expanding it from a variable ("$cmd") or
# finding it after a word; cmd.exe, which has no "NAME=value cmd" (its word cut at '='): no package is missing
_ASSIGNMENT_RUN = re.compile(r"(?:^|: )[A-Za-z_]\w{0,80}=[^\s:]{0,200}: ?(?:command )?not found|"
                             r"command not found: [A-Za-z_]\w{0,80}=|"
                             r"'[A-Z][A-Z0-9]*_[A-Z0-9_]+' is not recognized as an internal or external command")


@functools.lru_cache(maxsize=2)
def _tail(raw: str) -> Structure:
    """The structure of a text's last 20,000 characters, read once for all the guards asked about one text."""
    return read(raw[-20_000:])


def _names_no_program(raw: str) -> bool:

    s = _tail(raw)
    return not_a_program(s.message, [f.source for f in s.frames])


def _on_loop(raw: str) -> bool:
    return loop_unpacks(_tail(raw)) is not None


_BUILD_KILLED = re.compile(BUILD_KILLED)
_BUILD_STOPPED = re.compile(BUILD_STOPPED)


def _build_killed(tail: str) -> bool:
    """Whether the system's bare "Killed" comes before a build's stop (ninja, pip): a compiler killed for memory."""
    killed = _BUILD_KILLED.search(tail)
    return killed is not None and _BUILD_STOPPED.search(tail, killed.end()) is not None


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
    return _raised_by_library(_tail(raw))


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
    s = _tail(raw)
    return bool(s.frames) and not s.cut and not any(
        _UNPICKLING.search(f.path.replace("\\", "/").rsplit("/", 1)[-1]) or _UNPICKLING.search(f.func)
        or _UNPICKLING.search(f.source) for f in s.frames)


def frames_deny(slug: str, error: BaseException) -> bool:
    """``contradicted`` for what a live exception's frames show (its text holds the messages only)."""
    if slug not in _VALUE_SLUGS | {"missing_key", "option_not_accepted", "file_not_found", "iterator_empty"}:
        return False

    s = from_exception(error)
    if slug == "iterator_empty":
        return next_over_parameters(s)  # next() over a module's parameters: a module without any, no empty loader
    if slug == "file_not_found":  # subprocess starting a program (program_missing), a loader reading a model's file
        return any(f.func == "_execute_child" for f in s.frames) or any(
            f.func == "load" and f.owner == "torch" or _MODEL_LOADER.search(f.func) for f in s.frames[-4:])
    if slug == "option_not_accepted":
        return bool(s.frames)  # the frame that raised says whose check it was (the code's own, or a library's)
    if slug == "wrong_object_attribute" and loop_unpacks(s) is not None or slug == "missing_key" and option_lookup(s):
        return True  # the for line's items, a command-line option's value: placed by their own rules
    return backward_raised(s, "") is not None or slug == "missing_key" and _raised_by_library(s)


def _framed(raw: str) -> bool:
    """Whether a text holds a whole traceback (frames, then the exception line)."""
    s = _tail(raw)
    return bool(s.frames) and not s.cut


def _failing_line(raw: str) -> str:
    """The source line of the traceback's innermost frame (empty without frames)."""
    frame = _tail(raw).innermost
    return frame.source if frame is not None else ""


_IMPORT_LINE = re.compile(r"(?:from [\w.]{1,200} import|import [\w.]{1,200})\b")
# the interactive shell's own packages: an error raised there is the shell failing, not the user's code
_SHELL = frozenset({"IPython", "ipykernel", "jupyter_client"})


def _shell_raised(raw: str) -> bool:
    """Whether the root cause of a traceback was raised inside IPython / ipykernel's own files."""
    if "IPython" not in raw and "ipykernel" not in raw:
        return False
    frame = _tail(raw).innermost
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
                              "deepspeed", "xformers", "triton", "detectron2", "allennlp", "fairseq", "sklearn",
                              "torch_xla", "torchao", "bitsandbytes", "flash_attn", "vllm", "trl", "tokenizers",
                              "safetensors", "sentence_transformers", "onnx", "onnxruntime", "tensorflow", "jax", "keras",
                              "cv2", "PIL", "pandas", "matplotlib", "einops", "torch_geometric", "open_clip", "mmseg",
                              "mmpose", "mmdet3d", "apex", "tensorboard", "wandb", "gradio", "lightning_fabric",
                              "torchdata", "torchtune", "torchrl", "kornia", "albumentations", "optimum", "evaluate"})


# a model's file by its extension: a checkpoint (or a pretrained model's weights), not a data or config file
_MODEL_FILE = re.compile(r"(?i:\.(?:pth?|ckpt|bin|safetensors|pkl|pickle|h5|onnx|tar|pb|gguf|engine)'|pytorch_model|"
                         r"checkpoint|(?:tokenizer|adapter|generation|preprocessor)_config\.json'|tokenizer\.(?:json|model)'|"
                         r"model_index\.json'|pretrain|weights?\b|[/\\]models?[/\\]|model_zoo|"
                         r"\.cache[/\\](?:torch|huggingface))")
# a "file" with no folder and no extension ('ffmpeg', 'git'), or one in a bin folder or a .exe: a program a library
# ran (program_missing's, or the toolkit's install: /usr/local/cuda/bin/nvcc)
_PROGRAM_NAME = re.compile(r"No such file or directory: '(?:[^'\n]{0,300}[/\\]bin[/\\][\w.-]{1,60}|[\w-]{1,60}|"
                           r"[^'\n]{0,300}\.exe)'")


_MODEL_LOADER = re.compile(r"(?i:from_pretrained|state_dict|checkpoint|ckpt|restore|safe_open|torch\.load\b)")


def _loader_frames(raw: str) -> bool:
    """Whether a traceback's innermost frames load a model or a checkpoint (torch.load, from_pretrained, restore);
    a data file's reader (an image loader, yaml.safe_load) is no model's."""
    return any(f.func == "load" and f.owner == "torch" or _MODEL_LOADER.search(f.func) or _MODEL_LOADER.search(f.source)
               for f in _tail(raw).frames[-4:])


# a top-level module named like a project's own folder (models, utils, nets): with no file named, the only evidence
# that the module is the project's (markupsafe, typing_extensions: an installed package's release)
_PROJECT_FOLDER = re.compile(_PROJECT_NAMES, re.IGNORECASE)
# the same message without the file Python names (older Pythons, a retyped message, a title)
_IMPORT_FROM_BARE = re.compile(r"cannot import name '?\w{1,200}'? from '(?P<module>[\w.]{1,200})'(?! \()")


def _unplaced_module(line: str) -> bool:
    """Whether a name is missing from the project's own module: its file is the project's (or a folder without
    ``__init__.py``), or, with no file given, the module is named like a project's folder (``nets``, ``utils``) or no
    package of that name exists (the standard library's, a known library's, one installed here: markupsafe,
    typing_extensions are a release's question); a dotted module without a file is a package's submodule
    (api_missing)."""
    if _project_module(line):
        return True
    m = _IMPORT_FROM_BARE.search(line)
    if m is None or "." in m.group("module"):
        return False
    module = m.group("module")
    return _PROJECT_FOLDER.fullmatch(module) is not None or not _a_package_of_that_name(module)


def _a_package_of_that_name(module: str) -> bool:
    """Whether a top-level import name is the standard library's, a known library's, or an installed distribution's
    in this environment (markupsafe, typing_extensions): a package's release as likely as the project's file."""
    import sys

    from nbdebug.core.explain._installed import owns_import_name

    return module in sys.stdlib_module_names or module in _KNOWN_LIBRARIES or owns_import_name(module)


def _project_module(line: str) -> bool:

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
    s = _tail(raw)
    if not s.exc_type or s.cut or not s.frames or _NAN_WORDS.search(s.message):  # (read() skips warnings' lines)
        return False
    return line not in s.message and line[:80] not in raw[s.frames[0].start:]


def contradicted(slug: str, line: str, patterns: Sequence[re.Pattern[str]], raw: str, text: str,
                 live: BaseException | None = None) -> bool:
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
      error: ``'TypeError' object has no attribute '_render_traceback_'``): the shell's error hides the user's;
    - the system's "Killed" for a compiler that a build (ninja, pip) stopped after: the build's memory (MAX_JOBS), not
      a training process's;
    - a category whose evidence the text does not show (``_claims.lacks_evidence``).
    """
    if lacks_evidence(slug, line, raw, live):
        return True
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
    if slug == "file_not_found" and (_MODEL_FILE.search(line) or _PROGRAM_NAME.search(line) or _loader_frames(raw)):
        return True  # a model file, or a loader's frames reading it: the checkpoint's question (checkpoint_load_failed)
    if slug == "name_missing_in_module" and not _unplaced_module(line):
        return True  # a known library's module, or an installed package's file: the release's question (api_missing)
    if slug in ("nan_loss", "checkpoint_load_failed", "version_required", "dataset_empty", "cli_usage") and line and _later_exception(
            line, raw[-20_000:]):
        return True
    if slug == "version_required" and _HARDWARE.search(line):
        return True  # "You need torch>=1.10, using Ampere GPU": the device's question, not the package's
    if slug == "xla_error" and "PJRT_DEVICE" in line and "torch_xla" not in raw and _later_exception(line, raw[-20_000:]):
        return True  # an environment variable on a command line, before an error no XLA frame raised
    if slug in _VALUE_SLUGS and _COMPILER_CALL.search(_failing_line(raw)):
        return True

    if slug in _VALUE_SLUGS | {"missing_key"} and raised_in_backward(raw):
        return True  # raised in a custom Function's backward that the engine ran: the autograd family's question
    if slug in _VALUE_SLUGS and library_importing(raw):
        return True  # a library's module failing in its own top-level code: its import (import_failed), no value
    if slug == "wrong_object_attribute" and "values to unpack" in line and (unpacks_its_own(raw) or _on_loop(raw)):
        return True  # a library unpacking its own result; a for line unpacking the items it iterates (loop_items_unpack)
    if slug == "missing_key" and "[" in raw and option_lookup(_tail(raw)) is not None:
        return True  # a script's table looked up by a command-line option's value (script_choice_missing)
    if slug == "program_missing" and "No such file" in raw and _names_no_program(raw):
        return True  # a path or the cwd= the line passes: subprocess names the missing working directory
    if slug == "host_oom" and native_alloc_at_import(raw):
        return True
    if slug == "host_oom" and _build_killed(raw[-20_000:]):
        return True  # the system killed a compiler of a build (ninja, pip): the build's memory, MAX_JOBS  # no size, raised importing a library or calling torch.ops: an extension built for another torch
    if slug == "package_missing" and (_ARGUMENT_RUN.search(line) or _ASSIGNMENT_RUN.search(line)):
        return True  # an option or a name=value the shell ran as a command: a broken line continuation, an assignment
    if slug == "missing_key" and (_AUTO_MAPPING.search(raw[-20_000:]) or _library_lookup(raw)):
        return True
    if slug == "checkpoint_module_missing" and (_IMPORT_LINE.match(_failing_line(raw)) or _not_unpickling(raw)):
        return True
    if slug == "checkpoint_module_missing" and "'__main__'" in line and spawned_child(raw):
        return True  # a spawned worker rebuilding the parent's objects: multiprocessing_pickle's question
    if slug in _VALUE_SLUGS | {"missing_key"} and _shell_raised(raw):
        return True
    if slug == "option_not_accepted" and _framed(raw):
        return True  # whose check refused the value is in the frames: the code's own raise, or a library's
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
