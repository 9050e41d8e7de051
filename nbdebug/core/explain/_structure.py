"""Read a traceback's structure: its frames and who owns each, the exception that ended it, and chained causes.

The message tables recognise what a message says; this module reads where it was said.  A frame's path tells who
raised (the user's own file, torch, a library under ``site-packages/<pkg>``, the standard library), the exception
line gives the class, and ``The above exception was the direct cause`` / ``During handling of the above exception``
split a chained traceback into its parts, the first of which is the root cause.  Nothing here is run: a text in,
plain tuples out, linear in the text's length.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import TracebackType

from nbdebug.core._cells import is_cell_file, site_label
from nbdebug.core.explain._normalize import EXC_LINE, normalize, strip_decorations

__all__ = ["Frame", "Structure", "read", "from_exception", "owner_of", "where"]

# Python's frame line (also squashed: File"x.py",line 3,in f), faulthandler's (no comma before "in"), IPython 8's
# "File /x.py:3, in f(...)", IPython 7's "/x.py in f(...)" and rich's "/x.py:3 in f".
_FRAME = re.compile(
    r'^[ \t]*File ?"(?P<path>[^"\n]{1,500})", ?line ?(?P<line>\d{1,7}),? ?in (?P<func>[^\n]{1,200})'
    r"|^[ \t]*File (?P<path2>[^\n,]{1,500}\.py):(?P<line2>\d{1,7}), in (?P<func2>[\w.<>]{1,200})"
    # (Colab names a cell's frame "<cell line: 3>", and pasted into an issue keeps its link: "[path](https://...) in f")
    r"|^[ \t]*\[?(?P<path3>(?:/|~|[A-Za-z]:\\)[^\n]{0,500}?\.py|<ipython-input-[\w-]{1,100}>)(?:\]\([^()\s]{0,300}\))? "
    r"in (?P<func3>[\w<>]{1,200}|<cell line: \d{1,7}>)(?:\(|[ \t]*$)"
    r"|^[ \t]*(?P<path4>(?:/|~|[A-Za-z]:\\)[^\s:]{1,500}\.py):(?P<line4>\d{1,7}) in (?P<func4>[\w<>]{1,200})"
    # IPython 8's frame of a notebook cell
    r"|^[ \t]*(?P<path5>Cell In ?\[\d{1,7}\]), line (?P<line5>\d{1,7})"
    # a SyntaxError's location (the file Python was compiling: no function), the last "frame" of its traceback
    r'|^[ \t]*File "(?P<path6>[^"\n]{1,500}\.py)", line (?P<line6>\d{1,7})[ \t]*$',

    re.MULTILINE,
)
# IPython's gutter before a source line: "----> 2 " or "      1 "
_GUTTER = re.compile(r"^(?:-*>)?[ \t]*\d{1,7}[ \t]+")
# IPython's context lines under a frame ("      1 x = 2"), and the arrow line among them that ran ("----> 2 f(x)"),
# looked for in the next 12 lines at most (a frame shows 5 around its arrow by default)
_CONTEXT = re.compile(r"[ \t]{2,}\d{1,7} ")
_ARROW_LINE = re.compile(r"(?:(?![ \t]*-+>)[ \t]+\d{1,7}(?: [^\n]{0,1000})?\n){0,11}[ \t]*(-+> ?\d{1,7}(?: [^\n]{0,1000})?)")
# Python's chained-exception separators: the part before is the root cause.
_CHAIN = re.compile(r"^[ \t]*(?:The above exception was the direct cause of the following exception:"
                    r"|During handling of the above exception, another exception occurred:)[ \t]*$", re.MULTILINE)
_PACKAGES = re.compile(r"[/\\](?:site|dist)-packages[/\\](?P<pkg>[\w.-]{1,100})")
# code typed into IPython or a console (a notebook cell's file is an ordinary path, under ipykernel_<pid>/)
_INTERACTIVE = re.compile(r"<ipython-input-|<stdin>|Cell In\[")
# a package inside an egg being built or installed ("build/bdist.linux-x86_64/egg/torchvision/..."): the package's code
_EGG = re.compile(r"(?:^|[/\\])(?:egg|[\w.-]{1,100}\.egg)[/\\](?P<pkg>[A-Za-z_]\w{0,100})[/\\]")
# a known library's package inside its source checkout: ".../src/transformers/..." or ".../allennlp/allennlp/..."
# (not "datasets": a project's own src/datasets/ folder is as common as Hugging Face's checkout)
_CHECKOUT_NAMES = (r"transformers|diffusers|accelerate|peft|timm|huggingface_hub|ultralytics|mmcv|mmdet|"
                   r"mmengine|pytorch_lightning|lightning|torchmetrics|deepspeed|xformers|triton|detectron2|allennlp|"
                   r"fairseq|torchvision|torchaudio|torchtext|trl|sentence_transformers|vllm")
_CHECKOUT = re.compile(r"[/\\]src[/\\](?P<pkg>" + _CHECKOUT_NAMES + r")[/\\]"
                       r"|[/\\](?P<twin>" + _CHECKOUT_NAMES + r")[/\\](?P=twin)[/\\]")
# (Windows: "C:\Python38\Lib\", and conda's lower-case "...\anaconda3\lib\encodings\cp1252.py")
_STDLIB = re.compile(r"[/\\]lib[/\\]python\d[\d.]*[/\\]|[/\\]Lib[/\\](?!site-packages)|^<"
                     r"|(?i:\\(?:ana|mini)conda\d?|\\mini(?:forge|mamba)\d?|\\mambaforge|\\python\d{0,4}"
                     r"|\\envs\\[^\\\n]{1,100})\\lib\\(?!site-packages)")
# torch from a source checkout or a conda build tree (not under site-packages)
_TORCH_TREE = re.compile(r"[/\\]torch[/\\](?:nn|utils|autograd|optim|cuda|distributed|_dynamo|_inductor|jit|"
                         r"serialization\.py|_tensor\.py|tensor\.py|functional\.py|__init__\.py)")
# a Cython source file as a compiled extension names it: relative to the package's source tree ("rasterio/_crs.pyx")
_CYTHON = re.compile(r"(?P<pkg>[A-Za-z_]\w{0,100})[/\\][^\n]{0,300}\.(?:pyx|pxi|pxd)$")


@dataclass(frozen=True)
class Frame:
    """One frame: its file, line and function, the source line shown under it, and who owns the file."""

    path: str
    line: int
    func: str
    source: str
    owner: str  # "user", "stdlib", "torch", or the site-packages package name ("transformers", ...)
    start: int  # where the frame's line starts in the text

    @property
    def is_user(self) -> bool:
        return self.owner == "user"


@dataclass(frozen=True)
class Structure:
    """A traceback read for its shape.

    ``frames`` and the exception belong to the root-cause part of a chained traceback (the first part that names an
    exception); ``cut`` says that text stops in the frames (no exception line after the last frame), so its message
    is not known; ``chained`` that the text holds more than one traceback.
    """

    frames: tuple[Frame, ...]
    exc_type: str  # the class as printed ("KeyError", "pytorch_lightning.utilities.exceptions.MisconfigurationException")
    message: str  # the exception's message with the lines that follow it (at most 400 characters more)
    chained: bool
    cut: bool
    # a chained traceback's last part (the code that was running when the root cause surfaced: an ``import``)
    outer: tuple[Frame, ...] = ()

    @property
    def short_type(self) -> str:
        return self.exc_type.rsplit(".", 1)[-1]

    @property
    def innermost(self) -> Frame | None:
        return self.frames[-1] if self.frames else None

    @property
    def innermost_user(self) -> Frame | None:
        return next((f for f in reversed(self.frames) if f.is_user), None)

    @property
    def owners(self) -> frozenset[str]:
        return frozenset(f.owner for f in self.frames)


def owner_of(path: str) -> str:
    """Who owns a file of a traceback: ``"user"``, ``"stdlib"``, ``"torch"`` or a site-packages package name."""
    if _INTERACTIVE.match(path):
        return "user"
    m = _CYTHON.match(path)
    if m:  # a compiled extension's source, named as it was when the package was built: the package's code
        return m.group("pkg")
    m = _PACKAGES.search(path)
    if m:
        pkg = m.group("pkg")
        pkg = pkg[:-3] if pkg.endswith(".py") else pkg
        return pkg.split("-", 1)[0]  # "torch-2.1.0.dist-info" never holds frames; an egg dir "foo-1.0-py3.8.egg"
    if _TORCH_TREE.search(path):
        return "torch"
    m = _EGG.search(path)
    if m:
        return m.group("pkg")
    m = _CHECKOUT.search(path)
    if m:  # a library's source checkout (an editable install): its own code, not the user's
        return m.group("pkg") or m.group("twin")
    if _STDLIB.search(path):
        return "stdlib"
    return "user"


def _frames(part: str) -> list[Frame]:
    frames = []
    for m in _FRAME.finditer(part):
        path = (m.group("path") or m.group("path2") or m.group("path3") or m.group("path4") or m.group("path5")
                or m.group("path6") or "")
        line = int(m.group("line") or m.group("line2") or m.group("line4") or m.group("line5") or m.group("line6") or 0)
        # a SyntaxError's location is compiled as a module: its code was being imported (or run)
        func = (m.group("func") or m.group("func2") or m.group("func3") or m.group("func4")
                or ("<module>" if m.group("path6") else "<cell>")).strip()
        nl = part.find("\n", m.end())
        source = ""
        if nl != -1:
            following = part[nl + 1:part.find("\n", nl + 1) if part.find("\n", nl + 1) != -1 else len(part)]
            if following.strip() and not _FRAME.match(following) and not EXC_LINE.match(following.strip()):
                source = _GUTTER.sub("", following.strip())[:300]
                if _CONTEXT.match(following):  # IPython shows context lines around the one that ran: its arrow's
                    arrow = _ARROW_LINE.match(part, nl + 1)
                    source = _GUTTER.sub("", arrow.group(1).strip())[:300] if arrow else source
        frames.append(Frame(path, line, func, source, owner_of(path), m.start()))
    return frames


def _warning(m: re.Match[str]) -> bool:
    """Whether an exception line's class is a warning's: printed on the way, it never ends a traceback."""
    return m.group("type").endswith("Warning")


def read(raw: str, flat_text: str | None = None) -> Structure:
    """The structure of a traceback text (any text: a text without frames has none).

    ``flat_text`` is ``normalize(raw)`` when the caller has it already (a 1 MB log is normalised once).
    """
    raw = strip_decorations(raw)  # "[rank0]:" prefixes and colours would hide the frame lines
    parts = _CHAIN.split(raw) if "exception" in raw else [raw]
    chosen = None
    for part in parts:
        flat = flat_text if flat_text is not None and len(parts) == 1 else normalize(part)
        exc = [m for m in EXC_LINE.finditer(flat) if not _warning(m)]
        if exc:
            chosen = (part, exc[-1])
            break
    if chosen is None:
        return Structure(tuple(_frames(parts[-1])), "", "", len(parts) > 1, bool(_FRAME.search(parts[-1])))
    part, last = chosen
    frames = _frames(part)
    outer = tuple(_frames(parts[-1])) if part is not parts[-1] else ()
    # the text is cut when frames follow the exception line (a wrapper's text can print the class first)
    tail = part[frames[-1].start:] if frames else ""
    cut = bool(frames) and not any((m := EXC_LINE.match(ln.strip())) and not _warning(m)
                                   for ln in normalize(tail).split("\n"))
    # a message may go on over the next lines (Lightning's MisconfigurationException starts on the line after)
    message = ((last.group("msg") or "") + flat[last.end():last.end() + 400]).strip()
    return Structure(tuple(frames), last.group("type"), message, len(parts) > 1, cut, outer)


def from_exception(exc: BaseException) -> Structure:
    """The structure of a live exception: the root cause of its chain, with the frames of its traceback."""
    import linecache

    root, chained = exc, False
    for _ in range(8):
        cause = root.__cause__ or (None if root.__suppress_context__ else root.__context__)
        if cause is None:
            break
        root, chained = cause, True
    frames = _tb_frames(root.__traceback__)
    outer = tuple(_tb_frames(exc.__traceback__)) if chained else ()
    if frames:  # the source of the innermost frame only: the rules read whether it is a ``raise``
        last = frames[-1]
        source = linecache.getline(last.path, last.line).strip()[:300]
        frames[-1] = Frame(last.path, last.line, last.func, source, last.owner, 0)
    kind = type(root)
    module = kind.__module__
    name = kind.__qualname__ if module in ("builtins", "__main__") else f"{module}.{kind.__qualname__}"
    try:
        message = str(root)[:500]
    except BaseException:  # noqa: BLE001 - the user's __str__ may raise anything, KeyboardInterrupt too
        message = ""
    return Structure(tuple(frames), name, message, chained, False, outer)


def _tb_frames(tb: TracebackType | None) -> list[Frame]:
    frames = []
    for _ in range(10_000):
        if tb is None:
            break
        code = tb.tb_frame.f_code
        frames.append(Frame(code.co_filename, tb.tb_lineno, code.co_name, "", owner_of(code.co_filename), 0))
        tb = tb.tb_next
    return frames


def where(frame: Frame) -> str:
    """The frame as the user knows it: ``In [12], line 3: code`` for a notebook cell, ``train.py, line 81, in main``."""
    if frame.is_user and is_cell_file(frame.path):
        return site_label(frame.path, frame.line)
    if frame.path.startswith("Cell In"):  # a pasted IPython 8 traceback: "Cell In[3], line 2"
        return f"{frame.path.removeprefix('Cell ')}, line {frame.line}"
    name = frame.path.replace("\\", "/").rsplit("/", 1)[-1]
    return f"{name}, line {frame.line}, in {frame.func}" if frame.line else f"{name}, in {frame.func}"
