"""Family answers from the failing line's own code: what the statement that raised does, not what its message says.

A ``ValueError: too many values to unpack`` raised on ``for x, y in loader:`` is about the items the loop iterates (a
DataLoader's batches), not an object of the wrong kind; a ``KeyError`` raised on ``MODEL_CLASSES[args.model_type]`` is
a value given on the command line that the script's table lacks, not a batch's key; a ``MemoryError: std::bad_alloc``
raised while a library's module is imported, or by a call into ``torch.ops``, is a native library built for another
torch, not the machine out of memory.  ``_guards`` drops the message's category on these, and ``_family.fallback``
places them here.
"""

from __future__ import annotations

import re
from typing import Any

from nbdebug.core.explain._structure import Frame, Structure, read, where

__all__ = ["loop_unpacks", "loop_items", "option_lookup", "command_line_key", "native_alloc_at_import", "empty_loop"]

# a for statement whose target is several names ("for x, y in loader:", "for i, (a, b) in enumerate(pbar):")
_FOR_TARGETS = re.compile(r"^(?:async )?for (?P<target>[^\n=]{0,200}?,[^\n=]{0,200}?) in (?P<iterable>[^\n]{1,200}?):?"
                          r"[ \t]*(?:#[^\n]*)?$")
_UNPACK = re.compile(r"(?:too many|not enough) values to unpack \(expected \d+")


# an assignment unpacking one batch: "x, y = next(iter(loader))", "images, labels = batch"
_BATCH_TARGETS = re.compile(r"^(?P<target>[\w \t,()\[\]*]{0,200}?,[\w \t,()\[\]*]{0,200}?)= ?(?P<iterable>next\([^\n]{1,200}\)|"
                            r"[\w.]{0,80}(?:batch|loader)\w{0,40})[ \t]*(?:#[^\n]*)?$")


# what names a loader's batches: "train_loader", "batches", "dl", "val_ds", "pbar" (tqdm over a loader)
_BATCH_WORDS = re.compile(r"(?i:batch|loader|dataset|(?<![a-z])d[ls]\b|pbar|tqdm)")


def _unpacked(source: str) -> re.Match[str] | None:
    line = source.strip()
    return _FOR_TARGETS.match(line) or _BATCH_TARGETS.match(line)


def _iterable(m: re.Match[str]) -> str:
    """The loop's iterable without a one-line loop's body ("zip(xs, ys): pass" -> "zip(xs, ys)")."""
    text, depth = m.group("iterable"), 0
    for i, c in enumerate(text):
        depth += (c in "([{") - (c in ")]}")
        if c == ":" and depth <= 0:
            return text[:i].strip()
    return text.strip()


def _generic_step(iterable: str) -> str:
    """The first step for a loop over something that is not a loader's batches: what that iterable yields."""
    if iterable.startswith("zip("):
        hint = "zip yields one value per argument: unpack as many names as zip has arguments"
    elif re.fullmatch(r"[\w.]{1,80}", iterable):
        hint = ("a dict yields its keys only: iterate .items() for (key, value) pairs; a DataLoader yields what its "
                "Dataset's __getitem__ returns, collated")
    else:
        hint = "enumerate adds an index in front: for i, (a, b) in enumerate(...)"
    return (f"Print one item of what the loop iterates (print(next(iter({iterable})))) and unpack as many names as it "
            f"holds ({hint}).")


def loop_unpacks(s: Structure) -> Frame | None:
    """The frame whose ``for`` line (or assignment of a batch) unpacks each item into several names, when the
    unpacking error was raised there."""
    frame = s.innermost
    if frame is None or s.cut or s.short_type != "ValueError" or not _UNPACK.search(s.message):
        return None
    m = _unpacked(frame.source)
    if m is None or frame.owner == "stdlib":
        return None
    # a library's own loop iterates what it built (a bug or another release of it), unless it iterates the batches
    return frame if frame.is_user or _BATCH_WORDS.search(_iterable(m)) else None


def loop_items(s: Structure, raw: str) -> tuple[str, dict[str, Any]] | None:
    """An unpacking error on a ``for`` line or a batch's assignment: the structure of the items (a loader's batches)."""
    frame = loop_unpacks(s)
    if frame is None:
        return None
    m = _unpacked(frame.source)
    iterable = _iterable(m) if m else ""
    facts: dict[str, Any] = {"where": where(frame), "iterable": iterable}
    if not _BATCH_WORDS.search(iterable):  # the user's loop over a zip, a dict, a list: not a Dataset's items
        facts["first_step_detail"] = _generic_step(iterable)
    return "loop_items_unpack", facts


# a table looked up by a command-line option's value (MODEL_CLASSES[args.model_type], archs[opt.arch]), or a module's
# constant table (its name in capitals, PEP 8's constants) of classes or builders looked up by a variable: its value
# called on the line (BACKBONES[name](pretrained=True)) or its name a registry's (MODEL_CLASSES, ARCHS).  A dict of
# data is not such a table: CONFIG[key], VOCAB[tok], STATE_DICT[name], batch[args.key] keep missing_key's question
_OPTION_KEY = re.compile(r"(?P<table>[A-Za-z_][\w.]{0,80})\[(?P<option>(?:args|opts?|options|flags|FLAGS|hparams)"
                         r"\.\w{1,80})\]"
                         r"|(?<![\w.])(?P<ctable>[A-Z][A-Z0-9_]{2,80})\[(?P<coption>[a-z_][\w.]{0,80})\](?P<call>\()?")
# the last part of a table's name that says it holds data (a batch, a row, the environment), not supported values
_DATA_TABLE = re.compile(r"(?i:(?:^|[._])(?:batch|batches|sample|row|df|data|item|example|record|environ|features|"
                         r"inputs|outputs|results|metrics|kwargs|config|cfg|state|vocab)\w{0,20})$")
# a constant's name that says it is a registry of the values the code supports
_REGISTRY_NAME = re.compile(r"(?:^|_)(?:CLASSES|MODELS|ARCHS?|ARCHITECTURES|BACKBONES|REGISTRY|CONFIGS|TYPES|"
                            r"FACTOR(?:Y|IES)|CHOICES|DATASETS|OPTIMIZERS|SCHEDULERS|LOSSES|NETS|NETWORKS|ENCODERS|"
                            r"TOKENIZERS|BUILDERS|CONSTRUCTORS|MAPPING|MAP)$")


def option_lookup(s: Structure) -> re.Match[str] | None:
    """The lookup by a command-line option (or in a registry of classes) on the line that raised a ``KeyError``."""
    frame = s.innermost
    if frame is None or s.cut or s.short_type != "KeyError" or not frame.is_user:
        return None
    for m in _OPTION_KEY.finditer(frame.source):
        if m.group("table") and not _DATA_TABLE.search(m.group("table")):
            return m
        if m.group("ctable") and (m.group("call") or _REGISTRY_NAME.search(m.group("ctable"))):
            return m
    return None


def command_line_key(s: Structure, raw: str) -> tuple[str, dict[str, Any]] | None:
    """A ``KeyError`` looking a table up by a command-line option's value: the script does not support that value."""
    m = option_lookup(s)
    if m is None:
        return None
    table = m.group("table") or m.group("ctable")
    facts: dict[str, Any] = {"table": table}
    if m.group("option"):
        facts["option"] = m.group("option")
    key = s.message.strip()[:80]
    if key:
        facts["key"] = key
    given = f"the value given ({key})" if key else "the value given"
    release = (", or take the script from the same release as the installed library (the release that added the value)"
               if m.group("option") else " (or add the entry the code lacks)")
    facts["first_step_detail"] = (f"Print the keys of the table on the failing line (print(sorted({table}))) and "
                                  f"compare them with {given}: use a listed one{release}.")
    return "script_choice_missing", facts


# a native allocation failure with no size: C++'s std::bad_alloc, or a bare MemoryError
_BARE_ALLOC = re.compile(r"^(?:std::bad_alloc|bad_alloc|)[ \t]*$")
_TORCH_OPS = re.compile(r"\btorch\.(?:ops|classes)\.")


def native_alloc_at_import(raw: str) -> bool:
    """Whether a bare ``MemoryError`` / ``std::bad_alloc`` was raised while a library's module was imported, or by a
    call into ``torch.ops``: an extension's native code built against another torch corrupting its own sizes, not
    the machine's memory (a real shortage names the size it could not allocate)."""
    from nbdebug.core.explain._family import _while_importing

    if "MemoryError" not in raw and "bad_alloc" not in raw:
        return False
    s = read(raw[-20_000:])
    if s.cut or not s.frames or s.short_type not in ("MemoryError", "RuntimeError") or not _BARE_ALLOC.match(s.message):
        return False
    return _while_importing(s) or any(_TORCH_OPS.search(f.source) for f in s.frames[-2:])


# a progress bar (tqdm) that counted no item: "0it [00:00, ?it/s]", " 0/0 [00:00<?, ?it/s]"
_ZERO_PROGRESS = re.compile(r"(?m)(?:^|\r|\|[ \t]*)0(?:it|/0) \[\d")
_UNBOUND = re.compile(r"local variable '(?P<name>\w{1,80})' referenced before assignment|cannot access local variable "
                      r"'(?P<name2>\w{1,80})' where it is not associated with a value")


def empty_loop(s: Structure, raw: str) -> tuple[str, dict[str, Any]] | None:
    """A local read before it was set, after a progress bar that counted no item: the loop that sets it ran zero
    times, so the data it iterates is empty (a path or a filter that finds nothing), not a typo in the code."""
    if s.short_type != "UnboundLocalError" or s.cut or not s.frames:
        return None
    m = _UNBOUND.search(s.message)
    bar = _ZERO_PROGRESS.search(raw[:s.frames[0].start] if s.frames[0].start else raw)
    if m is None or bar is None:
        return None
    name = m.group("name") or m.group("name2")
    return "dataset_empty", {"detail": f"a progress bar counted 0 items, and '{name}', which the loop sets, was never "
                                       f"set"}
