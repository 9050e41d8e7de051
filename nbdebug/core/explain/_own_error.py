"""A family answer for an error that is a library's own: its own exception class, or its frames alone.

Threads about a less common library's error (dgl, skorch, allennlp, a ComfyUI node) are answered, more often than
not, by its release: a bug fixed in a later one, or a mismatch with a companion the code was written for.  When no
category matched and the error is plainly the library's -- a package-qualified class that is neither torch's nor the
standard library's (``dgl._ffi.base.DGLError: ...``), or a traceback whose frames are all that library's with none of
the user's -- ``fallback`` places it here, last of its rules: read the library's message, check its installed
release against the one the code was written for, search its tracker for the message, and only then the values.

Like every family answer it gives way to ``unknown`` on another family's evidence in the class or the message:
sizes and shapes, dtypes, devices, memory, files and checkpoints, the network, permissions, distributed training.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from nbdebug.core.explain._structure import Frame, Structure

__all__ = ["library_own_error"]

# another family's words, in the class's name or the message (one word of these and the answer is unknown)
_OTHER_FAMILY = re.compile(
    r"(?i:\bsizes?\b|shape|\bdims?\b|dimension|match|expected[^\n]{0,200}\bgot\b|\bgot\b[^\n]{0,40}\d[^\n]{0,40}"
    r"\band\b|dtype|float|half|\bint\d|\blong\b|device|cuda|\bgpus?\b|\bcpu\b|memory|\boom\b|file|path|director|"
    r"not found|no such|exist|checkpoint|ckpt|state_dict|seriali[sz]|pickle|\bload|\bsave|\bread|\bwrite|"
    r"http|connect|network|socket|timed? ?out|ssl|proxy|url|download|offline|token|auth|permission|denied|access|"
    r"distributed|\brank\b|world_size|nccl|gloo|process group|\bnan\b|\binf\b|\bgrad)")
# numbers in a list or tuple: sizes or counts of the user's data
_QUANTITIES = re.compile(r"[\[(]\d{1,12}(?:, ?\d{1,12})+[\])]")
# libraries whose errors are about the data or the config they were given (arrays, frames, images, config files):
# their own classes say nothing of a release
_DATA_LIBRARIES = frozenset({"numpy", "pandas", "scipy", "sklearn", "PIL", "cv2", "omegaconf", "hydra", "yaml",
                             "json", "pyarrow", "h5py", "requests", "urllib3", "httpx", "aiohttp", "huggingface_hub",
                             "grpc", "google", "_pickle", "builtins", "__main__"})
# classes that belong to a family of their own, whoever raised them
_OWN_FAMILY_CLASSES = frozenset({"ImportError", "ModuleNotFoundError", "MemoryError", "OSError", "IOError",
                                 "FileNotFoundError", "PermissionError", "IsADirectoryError", "NotADirectoryError",
                                 "ConnectionError", "TimeoutError", "BrokenPipeError", "EOFError", "UnpicklingError",
                                 "KeyboardInterrupt", "SystemExit", "SyntaxError", "IndentationError",
                                 "RecursionError"})


def _third_party(owner: str) -> bool:
    from nbdebug.core.explain._family import _OWN_FAMILY, _SHELL

    return (owner not in ("user", "stdlib", "torch") and owner not in _OWN_FAMILY and owner not in _SHELL
            and owner not in _DATA_LIBRARIES)


def _own_class(s: Structure) -> str | None:
    """The package of a package-qualified class (``dgl._ffi.base.DGLError`` -> dgl) that is a third party's."""
    if "." not in s.exc_type:
        return None
    package = s.exc_type.split(".", 1)[0]
    if package in sys.stdlib_module_names or not package.isidentifier() or not _third_party(package):
        return None
    return package


def _library_frames(s: Structure) -> Frame | None:
    """The innermost frame of a traceback whose frames are all one library's (and the standard library's)."""
    frames = [f for f in s.frames if f.owner != "stdlib"]
    if not frames or s.cut or not _third_party(frames[-1].owner):
        return None
    return frames[-1] if all(f.owner == frames[-1].owner for f in frames) else None


def library_own_error(s: Structure, raw: str, *, live: bool = False) -> tuple[str, dict[str, Any]] | None:
    """An error that is a library's own (its class, or its frames alone), with no other family's words: its release.

    ``live``: an exception in this kernel, whose installed release of the library is read and named.
    """
    from nbdebug.core.explain._family import _DISTRIBUTED_WORDS, _INSTALL_WORDS, distribution_of
    from nbdebug.core.explain._family import _where as where
    from nbdebug.core.knowledge.library import OWN_ERROR_INSTALLED, OWN_ERROR_STEP

    if s.short_type in _OWN_FAMILY_CLASSES or s.short_type.endswith("Warning"):
        return None
    inner = next((f for f in reversed(s.frames) if f.owner != "stdlib"), None)
    package = _own_class(s)
    if package is not None and inner is not None and not _third_party(inner.owner):
        package = None  # the user's code, or torch, raised the library's class: whose call it was is not known
    frame = None
    if package is None:
        frame = _library_frames(s)
        package = frame.owner if frame is not None else None
    if package is None or _OTHER_FAMILY.search(s.short_type) or _OTHER_FAMILY.search(s.message):
        return None
    if _QUANTITIES.search(s.message) or _INSTALL_WORDS.search(s.message) or _DISTRIBUTED_WORDS.search(raw):
        return None  # counts of the data, a package asked for, a distributed run: other families' questions
    dist = distribution_of(package)
    installed = ""
    if live:
        from nbdebug.core.explain._requirement import _installed

        found = _installed(package)
        if found is None:
            return None  # a class of the user's own modules (a test's, a project's): no installed library's error
        installed = OWN_ERROR_INSTALLED.format(dist=dist, version=found)
    facts: dict[str, Any] = {"exc_type": s.short_type, "package": package, "distribution": dist,
                             "first_step_detail": OWN_ERROR_STEP.format(package=package, dist=dist,
                                                                        installed=installed)}
    if frame is not None or inner is not None:
        facts["where"] = where(frame or inner)  # type: ignore[arg-type]
    user = s.innermost_user
    if user is not None:
        facts["user_where"] = where(user)
    return "library_own_error", facts
