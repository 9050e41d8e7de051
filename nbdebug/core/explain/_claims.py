"""What a category's claim needs the text itself to show: a match without that evidence is dropped.

``_guards.contradicted`` drops a match that the text's structure contradicts; these rules drop one whose evidence is
missing.  Each names what the message must show for its category to be the answer, and reads it from the text (its
lines, the class that owns the matched line, the exception that ends it):

- a ``StopIteration`` is an empty iterator only when it is the text's last exception and not ``next()`` over a
  module's parameters (a module without parameters: a DataParallel replica) or a replica's re-raise;
- a missing file is the code's own only when a frame of the code asked for it: a traceback of nothing but the
  standard library's and libraries' frames (a spawned child re-running an interactive session's main), a
  subprocess's frames, or a pseudo-file (``<input>``, ``<stdin>``) is not;
- a NameError's words are the user's NameError only when that class (or no class) owns the line, and a name with a
  leading underscore is a library's private name (torch's ``_C``: the install's question), not an import to add;
- an exit with status 2 is argparse reading the kernel's command line unless the text shows another program's usage
  or frames of code other than argparse exiting (a live one: only when the parser's program is the kernel's);
- a local server is not running only when the request was refused (a 5xx, a read timeout or a TLS error mean that it
  answered);
- ``ptxas`` failing is Triton's (torch.compile's family) only with Triton's or Inductor's words in the text;
- a web server's port is held by another process only when the text says the address is in use;
- XLA's compiler failing is not PyTorch/XLA's when the text names TensorFlow or JAX (they print the same advice);
- a PowerShell command that is a path is a script that is not there, not a package, and a shell refusing several
  different commands in one text is a batch file misread (its encoding or line endings), not a missing program;
- the Hub refusing a repository is a model's files only for a download: an upload or a dataset's repository is not;
- a log line (Unsloth's fallback notice, a kernel's printf, pip's resolver) is background when a whole traceback
  after it ends in an exception that is not about it.
"""

from __future__ import annotations

import re

from nbdebug.core.explain._machinery import ONNX_OPSET_REFUSED
from nbdebug.core.explain._normalize import last_exception_start
from nbdebug.core.explain._structure import Structure, read

__all__ = ["installed_command", "lacks_evidence", "next_over_parameters"]

# next() over a module's parameters or buffers: a module with none (a DataParallel replica), not an empty loader
_NEXT_OVER_PARAMETERS = re.compile(r"\bnext\(\s*(?:iter\(\s*)?[\w.\[\]()]{0,200}\.(?:parameters|buffers)\(\s*\)")
_REPLICA = re.compile(r"Caught StopIteration in replica")
# an exception line after the matched one (a chained traceback's later part, Python's PEP 479 RuntimeError)
_BARE_STOP = re.compile(r"(?m)^(?:builtins\.)?StopIteration:?[ \t]*$")

_PSEUDO_FILE = re.compile(r"No such file or directory: '(?:[^'\n]{0,300}[/\\])?<\w{1,40}>'")
_SUBPROCESS = re.compile(r", in (?:_execute_child|check_output|check_call|Popen|_fork_exec)\b")


# the kernel's own command line: its connection file, its -f option, a kernel launcher as the parser's prog
_KERNEL_WORDS = re.compile(r"kernel-[\w-]{1,120}\.json|--f=|(?:ipykernel|colab_kernel|xpython)_launcher")
_SYSTEM_EXIT_LINE = re.compile(r"^SystemExit: 2[ \t]*$")
_USAGE_PROGRAM = re.compile(r"(?m)^(?:usage: |[\w.-]{1,100}: error: )")
_ARGPARSE_FRAME = re.compile(r"argparse\.py|\bparse(?:_known)?_args\(")

# a connection that was refused (nothing listens): urllib3's NewConnectionError, errno 111 / 61 / 10061
_REFUSED = re.compile(r"NewConnectionError|Connection refused|\[Errno (?:111|61|10061)\]|\[WinError 10061\]|"
                      r"actively refused|Failed to establish a new connection")

_PTX_LINE = re.compile(r"ptxas fatal\s*:|\bPTXASError\b|Internal Triton PTX codegen error")
_TRITON_WORDS = re.compile(r"[/\\]triton[/\\]|\bPTXASError\b|\bTriton\b|torchinductor|[/\\]_inductor[/\\]|"
                           r"InductorError|BackendCompilerFailed")

_ANY_PORT_LINE = re.compile(r"Cannot find empty port in range")
_IN_USE = re.compile(r"(?i:address already in use)|\[Errno (?:98|48|10048)\]|\[WinError 10048\]|"
                     r"only one usage of each socket address")

_XLA_COMPILER_LINE = re.compile(r"HLO -> LLVM IR lowering|Rerun with --xla_dump_to")
# another framework's XLA (TensorFlow's and JAX's print the same advice)
_OTHER_XLA = re.compile(r"tensorflow|\bjaxlib\b|\bjax\.|XlaRuntimeError|\[Op:__inference_")

# a PowerShell / cmd.exe command that is a path or a script: '.\venv\Scripts\activate', 'run.ps1'
_COMMAND_PATH = re.compile(r"(?:ObjectNotFound: \(|The term '|^')(?:[^'():\n]{0,200}[/\\][^'():\n]{0,200}|"
                           r"[^'():\n]{1,200}\.ps1)(?::String\)|' is not recognized)")

_HUB_REFUSAL = re.compile(r"RepositoryNotFoundError|GatedRepoError|Repository Not Found|\b40[13] Client Error|"
                          r"gated repo")
# the request was an upload, or for a dataset's repository: not a model's files being downloaded
_NOT_A_MODEL_DOWNLOAD = re.compile(r"/commit/|/api/repos/create|/preupload/|\bpush_to_hub\b|\bcreate_commit\b|"
                                   r"\bupload_(?:file|folder)\b|/api/datasets/|huggingface\.co/datasets/|"
                                   r"repo_type=['\"]dataset|\bload_dataset\(")

# log lines printed before the run went on: Unsloth's notice that it fell back to a temporary file, a prebuilt
# kernel's device printf (xFormers' "FATAL: this function is for sm80"), pip's resolver report
_LOG_SLUGS = frozenset({"unsloth_compiled_cache", "pip_conflict"})
_DEVICE_PRINTF = re.compile(r"^FATAL: ")
# pip's resolver report, whichever category matched its words ("requires torch==2.1.0, which is not installed")
_RESOLVER_LINE = re.compile(r"pip's dependency resolver|, which is (?:not installed|incompatible)\.?$|has requirement ")


# a Windows shell refusing a command, in any display language: the command's name
_NOT_RECOGNISED = re.compile(
    r"[‘'\"“](?P<name>[^'\"’”\n]{1,200})[’'\"”] ?(?:is not (?:recognized as )?an internal or external command|"
    r"不是[内內]部或外部命令|は、内部コマンド|은\(는\) 내부|n.est pas reconnu|no se reconoce|não é reconhecido|"
    r"не является внутренней|ist entweder falsch)"
    r"|The term '(?P<term>[^'\n]{1,200})' is not recognized|无法将[“\"'](?P<zh>[^”\"'\n]{1,200})[”\"']项识别为")


# pip saying a package is installed ("Requirement already satisfied: auto-py-to-exe in c:\\...")
_PIP_SATISFIED = re.compile(r"Requirement already satisfied: (?P<name>[A-Za-z][\w.-]{0,60})\s")


def installed_command(raw: str) -> str | None:
    """The command a Windows shell refused after pip said the package of that name is already installed: the
    command is in the Scripts folder of the Python pip installed into, which is not on PATH (auto-py-to-exe#352)."""
    tail = raw[-20_000:]
    satisfied = {m.group("name").lower(): m.start() for m in _PIP_SATISFIED.finditer(tail)}
    if not satisfied:
        return None
    for m in _NOT_RECOGNISED.finditer(tail):
        name = (m.group("name") or m.group("term") or m.group("zh") or "").removesuffix(".exe")
        at = satisfied.get(name.lower())
        if at is not None and at < m.start():
            return name
    return None


def _several_commands(raw: str) -> bool:
    """Whether cmd.exe refused several different commands in one text: a batch file read in the wrong encoding or with
    the wrong line endings (its words taken for commands), not one program that is not installed.  Only cmd.exe's
    refusals count: a batch file's words are cmd.exe's to misread, and PowerShell's several refusals are commands a
    person typed (``py``, then ``python3``)."""
    names = {m.group("name") for m in _NOT_RECOGNISED.finditer(raw[-20_000:]) if m.group("name")}
    return len(names) >= 2


def next_over_parameters(s: Structure) -> bool:
    """Whether the innermost frame calls next() over a module's parameters or buffers."""
    frame = s.innermost
    return frame is not None and _NEXT_OVER_PARAMETERS.search(frame.source) is not None


def _stop_iteration_not_final(raw: str) -> bool:
    if _REPLICA.search(raw):
        return True  # a DataParallel replica's StopIteration: replica_error's evidence
    stops = list(_BARE_STOP.finditer(raw))
    if not stops or last_exception_start(raw) > stops[-1].start():
        return True  # another exception ended the text (PEP 479's "generator raised StopIteration")
    return next_over_parameters(read(raw[-20_000:]))


def _not_the_codes_file(line: str, raw: str, live: bool) -> bool:
    """Whether a missing file is not shown to be one the code itself opened: a pseudo-file, a subprocess starting a
    program, or a text without the frames that opened it (a quoted message can be any program's or package's missing
    file; a live exception's frames are judged by ``_guards.frames_deny``)."""
    if _PSEUDO_FILE.search(line) or _SUBPROCESS.search(raw):
        return True
    if live:
        return False
    s = read(raw[-20_000:])
    return not s.frames or not s.cut and not any(f.is_user for f in s.frames)


def _another_exit(raw: str) -> bool:
    """Whether an exit with status 2 shows that no parser read the kernel's command line: the usage names another
    program (``%run train.py --bad``: the script's own options), or frames show code that is not argparse's exiting
    (``sys.exit(2)`` in a cell)."""
    if _KERNEL_WORDS.search(raw):
        return False
    if _USAGE_PROGRAM.search(raw):
        return True
    s = read(raw[-20_000:])
    return bool(s.frames) and not any(_ARGPARSE_FRAME.search(f.path + " " + f.source) for f in s.frames)


def _later_traceback(line: str, raw: str) -> bool:
    """Whether a whole traceback follows the matched log line and ends in an exception whose message is not it."""
    tail = raw[-20_000:]
    at = tail.rfind(line[:80]) if line else -1
    if at < 0:
        return False
    s = read(tail[at + len(line[:80]):])
    return bool(s.exc_type) and not s.cut and bool(s.frames) and line[:80] not in s.message


def _kernel_parser(error: BaseException) -> bool:
    """Whether a live exception was raised by an argument parser whose program is the kernel's launcher (a parser
    reading the kernel's command line; under ``%run script.py`` its program is the script's)."""
    import argparse

    tb = error.__traceback__
    while tb is not None:
        for value in (tb.tb_frame.f_locals.get("self"), tb.tb_frame.f_locals.get("parser")):
            if isinstance(value, argparse.ArgumentParser) and _KERNEL_WORDS.search(str(value.prog)):
                return True
        tb = tb.tb_next
    return False


def lacks_evidence(slug: str, line: str, raw: str, live: BaseException | None = None) -> bool:
    """Whether a match of ``slug`` on ``line`` lacks the evidence its category needs in the text ``raw`` (for a
    live exception ``live``, also its frames)."""
    if slug == "iterator_empty":
        return _stop_iteration_not_final(raw)
    if slug == "file_not_found":
        return _not_the_codes_file(line, raw, live is not None)
    if slug == "argparse_in_notebook":
        if live is not None:  # its frames hold the parser: the kernel's launcher as its program, or not
            return not _kernel_parser(live)
        return _SYSTEM_EXIT_LINE.match(line) is not None and _another_exit(raw)
    if slug == "local_service_unreachable":
        return not _REFUSED.search(raw)
    if slug == "torch_compile" and _PTX_LINE.search(line):
        return not _TRITON_WORDS.search(raw)
    if slug == "server_port_in_use" and _ANY_PORT_LINE.search(line):
        return not _IN_USE.search(raw)
    if slug == "xla_error" and _XLA_COMPILER_LINE.search(line):
        return _OTHER_XLA.search(raw) is not None
    if slug == "package_missing" and (_COMMAND_PATH.search(line) or _NOT_RECOGNISED.search(line) and
                                      _several_commands(raw)):
        return True
    if slug == "package_missing" and (_NOT_RECOGNISED.search(line) or "CommandNotFoundException" in line) and \
            installed_command(raw) is not None:
        return True  # pip said the package is installed: command_not_on_path, placed by the structure's rules
    if slug == "option_not_accepted" and ONNX_OPSET_REFUSED.search(line):
        return True  # an opset the exporter does not know: the torch release's question (onnx_opset_unsupported)
    if slug == "checkpoint_load_failed" and _HUB_REFUSAL.search(raw):
        return _NOT_A_MODEL_DOWNLOAD.search(raw) is not None
    if slug in _LOG_SLUGS or slug == "version_mismatch" and _DEVICE_PRINTF.match(line) or _RESOLVER_LINE.search(line):
        return _later_traceback(line, raw)
    return False
