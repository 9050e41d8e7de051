"""A bounded reader for install, build and environment output: the line that holds the cause, and what it names.

pip's last lines (``error: subprocess-exited-with-error``, ``Failed building wheel for X``) only say that a build
failed; the cause is a line above them: the compiler's or setup.py's own first error, a tool or header that is
missing, a package manager that found no release for this Python or platform, a library that does not load.  The
reader takes the first ``CauseLine`` of ``knowledge.install`` (in its order of precedence) whose line is in the text
and whose other evidence (``needs``) is there too, reads the context the text shows (the package being built, the
Python version, the platform, torch's version) and fills that line's first step with them.

It answers what it can read and nothing else:

- a line found only makes the answer's first step specific, and is shown as the evidence (``cause_line``);
- it places a text that no message matched only with a line that is itself a build's or installer's cause
  (``claims``), and never a live exception of the kernel (those are not logs);
- a fact the text does not show is left out of the step (``[[...]]``), never guessed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from typing import Any

from nbdebug.core.explain._structure import read as read_structure
from nbdebug.core.knowledge.install import (
    CAUSES,
    CLAIM_WORDS,
    COMPILER_ADVICE,
    HEADERS,
    LINKER_LIBRARIES,
    PIP_BUILD_FRAME,
    PIP_METADATA_RUN,
    SETUP_PY_STEP,
    STANDARD_HEADERS,
    SYSTEM_LIBRARIES,
    TORCH_LIBRARIES,
    CauseLine,
)

__all__ = ["read", "claim", "detail", "setup_raised", "SLUGS"]

# the categories each group of cause lines can make specific: a build's lines for an install answer, a library's
# lines for a load failure
_BUILD_SLUGS = frozenset({"extension_build_failed", "install_failed", "conda_not_found", "no_matching_wheel"})
_LOAD_SLUGS = frozenset({"native_library_missing", "undefined_symbol", "package_missing"})
SLUGS = _BUILD_SLUGS | _LOAD_SLUGS | {"version_mismatch"}
_ALL_SLUGS = frozenset(c.slug for c in CAUSES)
_MAX = 200_000  # the tail of a very long log: the cause is near the failure pip reports

# the package being built or installed, in the order pip's and setup.py's lines name it most surely
_PACKAGE = (
    re.compile(r"Package '(?P<p>[A-Za-z][\w.-]{0,100})' requires a different Python"),
    re.compile(r"Failed building wheel for (?P<p>[A-Za-z][\w.-]{0,100})"),
    re.compile(r"Building wheel for (?P<p>[A-Za-z][\w.-]{0,100}) \("),
    re.compile(r"Running setup\.py (?:install|develop) for (?P<p>[A-Za-z][\w.-]{0,100})"),
    re.compile(r"Could not build wheels for (?P<p>[A-Za-z][\w.-]{0,100})"),
    re.compile(r"(?<![\w-])pip3? install(?: {1,4}-{1,2}[\w-]{1,40}(?:=[^\s]{1,200})?)* {1,4}['\"]?(?P<p>[A-Za-z][\w.-]{0,100})"),
    re.compile(r"Collecting (?!package metadata\b)(?P<p>[A-Za-z][\w.-]{0,100})(?=[=<>!~ \n]|$)", re.M),
)
_VERSION_TAIL = re.compile(r"(?:==|>=|<=|~=|-\d)[^\s]*$")
_PYTHON = (
    re.compile(r"cpython-3(?P<minor>\d{1,2})\b"),
    re.compile(r"\bcp3(?P<minor>\d{1,2})-(?:cp3\d{1,2}|abi3|none)"),
    re.compile(r"[Pp]ython ?3\.(?P<minor>\d{1,2})(?=m?[/\\.\s*:)]|$)", re.M),  # include/python3.7m: the ABI tag
    re.compile(r"[Pp]ython3(?P<minor>\d{2})[/\\]"),
)
_WINDOWS = re.compile(r"win[_-]amd64|\bwin32\b|\bwin-64\b|(?<![\w])[A-Z]:\\|\bWinError\b|\.exe\b")
_MACOS = re.compile(r"macosx|/private/var/folders|\bdarwin\b|\bosx-(?:64|arm64)\b|\.dylib\b")
_LINUX = re.compile(r"linux_x86_64|linux_aarch64|linux-x86_64|\blinux-(?:64|aarch64)\b|/home/|/usr/|/opt/conda")
# the installed torch (not a requirement's pin: torch==X names what is asked for)
_TORCH = re.compile(r"torch\.__version__ *= *(?P<a>\d[\w.+]{0,30})|\bPyTorch:? {1,20}(?P<c>\d+\.\d+[\w.+]{0,30})")
_OWNER = re.compile(r"site-packages[/\\](?P<owner>[A-Za-z_]\w{0,60})[/\\]", re.I)
_MSVC = re.compile(r"error C\d{4}|cl\.exe|MSVC")
_PIP_FRAME = re.compile(PIP_BUILD_FRAME)
_PIP_RUN = re.compile(PIP_METADATA_RUN)
_OPTIONAL = re.compile(r"\[\[((?:(?!\[\[|\]\]).)*)\]\]", re.DOTALL)
_FIELD = re.compile(r"\{(\w+)\}")


@cache
def _compiled() -> tuple[tuple[CauseLine, re.Pattern[str], re.Pattern[str] | None], ...]:
    return tuple((c, re.compile(c.line, re.M), re.compile(c.needs) if c.needs else None) for c in CAUSES)


def _first(patterns: tuple[re.Pattern[str], ...], text: str) -> str:
    for pattern in patterns:
        m = pattern.search(text)
        if m:
            return next(v for v in m.groups() if v)
    return ""


def _context(text: str) -> dict[str, str]:
    """What the log shows about the build: the package, the Python version, the platform, torch's version."""
    facts: dict[str, str] = {}
    package = _VERSION_TAIL.sub("", _first(_PACKAGE, text)).strip(".-")
    if package and package.lower() not in ("git", "http", "https", "install", "package", "packages", "pip", "python",
                                                   "requirements"):
        facts["package"] = package
    if minor := _first(_PYTHON, text):
        facts["python"] = f"3.{minor}"
    platform = next((name for name, p in (("Windows", _WINDOWS), ("macOS", _MACOS), ("Linux", _LINUX)) if p.search(text)),
                    "")
    if platform:
        facts["platform"] = platform
    if m := _TORCH.search(text):
        facts["torch"] = "torch " + next(v for v in m.groups() if v)
    return facts


def _basename(path: str) -> str:
    return re.split(r"[/\\]", path)[-1]


def _wheel_tags(wheel: str) -> str:
    parts = wheel.removesuffix(".whl").split("-")
    return f"{parts[-3]} on {parts[-1]}" if len(parts) >= 5 else "another Python or platform"


def _versions_advice(found: dict[str, str]) -> str:
    listed = [v.strip() for v in found.get("versions", "").split(",") if v.strip() and v.strip() != "none"]
    if not listed:
        return ("pip found no release of {wanted} that installs here[[ ({setup})]]: the "
                "package publishes no files for this Python version and platform. Check the Python versions and "
                "platforms its releases support (its PyPI page's files, or the project's own wheel index for torch / "
                "CUDA builds), then use a Python and platform it supports, or the index the project documents.")
    tail = ", ".join(listed[-3:])
    pin = found.get("pin", "")
    wanted = _release(pin)
    if wanted and all(_release(v) < wanted for v in listed):
        # the releases pip can install here stop below the pin: the pinned one has no files for this Python or platform,
        # or was never published (a typo in a requirements file)
        return (f"{{wanted}}{{pin}} is newer than every release pip can install here (the newest: {listed[-1]})"
                "[[, for {setup}]]: either it publishes no files for this Python or platform (use a 64-bit Python "
                "version and a platform it supports), or no such release exists (check the version the project meant "
                "on the package's PyPI page).")
    if wanted and all(_release(v) > wanted for v in listed):
        return (f"{{wanted}}{{pin}} is older than every release pip can install here (the oldest: {listed[0]})"
                "[[, for {setup}]]: that release publishes no files for this Python version; use the older Python it "
                f"supports, or pin {listed[0]} or newer (with the versions of the other packages that go with it).")
    if pin:
        return (f"{{wanted}}{{pin}} is not among the releases pip can install here (the newest it sees: {tail}): pin "
                "one of those, or use a Python version the wanted release supports[[ (this is {setup})]].")
    return (f"pip sees releases of {{wanted}} (the newest: {tail}) but none that installs here: their files need "
            "another Python version or platform[[ than {setup}]]; use one they support.")


def _release(version: str) -> tuple[int, ...]:
    """A version's leading numbers (``==1.7.0`` -> (1, 7, 0)); () when it names none."""
    m = re.search(r"\d+(?:\.\d+){0,3}", version)
    return tuple(int(x) for x in m.group(0).split(".")) if m else ()


def _derived(cause: CauseLine, found: dict[str, str], text: str) -> dict[str, str]:
    """The sentences and names a step's template uses, from what the line and the context found."""
    package = found.get("package", "")
    owners = [m.group("owner") for m in _OWNER.finditer(text[-20_000:])]
    if "load_library" in text:  # torch's loader opening another package's library: torch is not the one at fault
        owners = [o for o in owners if o != "torch"]
    owner = owners[-1] if owners else package or "the package"
    setup = ", ".join(f"Python {v}" if k == "python" else v for k in ("python", "platform", "torch") if (v := found.get(k)))
    more = {"package_pip": package or "the package", "package_or_it": package or "The package", "owner": owner,
            "setup": setup, "owner_named": owners[-1] if owners else "", "wanted": found.get("wanted") or found.get("wanted2") or package or "the package",
            "wanted_or_needed": found.get("wanted") or found.get("needed") or "the package"}
    if "header" in found:
        header = found["header"]
        key = header if header in HEADERS else _basename(header) if _basename(header) in HEADERS else \
            "*standard" if header in STANDARD_HEADERS else "*"
        more["header_advice"] = HEADERS[key]
        more["python_dev"] = f"python{found['python']}-dev" if found.get("python") else "python3.X-dev"
    if "file" in found:
        more["file_name"] = _basename(found["file"])
        more["file"] = _basename(found["file"])
        windows = found.get("platform") == "Windows" or _MSVC.search(text)
        more["compiler_advice"] = COMPILER_ADVICE["windows" if windows else "*"]
    if "lib" in found:
        more["lib_advice"] = LINKER_LIBRARIES.get(found["lib"], LINKER_LIBRARIES["*"]).replace("{lib}", found["lib"])
    if "library" in found:
        key = re.sub(r"(?:\.\d{1,4})+$", "", found["library"])
        if key not in SYSTEM_LIBRARIES and re.fullmatch(TORCH_LIBRARIES, key):  # torch's own, no system package's
            key = "*torch_itself" if more["owner_named"] == "torch" else "*torch"
        more["library_advice"] = SYSTEM_LIBRARIES.get(key, SYSTEM_LIBRARIES["*"]).replace("{library}", found["library"])
    if pc := found.get("pc") or found.get("pcs") or found.get("pc1"):
        more["pc"] = pc.replace("'", "")
    if "toolkit" in found:
        more["toolkit_tag"] = found["toolkit"].replace(".", "")
    if "wheel" in found:
        more["wheel_tags"] = _wheel_tags(found["wheel"])
    if cause.name == "no_release_for_python":
        more["versions_advice"] = _versions_advice(found)
    more["dll_or_a_dll"] = _basename(found["dll_path"]) if found.get("dll_path") else "a DLL"
    return more


def _fill(template: str, values: dict[str, str]) -> str:
    """The template with its fields filled; a ``[[...]]`` segment naming a missing fact is dropped."""
    def segment(m: re.Match[str]) -> str:
        body = m.group(1)
        return body if all(values.get(f) for f in _FIELD.findall(body)) else ""

    text = _OPTIONAL.sub(segment, template)
    for _ in range(2):  # a derived sentence (versions_advice) holds fields of its own
        text = _OPTIONAL.sub(segment, _FIELD.sub(lambda m: values.get(m.group(1), m.group(0)), text))
    return text


def _matches(tail: str, slugs: frozenset[str]) -> Iterator[tuple[CauseLine, re.Match[str]]]:
    """The cause lines of ``slugs`` the text holds, with their evidence, in the table's precedence."""
    for cause, line, needs in _compiled():
        if cause.slug in slugs and (m := line.search(tail)) is not None and (needs is None or needs.search(tail)):
            yield cause, m


def _facts(cause: CauseLine, m: re.Match[str], tail: str) -> dict[str, Any]:
    found = _context(tail) | {k: v.rstrip(". ") if k == "why" else v for k, v in m.groupdict().items() if v}
    if cause.name == "wheel_tags_differ":
        found.pop("python", None)  # the wheel's own tag, not the interpreter's version
    start = tail.rfind("\n", 0, m.start()) + 1
    end = tail.find("\n", m.end())
    facts: dict[str, Any] = {k: v for k, v in found.items() if k in ("package", "python", "platform", "torch")}
    facts["cause_line"] = tail[start:end if end != -1 else len(tail)].strip()[:300]
    facts["first_step_detail"] = _fill(cause.step, found | _derived(cause, found, tail))
    return facts


def read(text: str, *, slugs: frozenset[str] = SLUGS) -> tuple[CauseLine, dict[str, Any]] | None:
    """The first cause line of the text (in the table's precedence) among ``slugs``' lines, with its facts.

    The facts hold ``cause_line`` (the line as the text has it), what the line's groups and the context name, and
    ``first_step_detail``, the line's first step filled with them.
    """
    tail = text[-_MAX:]
    first = next(_matches(tail, slugs), None)
    return (first[0], _facts(first[0], first[1], tail)) if first is not None else None


@cache
def _claim_words() -> frozenset[str]:
    """The words one of which every claiming line's match holds (lower case)."""
    return frozenset(w for c in CAUSES if c.claims for w in CLAIM_WORDS[c.name])


def claim(text: str) -> tuple[str, dict[str, Any]] | None:
    """The category and facts for a pasted log no message matched, when a cause line that places it is there.

    The answer's step is the first cause line's (the most specific), placed by a line of the same category that
    claims (a source archive being built says what to do, pip's own summary that the build failed places it).
    """
    tail = text[-_MAX:]
    low = tail.lower()
    if not any(word in low for word in _claim_words()):
        return None  # no claiming line's words: no install, build or load output to read
    found = list(_matches(tail, _ALL_SLUGS))
    if not found:
        return None
    first = found[0][0]
    if not any(c.claims and c.slug == first.slug for c, _ in found):
        return None
    return first.slug, _facts(first, found[0][1], tail)


def detail(text: str, slug: str) -> dict[str, Any]:
    """The facts of the text's cause line for an answer of category ``slug`` (nothing for another category)."""
    if slug not in SLUGS:
        return {}
    group = _BUILD_SLUGS if slug in _BUILD_SLUGS else _LOAD_SLUGS if slug in _LOAD_SLUGS else frozenset({slug})
    found = read(text, slugs=group)
    return found[1] if found is not None else {}


def setup_raised(text: str) -> dict[str, Any] | None:
    """The facts for a Python error raised inside pip's own build of a package (its setup.py or build backend).

    The traceback's innermost frame outside Python's own library is pip's build (its source folder, its isolated
    build environment, setuptools' caller, or a setup.py that pip's metadata step runs): the package's build script
    raised it, not the user's code.  None for any other text.
    """
    tail = text[-_MAX:]
    if "pip-" not in tail and not _PIP_RUN.search(tail):
        return None
    structure = read_structure(tail)
    frames = [f for f in structure.frames if f.owner != "stdlib" or _PIP_FRAME.search(f.path)]
    if not structure.exc_type or not frames:
        return None
    last = frames[-1]
    if not (_PIP_FRAME.search(last.path) or re.search(r"(?:^|[/\\])setup\.py$", last.path) and _PIP_RUN.search(tail)):
        return None
    exception = f"{structure.short_type}: {structure.message.splitlines()[0]}" if structure.message else structure.short_type
    found = _context(tail)
    facts: dict[str, Any] = {k: v for k, v in found.items() if k in ("package", "python", "platform", "torch")}
    facts["cause_line"] = exception[:300]
    facts["first_step_detail"] = _fill(SETUP_PY_STEP, found | {"exception": exception[:200],
                                                               "package_pip": found.get("package", "the package")})
    return facts
