"""Family answers from where an unmatched error was raised: a loader reading a model's files, one library calling
another, the DataLoader's collate step, torch.distributed.

``_family.fallback`` runs these rules when no category's message matched.  Each reads the traceback's frames, not
its words: an ``OSError`` raised inside ``from_pretrained`` or ``torch.load`` is about the files being read, whatever
its wording; an ``AttributeError`` raised in torchvision's call into PIL is two releases that do not fit, whatever the
name.  Like every family answer, each gives way to ``unknown`` on another family's evidence in the message (sizes,
devices, memory, the network, distributed training).
"""

from __future__ import annotations

import re
from typing import Any

from nbdebug.core.explain._structure import Frame, Structure, read, where

__all__ = ["checkpoint_load", "two_libraries", "collate", "distributed_call", "unpacks_its_own", "spawned_child", "library_importing",
           "cut_import", "backward_raised", "program_start", "lazy_import"]

# library functions that read a model's files (torch's own serialization module counts whatever the function)
_LOADER_FUNCS = frozenset({"from_pretrained", "_from_pretrained", "load_checkpoint", "_load_checkpoint",
                           "load_pretrained", "_load_pretrained_model", "cached_file", "cached_files",
                           "hf_hub_download", "get_checkpoint_shard_files", "load_sharded_checkpoint", "safe_open",
                           "load_file", "load_state_dict_from_url", "load_from_checkpoint", "_load_from_checkpoint",
                           "get_config_dict", "_get_config_dict", "load_model", "_load_model"})
_TORCH_LOADERS = re.compile(r"[/\\]torch[/\\](?:serialization\.py|hub\.py|jit[/\\]_serialization\.py)")
# a user's line that calls a loader
_LOADER_CALL = re.compile(r"\btorch\.(?:jit\.)?load\(|\.from_pretrained\(|\bload_from_checkpoint\(|\bsafetensors\b|"
                          r"\bload_file\(|\bsafe_open\(|\bload_checkpoint\(|\bload_state_dict_from_url\(")
# what a failed read raises (a TypeError is a call's signature: a config written for another release, or the user's
# keyword; MemoryError the host's memory; an ImportError a module a pickle needs: checkpoint_module_missing)
_LOAD_TYPES = frozenset({"OSError", "EnvironmentError", "FileNotFoundError", "IsADirectoryError", "NotADirectoryError",
                         "PermissionError", "ValueError", "RuntimeError", "KeyError", "EOFError", "UnpicklingError",
                         "AttributeError", "IndexError", "BadZipFile", "JSONDecodeError", "SafetensorError",
                         "HeaderTooLarge", "UnicodeDecodeError", "EntryNotFoundError",
                         "RepositoryNotFoundError", "LocalEntryNotFoundError"})
# a loader's own checks raise these for its arguments as well as for its files: only a message about a file counts
_CHECK_TYPES = frozenset({"ValueError", "RuntimeError", "KeyError", "IndexError", "AttributeError"})
_FILE_WORDS = re.compile(r"(?i:\bfiles?\b|folder|director|\bpath\b|not found|no such|n[o']t exist|\.json\b|"
                         r"config file|weights? file|checkpoint|shard|download|\bload(?:ing|ed)?\b|\bread(?:ing)?\b|"
                         r"corrupt|header|archive|pickle|safetensors|\.bin\b|\.pth?\b|model_type|unrecognized|"
                         r"\bEOF\b|\bzip\b)")
# a pickle naming a class the loading code lacks (a module, or the saving script's __main__): the file is fine, the
# code that loads it must define or import that class (checkpoint_module_missing's question, not the file's)
_PICKLED_CLASS = re.compile(r"Can't get attribute '")
# another family's words: sizes and devices (state_dict and CUDA categories), memory, the network, distributed runs
_OTHER_FAMILY = re.compile(r"(?i:size mismatch|\bshape\b|cuda|\bgpu\b|\bdevice\b|out of memory|\bmemory\b|"
                           r"connection|timed? ?out|\bproxy\b|\bssl\b|max retries|offline|nccl|distributed|deepspeed|"
                           r"\bfsdp\b|\brank\b|missing key|unexpected key|error\(s\) in loading state_dict)")


# a library's own notice that the model's files were not found or not loaded (not transformers' "were not initialized
# ... newly initialized" warning for a new head, which nearly every fine-tuning run prints)
_NOT_LOADED = re.compile(r"(?i:no [\w-]{1,40} model found|model not found|weights? of [^\n]{0,200}were not used|"
                         r"were not loaded|could not find [^\n]{0,60}(?:weights|checkpoint))")
# a message naming a package to install or remote code to trust: the environment or the call, not the file
_NOT_THE_FILE = re.compile(r"(?i:\bpip install\b|\binstall(?:ed)?\b|trust_remote_code)")
# a writer's frame (save_pretrained, safetensors' save_file, serialize_file): a save is no load
_SAVER = re.compile(r"_?(?:save|serialize)")


def _saver(frame: Frame) -> bool:
    return not frame.is_user and bool(_SAVER.match(frame.func.rsplit(".", 1)[-1]))


def _loader(frame: Frame) -> bool:
    if frame.is_user or frame.owner == "stdlib" or _saver(frame):
        return False
    if frame.owner == "torch":
        return bool(_TORCH_LOADERS.search(frame.path))
    return frame.owner == "safetensors" or frame.func.rsplit(".", 1)[-1] in _LOADER_FUNCS


def checkpoint_load(s: Structure, raw: str) -> tuple[str, dict[str, Any]] | None:
    """An error raised below a loader of a model's files (torch.load, safetensors, from_pretrained): the files.

    The loader is a library's frame among the last ones, or the user's last line calling one with the error raised
    below it, or the library that raised after its own notice that the model's files were not found or not loaded.
    """
    from nbdebug.core.knowledge.io import LOAD_STEP

    if (s.short_type not in _LOAD_TYPES or _OTHER_FAMILY.search(s.message) or _PICKLED_CLASS.search(s.message)
            or _NOT_THE_FILE.search(s.message) or not s.frames):
        return None
    user_index = max((i for i, f in enumerate(s.frames) if f.is_user), default=-1)
    below = s.frames[user_index + 1:]
    if any(_saver(f) for f in below):
        return None  # raised while writing a file (save_pretrained, save_file): the tensors being saved, not a read
    loader = next((f for f in below if _loader(f)), None)
    noticed = ""
    user = s.frames[user_index] if user_index >= 0 else None
    if loader is None and below and below[-1].owner not in ("stdlib", "torch") and _NOT_LOADED.search(raw):
        loader = below[-1]  # the library said the model's files were not found (or not all loaded), then failed
        noticed = loader.owner
    if loader is None and not (user is not None and below and _LOADER_CALL.search(user.source)):
        return None
    if any(_OTHER_FAMILY.search(f.path + " " + f.func) for f in below):
        return None  # a loader inside a distributed wrapper (deepspeed's engine, FSDP's state dict)
    if not noticed and s.short_type in _CHECK_TYPES and not _FILE_WORDS.search(s.message):
        return None  # a loader checking its arguments ("can't pass load_in_4bit with quantization_config"): the call
    if loader is not None and loader.owner == "torch":  # torch's reader, named by its public function
        noticed = "torch.jit.load" if "jit" in loader.path else "torch.hub" if "hub.py" in loader.path else "torch.load"
    name = noticed or loader.func if loader is not None else _LOADER_CALL.search(user.source or "").group(0).strip("(. ")  # type: ignore[union-attr]
    call = f"the call at {where(user)}" if user is not None else "the code"
    facts: dict[str, Any] = {"exc_type": s.short_type, "loader": name, "first_step_detail": LOAD_STEP.format(
        call=call, loader=name)}
    if loader is not None:
        facts["where"] = where(loader)
    if user is not None:
        facts["user_where"] = where(user)
    return "checkpoint_load_failed", facts


# what a library's call into another raises when the other's release lacks a name
_MISSING_NAME = frozenset({"AttributeError"})
_NOT_A_RELEASE = re.compile(r"(?i:'NoneType' object|tensor|shape|\bsize\b|device|cuda|dtype)")


def two_libraries(s: Structure, raw: str) -> tuple[str, dict[str, Any]] | None:
    """A name missing in one library's frame, called from another library's frame: two releases that do not fit.

    Not torch as the called library (its ``Module.__getattr__`` raises for the user's own modules), nor a ``None``
    or a tensor's attribute (a value, not a release).
    """
    from nbdebug.core.explain._installed import distribution_of
    from nbdebug.core.knowledge.env import LIBRARIES_STEP

    frames = [f for f in s.frames if f.owner != "stdlib"]
    if s.short_type not in _MISSING_NAME or len(frames) < 2 or _NOT_A_RELEASE.search(s.message):
        return None
    called = frames[-1]
    caller = next((f for f in reversed(frames) if f.owner != called.owner), None)
    if caller is None or caller.is_user or called.is_user or called.owner in ("torch", "user"):
        return None
    package, other = called.owner, caller.owner
    facts: dict[str, Any] = {"exc_type": s.short_type, "package": package, "caller": other, "where": where(called),
                             "caller_where": where(caller), "first_step_detail": LIBRARIES_STEP.format(
                                 package=package, caller=other, dist=distribution_of(package),
                                 caller_dist=distribution_of(other))}
    return "libraries_disagree", facts


# a line unpacking what the same object's own method returned ("a, b = self.measure(...)")
_UNPACK_OWN = re.compile(r"^[\w\s,()\[\]]{1,200}= ?self\.\w+\(")


def unpacks_its_own(raw: str) -> bool:
    """Whether an unpacking error was raised in a library's line unpacking its own method's result: the library's
    code (a bug of its release, or a failure it logged and turned into another value), not the user's object."""
    frame = read(raw[-20_000:]).innermost
    return frame is not None and frame.owner not in ("user", "stdlib") and bool(_UNPACK_OWN.match(frame.source))


_SIZES = re.compile(r"(?i:resize|equal size|\bsizes?\b)")
_REQUIRES_GRAD = re.compile(r"(?i:requires grad|automatic differentiation)")
_COLLATE = re.compile(r"[/\\]torch[/\\]utils[/\\]data[/\\]_utils[/\\]collate\.py$")


def collate(s: Structure, raw: str) -> tuple[str, dict[str, Any]] | None:
    """An error raised in the DataLoader's collate step (default_collate): the samples of a batch."""
    from nbdebug.core.knowledge.data import COLLATE_GRAD, COLLATE_GRAD_STEP, COLLATE_STRUCTURE

    frames = [f for f in s.frames if f.owner != "stdlib"]
    if not frames or not _COLLATE.search(frames[-1].path) or _OTHER_FAMILY.search(s.message) or _SIZES.search(
            s.message):
        return None  # samples of different sizes: collate_mismatch's question (or the DataLoader's report of it)
    facts = {"exc_type": s.short_type, "where": where(frames[-1]), "collate_problem": COLLATE_STRUCTURE}
    if _REQUIRES_GRAD.search(s.message):  # the samples' autograd history, not their structure
        facts |= {"collate_problem": COLLATE_GRAD, "first_step_detail": COLLATE_GRAD_STEP}
    return "collate_failed", facts


# the process group, its collectives and the launcher; not DTensor, distributed checkpoint, FSDP or pipelining, whose
# messages name the user's own mistake, which one process shows as well as many
_DISTRIBUTED = re.compile(r"[/\\]torch[/\\]distributed[/\\](?:(?:__init__|distributed_c10d|c10d_logger|rendezvous|"
                          r"constants|launch|run|_functional_collectives(?:_impl)?|device_mesh|collective_utils)\.py|"
                          r"elastic[/\\])")
# a launcher's or spawn's report of a child that failed: the child's own error answers (child_failed)
_REPORTS = re.compile(r"ChildFailedError|ProcessRaisedException|ProcessExitedException|SignalException")


def distributed_call(s: Structure, raw: str) -> tuple[str, dict[str, Any]] | None:
    """An error raised inside torch.distributed's own frames that no message names: the distributed family."""
    frames = [f for f in s.frames if f.owner != "stdlib"]
    if not frames or frames[-1].owner != "torch" or not _DISTRIBUTED.search(frames[-1].path) or _REPORTS.search(
            s.exc_type):
        return None
    facts: dict[str, Any] = {"exc_type": s.short_type, "where": where(frames[-1])}
    user = s.innermost_user
    if user is not None:
        facts["user_where"] = where(user)
    return "distributed_call_failed", facts


# a child process started by multiprocessing's spawn, unpickling what its parent sent (a Dataset, a function)
_SPAWN = re.compile(r"multiprocessing[/\\](?:spawn|popen_spawn_\w+)\.py|ForkingPickler")


def spawned_child(raw: str) -> bool:
    """Whether the text shows multiprocessing's spawn machinery (a DataLoader worker, mp.spawn on Windows / macOS)."""
    return _SPAWN.search(raw[-20_000:]) is not None


def library_importing(raw: str) -> bool:
    """Whether the innermost frame is a library's module running its top-level code (``list[int]`` in a signature
    under an older Python, a name its dependency lacks): an import that fails, whatever value the message names."""
    s = read(raw[-20_000:])
    frame = s.innermost
    return frame is not None and not s.cut and frame.func == "<module>" and frame.owner not in ("user", "stdlib")


# the header IPython and Colab print before a traceback ("IndexError      Traceback (most recent call last)"): the only
# place a cut paste still names its class
_HEADER_CLASS = re.compile(r"^(?P<cls>[A-Z]\w{0,100}(?:Error|Exception))[ \t]{3,}Traceback \(most recent call last\)",
                           re.MULTILINE)
# classes a package's own code raises on its way through an import that does not fit (not a device's or the OS's)
_IMPORT_TIME_CLASSES = frozenset({"ImportError", "ModuleNotFoundError", "AttributeError", "IndexError", "KeyError",
                                  "TypeError", "ValueError", "NameError", "SyntaxError"})


def cut_import(s: Structure, raw: str) -> tuple[str, dict[str, Any]] | None:
    """A notebook traceback cut before its message, whose cell's arrow line imports a package and whose frames below it
    are that package's own: the package failed inside its import (Colab folds the frames between as "6 frames").

    The class comes from IPython's header; classes that a device, the memory or the OS raise stay unknown.
    """
    from nbdebug.core.explain._family import _IMPORT_OF, _import_step
    header = _HEADER_CLASS.search(raw)
    user = s.innermost_user
    if header is None or header.group("cls") not in _IMPORT_TIME_CLASSES or user is None or not s.cut:
        return _cut_in_module(s, raw)
    m = _IMPORT_OF.match(user.source)
    below = s.frames[s.frames.index(user) + 1:]
    if m is None or not below:
        return None
    package = m.group("from") or m.group("mod")
    site = user
    if any(f.owner not in (package, "stdlib") for f in below):
        # another library's frames below the import: known to be an import only when every frame is a module's
        # top-level code (torch's __init__ importing tqdm, whose own import failed): the innermost module's package
        chain = [f for f in below if f.owner != "stdlib"]
        if not chain or any(f.func != "<module>" or f.is_user for f in chain):
            return None  # a library called at import time: which one failed is not known without the message
        package, site = chain[-1].owner, chain[-1]
    return "import_failed", {"package": package, "where": where(site), "exc_type": header.group("cls"),
                             "first_step_detail": _import_step(package)}


def _cut_in_module(s: Structure, raw: str) -> tuple[str, dict[str, Any]] | None:
    """A pasted traceback cut at a library's module-level frame, its exception printed before it ("OSError: Cannot
    find data file. Original error: dlopen: ..." above the frames): the failure came while that library was being
    imported.  Not when the message names the GPU, memory or distributed setup (an import that touches them)."""
    from nbdebug.core.explain._family import _DISTRIBUTED_WORDS, _IMPORT_TIME_WORDS, _import_step

    frames = [f for f in s.frames if f.owner != "stdlib"]
    if not s.cut or not s.exc_type or not frames or frames[-1].func != "<module>" or frames[-1].is_user:
        return None
    if _IMPORT_TIME_WORDS.search(s.message) or _DISTRIBUTED_WORDS.search(s.message):
        return None
    if not _entered_by_import(s, frames[-1]):
        return None  # a script's top level run by runpy's exec or a console script's main(): not an import
    package = frames[-1].owner
    return "import_failed", {"package": package, "where": where(frames[-1]), "exc_type": s.short_type,
                             "first_step_detail": _import_step(package)}


# importlib's own frames between an import line and the module it runs (Python usually hides them)
_IMPORTLIB_FRAME = re.compile(r"<frozen importlib|[/\\]importlib[/\\]")
_IMPORT_LINE = re.compile(r"(?:from\s+[\w.]{1,200}\s+)?import\s+\w|[^\n]{0,200}?\b(?:import_module|__import__)\(")


def _entered_by_import(s: Structure, module: Frame) -> bool:
    """Whether the frame above a module's top-level frame (importlib's aside) is an ``import`` line: the module was
    being imported, not run as a script (runpy's ``exec(code, run_globals)``, ``python -m``) or called."""
    above = [f for f in s.frames[:s.frames.index(module)] if not _IMPORTLIB_FRAME.search(f.path)]
    return bool(above) and _IMPORT_LINE.match(above[-1].source.strip()) is not None


# torch's frames that hand a backward pass to the autograd engine, which runs each Function's backward and each hook
_ENGINE_CALLS = frozenset({"backward", "_engine_run_backward", "run_backward", "grad"})
# errors of Python code (a value of the wrong kind, a name never set): not the engine's own checks
_CODE_CLASSES = frozenset({"AttributeError", "TypeError", "NameError", "UnboundLocalError", "KeyError", "IndexError",
                           "ValueError", "AssertionError"})


def backward_raised(s: Structure, raw: str) -> tuple[str, dict[str, Any]] | None:
    """An error of Python code raised while torch's autograd engine ran backward: a custom ``autograd.Function``'s
    backward (or a hook) failed, whoever's file holds it.

    A pasted traceback ends at torch's ``backward`` frame (the engine's C++ frames and the Function's own frame are
    printed below it only when Python sees them); a live one, or a full paste, shows the Function's ``backward``
    right below torch's call.  The last user frame is only the ``loss.backward()`` that started it.
    """
    if s.short_type not in _CODE_CLASSES or s.message.startswith("Caught "):
        return None  # (torch's ExceptionWrapper re-raising a worker's or a replica's error: its own answer)
    engine = max((i for i, f in enumerate(s.frames) if f.owner == "torch" and f.func in _ENGINE_CALLS), default=-1)
    if engine < 0:
        return None
    below = s.frames[engine + 1:]
    if below and not (below[0].func in ("backward", "apply") or below[0].owner in ("torch", "user")):
        return None  # a library's frame below that is no Function's backward: the engine is not where it failed
    facts: dict[str, Any] = {"exc_type": s.short_type, "where": where(below[-1] if below else s.frames[engine])}
    user = next((f for f in reversed(s.frames[:engine]) if f.is_user), None)  # the line that started backward
    if user is not None:
        facts["user_where"] = where(user)
    return "backward_function_raised", facts


def raised_in_backward(raw: str) -> bool:
    """``backward_raised`` for a text: whether its error was raised while the autograd engine ran backward."""
    return "backward" in raw and backward_raised(read(raw[-20_000:]), raw) is not None


_NAMED_FILE = re.compile(r"No such file or directory: '(?P<name>[^'\n]{1,300})'")


def not_a_program(message: str, sources: list[str]) -> bool:
    """Whether the file subprocess could not find is no program: a path (a missing ``cwd``, a script's folder) or the
    ``cwd=`` a line of the traceback passes (Python names the missing working directory, not the program)."""
    m = _NAMED_FILE.search(message)
    if m is None:
        return False  # Windows' WinError 2 names nothing: a missing cwd is WinError 267 there
    name = m.group("name")
    if "/" in name or "\\" in name:
        return True
    cwd = re.compile(r"\bcwd\s*=\s*[rfb]?['\"]" + re.escape(name) + r"['\"]")
    return any(cwd.search(source) for source in sources)


def live_cwd_missing(error: BaseException) -> bool:
    """Whether a live ``FileNotFoundError`` names the working directory subprocess was given, not its program."""
    import os

    tb, filename = error.__traceback__, getattr(error, "filename", None)
    while tb is not None and filename is not None:
        if tb.tb_frame.f_code.co_name == "_execute_child":
            cwd = tb.tb_frame.f_locals.get("cwd")
            try:
                return cwd is not None and os.fsdecode(cwd) == os.fsdecode(filename)
            except TypeError:
                return False
        tb = tb.tb_next
    return False


def program_start(s: Structure, raw: str) -> tuple[str, dict[str, Any]] | None:
    """A ``FileNotFoundError`` raised by subprocess starting a program (``_execute_child``): the program is missing or
    off PATH, whatever the language of the OS's message (a live exception's text has no frames to match)."""
    if s.short_type != "FileNotFoundError" or not any(f.func == "_execute_child" for f in s.frames[-3:]):
        return None
    if not_a_program(s.message, [f.source for f in s.frames]):
        return None
    m = re.search(r"No such file or directory: '(?P<program>[^'\n/\\]{1,80})'", s.message)
    return "program_missing", ({"program": m.group("program")} if m else {})


# Hugging Face's lazy modules (transformers, diffusers, peft) re-raise any error of a submodule's import with its name
# ("Failed to import transformers.models.x because of the following error", or the name alone as the whole line); a
# library's own check that a companion imports names it too ("Failed to import `f` and `g` from `mmdet.apis`.")
_LAZY_IMPORT = re.compile(r"Failed to import (?:`\w{1,100}`(?: and `\w{1,100}`)? from )?`?(?P<module>[A-Za-z_][\w.]{0,200})`?"
                          r"(?: because of the following error|[.!]?[ \t]*$|\. )", re.MULTILINE)


def lazy_import(s: Structure, raw: str) -> tuple[str, dict[str, Any]] | None:
    """A lazy module's report that importing one of its submodules failed: that package's import, whatever the inner
    error (a message another category names was answered before this rule runs)."""
    m = _LAZY_IMPORT.search(s.message) or (_LAZY_IMPORT.search(raw[-4000:]) if not s.frames else None)
    if m is None:
        return None
    from nbdebug.core.explain._family import _IMPORT_TIME_WORDS, _import_step

    if _IMPORT_TIME_WORDS.search(raw[m.end():m.end() + 2000]):
        return None  # the inner error is about the GPU, memory or a shape: not the import's versions
    package = m.group("module").split(".")[0]
    return "import_failed", {"package": package, "where": m.group("module"), "first_step_detail": _import_step(package)}
