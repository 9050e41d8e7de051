"""What an install, build or environment log's cause line says, and the first step it calls for.

``core.explain._build_log`` reads a pip / setup.py / CMake / nvcc log (or a library that failed to load) for the one
line that holds the cause, and answers with the first step below for what that line names.  Each ``CauseLine`` is
the evidence an answer needs:

- ``line``: the cause line itself (named groups become facts: the package, the header, the library, the version);
- ``needs``: what else the text must show for the line to mean this (pip's or setup.py's build output around a
  ``No module named 'torch'``, so that a notebook's own missing torch is not read as a build without torch);
- ``slug``: the category the answer belongs to (an entry of ``env``: its family is the answer's family);
- ``claims``: whether the line alone places a text no message matched (True), or only makes an already placed
  answer's first step specific (False: the line says what, but not that it is the error the user hit);
- ``step``: the first step, filled with the line's groups and the context the reader finds in the text (``{package}``
  being built, ``{python}``, ``{platform}``, ``{torch}``); a ``[[...]]`` segment is dropped when a fact it names is
  missing, as in the knowledge entries' templates.

Order is precedence: a missing tool or header explains the compiler errors that follow it, so those come first; the
generic compiler line (the first one in the log) comes after them, and pip's own summary lines last.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CauseLine", "CAUSES", "CLAIM_WORDS", "HEADERS", "SYSTEM_LIBRARIES", "TORCH_LIBRARIES", "BUILD_KILLED",
           "BUILD_STOPPED", "PIP_BUILD_FRAME", "PIP_METADATA_RUN", "SETUP_PY_STEP", "PIP_WORDS"]


@dataclass(frozen=True)
class CauseLine:
    """One line that holds a cause: what it must say, what else the text must show, and the first step it calls for."""

    name: str
    slug: str
    line: str
    step: str
    needs: str = ""
    claims: bool = True


# pip's, setup.py's and the build backends' own words: a text with one of these is a build's output
_BUILD = (r"subprocess-exited-with-error|Failed building wheel|Building wheel for|Running setup\.py|setup\.py|"
          r"Command errored out|Preparing metadata|Getting requirements to build|bdist_wheel|egg_info|pip-build-env|"
          r"pip-install-|pip-req-build|cpp_extension|build_ext|CMakeFiles|\bninja\b|\bnvcc\b|pip install|"
          r"op_builder|Compiling objects")

# the system killing a compiler for memory: the shell's bare "Killed" line, with a build's stop in the text (after it:
# then host_oom's answer for a training process gives way to the build's)
BUILD_KILLED = r"(?m)^[ \t]*Killed[ \t]*$"
BUILD_STOPPED = (r"ninja: build stopped|Error compiling objects for extension|Failed building wheel|"
                 r"error: command '[^'\n]{0,200}(?:nvcc|gcc|g\+\+|c\+\+|cl\.exe)' failed")
_KILLED_STEP = ("The compiler was killed for memory (several heavy CUDA files compile at once): rerun with fewer parallel "
                "jobs (MAX_JOBS=1 or 2 pip install ...), or on a machine with more RAM.")

CAUSES: tuple[CauseLine, ...] = (
    CauseLine(
        "windows_long_paths", "install_failed",
        r"does not have Windows Long Path support enabled|Windows Long Path support",
        "A path pip wrote is longer than Windows allows (260 characters) and this system does not have Windows Long "
        "Path support enabled: enable it (set HKLM\\SYSTEM\\CurrentControlSet\\Control\\FileSystem LongPathsEnabled "
        "to 1 in the registry, or the group policy 'Enable Win32 long paths'), restart the shell, and install again "
        "with a short TEMP folder and a short working folder (set TEMP=C:\\t); or install a prebuilt wheel of "
        "{package_pip}, so that nothing is unpacked and built."),
    CauseLine(
        "torch_missing_in_build", "extension_build_failed",
        r"No module named '?torch'?(?![\w.])",
        "{package_or_it} imports torch while it builds, and pip builds it in an isolated environment without torch: "
        "install torch first, then pip install {package_pip} --no-build-isolation (or install a prebuilt wheel of "
        "{package_pip} for the installed torch, so nothing is built).",
        needs=_BUILD),
    CauseLine(
        "nvcc_missing", "extension_build_failed",
        r"nvcc was not found|command '[^'\n]{0,300}nvcc(?:\.exe)?' failed: No such file|"
        r"CUDA_HOME environment variable is not set|CUDA_HOME does not exist|^[ \t]*assert cuda_home\b|"
        r"name 'bare_metal_version' is not defined|nvcc: (?:command )?not found|Could not find nvcc|"
        r"No CUDA toolkit found|No such file or directory: '[^'\n]{0,300}[/\\]nvcc(?:\.exe)?'",
        "The build needs the CUDA compiler (nvcc) and did not find it: install the CUDA toolkit of the version torch "
        "was built with (python -c \"import torch; print(torch.version.cuda)\")[[, {torch}]], set CUDA_HOME to it "
        "(nvcc --version must work in the same shell), and rerun with --no-build-isolation; or install a prebuilt "
        "wheel of {package_pip} for the installed torch and CUDA instead of building.",
        needs=_BUILD + r"|bare_metal_version|cuda_home"),
    CauseLine(
        "no_gpu_at_build", "extension_build_failed",
        r"Unknown compute capability|[Cc]ould not determine (?:the )?(?:GPU|CUDA) (?:architecture|compute capability)",
        "The build sees no GPU, so it cannot choose which GPU architecture to compile for (a login node, a container "
        "without the GPU, a CPU machine): name the architecture yourself (TORCH_CUDA_ARCH_LIST=\"8.6\", or the "
        "package's own variable, e.g. TCNN_CUDA_ARCHITECTURES=86 for tiny-cuda-nn) or build on the GPU machine.",
        needs=_BUILD),
    CauseLine(
        "gcc_too_new", "extension_build_failed",
        r"(?i:unsupported GNU version)!? (?:gcc versions )?later than (?P<gcc>\d{1,2}) are not supported",
        "nvcc refuses the host compiler: install gcc {gcc} or older and point the build at it (CC=gcc-{gcc} "
        "CXX=g++-{gcc}, or CUDAHOSTCXX), or use a CUDA toolkit that supports the installed gcc."),
    CauseLine(
        "msvc_too_new", "extension_build_failed",
        r"unsupported Microsoft Visual Studio version!",
        "nvcc refuses this Visual Studio: install the MSVC toolset the CUDA toolkit supports (an older Build Tools "
        "version next to the new one) or a newer CUDA toolkit, then build from that toolset's x64 prompt."),
    CauseLine(
        "msvc_missing", "extension_build_failed",
        r"Microsoft Visual C\+\+ 14\.0 (?:or greater )?is required|'cl(?:\.exe)?' is not recognized|"
        r"error: command 'cl\.exe' failed: (?:None|No such file)|Command '\['where', 'cl'\]' returned non-zero|"
        r"Error checking compiler version for cl\b",
        "There is no C++ compiler for this Windows Python: install Microsoft C++ Build Tools with the \"Desktop "
        "development with C++\" workload, open a new shell and rerun; or install a prebuilt wheel of {package_pip} "
        "for[[ Python {python} on]] Windows, so that nothing is compiled."),
    CauseLine(
        "compiler_missing", "extension_build_failed",
        r"command '[^'\n]{0,200}?(?:gcc|g\+\+|c\+\+|cc|clang)(?:-\d{1,2})?' failed: No such file|"
        r"unable to execute '[^'\n]{0,200}?(?:gcc|g\+\+|cc|c\+\+)'|(?m:^[^\n]{0,40}\b(?:gcc|g\+\+|c\+\+): "
        r"(?:command )?not found)",
        "There is no C/C++ compiler where the build runs: install one (apt install build-essential, dnf groupinstall "
        "'Development Tools', or conda install -c conda-forge gxx) and rerun; or install a prebuilt wheel of "
        "{package_pip}[[ for Python {python}]], so that nothing is compiled."),
    CauseLine(
        "pkgconfig_missing", "extension_build_failed",
        r"Package (?P<pc>[\w+.-]{1,80}) was not found in the pkg-config search path|"
        r"pkg-config could not find libraries \[(?P<pcs>[^\]\n]{1,200})\]|Could not find (?P<pc1>lib\w{1,60}) with pkg-config",
        "The build needs the C library {pc} and pkg-config cannot find its development files ({pc}.pc): install its "
        "-dev / -devel package (or the conda package, then add its lib/pkgconfig to PKG_CONFIG_PATH), or install a "
        "prebuilt wheel of {package_pip} that bundles it."),
    CauseLine(
        "wheel_missing", "extension_build_failed",
        r"invalid command 'bdist_wheel'",
        "The Python that builds {package_pip} has no 'wheel' package (an old pip or setuptools): pip install -U pip "
        "setuptools wheel, then install again."),
    CauseLine(
        "header_missing", "extension_build_failed",
        r"fatal error:? ?(?:C1083: [^'\"‘“\n]{0,60})?['\"‘“]?(?P<header>[\w/.+-]{1,120}?)['\"’”]?"
        r"(?:: No such file or directory| file not found)",
        "The compiler cannot find the header {header}: {header_advice}",
        needs=r"\.(?:c|cc|cpp|cxx|cu|h|hpp)\b|#include|" + _BUILD),
    CauseLine(
        "source_file_missing", "extension_build_failed",
        r"ninja: error: '(?P<file>[^'\n]{1,300})', needed by '[^'\n]{1,300}', missing and no known rule to make it",
        "A source file the build needs is not there ({file_name}): the source archive or checkout is incomplete. "
        "Install the project's prebuilt wheel for the installed torch and CUDA, or build from a full git checkout "
        "(git clone --recursive, or git submodule update --init --recursive)."),
    CauseLine(
        "rust_missing", "extension_build_failed",
        r"can't find Rust compiler",
        "pip found no wheel of {package_pip} for[[ Python {python} on]] this platform, so it builds it from source, "
        "which needs Rust: use a Python version the package publishes wheels for (or pin a release that has one), or "
        "install Rust (rustup) and rerun."),
    CauseLine(
        "compiler_killed", "extension_build_failed",
        r"Killed signal terminated program|fatal error: Killed signal|cc1plus: out of memory|"
        r"virtual memory exhausted",
        _KILLED_STEP),
    CauseLine("build_killed", "extension_build_failed", BUILD_KILLED, _KILLED_STEP, needs=BUILD_STOPPED, claims=False),
    CauseLine(
        "linker_library_missing", "extension_build_failed",
        r"ld(?:\.exe)?: cannot find -l(?P<lib>[\w+.-]{1,60})",
        "The linker cannot find the library lib{lib}: {lib_advice}"),
    CauseLine(
        "torch_headers_reject", "extension_build_failed",
        r"[/\\]torch[/\\](?:lib[/\\])?include[/\\][^\n]{1,300}?(?::\d{1,6}:\d{1,6}:|\(\d{1,6}\):) "
        r"(?:(?:fatal )?error\b|note: {1,4}candidate)",  # not a warning's "note: declared here"
        "The compiler's messages point into torch's own headers: the extension's source is written for another "
        "torch release[[ than {torch}]] (an API torch changed or removed). Install the torch release the project "
        "names, or a release of {package_pip} that supports the installed torch.",
        needs=_BUILD + r"|\.(?:cpp|cu|h)\b"),
    CauseLine(
        "compiler_error", "extension_build_failed",
        r"(?m)^[^\n]{0,300}?(?P<file>[\w.-]{1,120}\.(?:cc|cpp|cxx|cu|cuh|hpp|h|c))(?:[:(]\d{1,7}){1,2}\)?: ?"
        r"(?:fatal )?error(?: C\d{4})? ?: ?(?P<message>[^\n]{1,200})",
        "Start from the compiler's first error, in {file}: {message}. {compiler_advice}"),
    CauseLine(
        "cmake_error", "extension_build_failed",
        r"CMake Error at (?P<where>[^\n]{1,200}?):?\n[ \t]*(?P<message>[^\n]{1,200})",
        "CMake stopped while configuring the build ({where}): {message} — install what it names or point CMake at "
        "it (CUDA: CUDA_HOME / CMAKE_CUDA_COMPILER; a library: its *_DIR or CMAKE_PREFIX_PATH), then rerun."),
    CauseLine(
        "cmake_incomplete", "extension_build_failed",
        r"Configuring incomplete, errors occurred!",
        "CMake could not configure the build: its own 'CMake Error' lines just above (or CMakeFiles/CMakeError.log, "
        "which it names) say what it did not find — usually the CUDA toolkit, a compiler CUDA supports, or a "
        "library such as cuDNN or Boost; install it or point CMake at it, then rerun."),
    CauseLine(
        "make_stopped", "extension_build_failed",
        r"(?:g?make(?:\[\d{1,3}\])?: \*\*\* \[[^\n]{0,200}\] Error \d{1,3}|"
        r"CalledProcessError: Command '\['(?:cmake|make|ninja)'[^\n]{0,300}returned non-zero exit status \d{1,3})",
        "The build tool stopped because a compile step failed: scroll up to the first line with 'error' (the "
        "compiler's own message, not pip's summary or this line) — a missing toolkit or header is installed, a source "
        "error means the project does not support this compiler, platform or torch.",
        needs=_BUILD + r"|setup\.py|Traceback"),
    CauseLine(
        "built_from_source", "extension_build_failed",
        r"Precompiled wheel not found|Guessing wheel URL|(?:Downloading|Using cached) [\w.-]{1,120}\.(?:tar\.gz|zip)\b",
        "pip is compiling {package_pip} from source because no prebuilt wheel fits this setup[[ ({setup})]]: install a wheel built for exactly this combination (the project's release "
        "page or wheel index for the installed torch and CUDA), or move to a Python / torch / platform it publishes "
        "wheels for; build from source only with a CUDA toolkit and compiler set up (then read the first error above).",
        # compiling, not only reading the archive's metadata (a source-only package whose setup.py failed is no build)
        needs=r"Building wheel for [^\n]{0,120}(?:error|status 'error')|bdist_wheel did not run|Building from source|"
              r"Running setup\.py install for [^\n]{0,120}error",
        claims=False),
    CauseLine(
        "build_summary", "extension_build_failed",
        r"Failed building wheel for (?P<wanted>[A-Za-z][\w.-]{0,100})|Could not build wheels for "
        r"(?P<wanted2>[A-Za-z][\w.-]{0,100})|(?:python setup\.py (?:egg_info|bdist_wheel|develop|install)|Getting "
        r"requirements to build wheel|Preparing metadata \(pyproject\.toml\)) did not run successfully",
        "pip only reports that building {package_pip} failed: the cause is the build's first error line above[[ (run "
        "pip install -v {package} to see the whole build)]]. A missing CUDA toolkit, compiler or header is to be "
        "installed; otherwise install a prebuilt wheel of {package_pip} for[[ Python {python},]] the installed torch and "
        "CUDA instead of compiling."),
    # the package manager's answers: nothing was built
    CauseLine(
        "windows_python_missing", "program_missing",
        r"Python was not found; run without arguments to install from the Microsoft Store|"
        r"(?:exit code|Error code|errorlevel)[: =]{1,3}9009\b",
        "Windows could not run Python (exit code 9009: the command was not found — the Microsoft Store's python.exe "
        "alias, or no Python on PATH): install Python from python.org in the version the project names, with \"Add "
        "python.exe to PATH\" ticked (or turn off the python.exe / python3.exe App execution aliases in Settings), "
        "then open a new shell and rerun."),
    CauseLine(
        "requirement_quoted", "install_failed",
        r"Invalid requirement: [\"']?(?P<req>'[^'\n]{1,300}'|\"[^\"\n]{1,300}\")",
        "The requirement reached pip with its quotes around it ({req}): the shell (Windows' cmd or PowerShell, or a "
        "notebook's !pip line) passed them on literally. Drop the single quotes (on Windows use double quotes, or "
        "none) and run the command again.",
        claims=False),
    CauseLine(
        "index_unreachable", "install_failed",
        r"(?:Failed to establish a new connection: \[Errno -?\d{1,5}\] (?P<why>[^'\"\n)]{1,80})|"
        r"Temporary failure in name resolution|ProxyError\('Cannot connect to proxy|"
        r"SSLError\(SSLCertVerificationError|ConnectTimeoutError)[^\n]{0,300}?/simple/(?P<wanted>[\w.-]{1,100})/",
        "pip cannot reach the package index[[ ({why})]] while looking up {wanted}: check the network, give pip the "
        "proxy (pip install --proxy http://host:port ..., or HTTPS_PROXY), or use a mirror it can reach (--index-url), "
        "then retry."),
    CauseLine(
        "conda_package_absent", "conda_not_found",
        r"(?<![\w.-])(?P<wanted>[\w.-]{1,100}) does not exist \(perhaps a typo or a missing channel\)|"
        r"nothing provides (?:requested )?(?P<needed>[\w.-]{1,100})",
        "The channels conda (mamba) searched have no {wanted_or_needed} for this platform[[ ({platform})]] and "
        "Python[[ {python}]]: name the channel that publishes it (-c ...), use a Python version and platform it has "
        "builds for, or install it with pip or from source as the project documents."),
    CauseLine(
        "pip_command_word", "no_matching_wheel",
        r"No matching distribution found for (?P<word>install|pip|python|python3|sudo|conda|-m|git)\s*$",
        "pip was asked for a package named '{word}': a word of the command (pip install install ..., a pasted "
        "'pip install' twice) became a package name. Fix the command line and run it again."),
    CauseLine(
        "no_release_for_python", "no_matching_wheel",
        r"Could not find a version that satisfies the requirement (?P<wanted>[\w.-]{1,100})"
        r"(?P<pin>[=<>!~]=?[\w.*+!-]{1,40})?[^\n]{0,200}?\(from versions: (?P<versions>[^)\n]{0,300})\)",
        "{versions_advice}"),
    CauseLine(
        "wheel_tags_differ", "no_matching_wheel",
        r"(?<![\w.+-])(?P<wheel>[\w.+-]{1,200}\.whl) is not a supported wheel on this platform",
        "The wheel {wheel} is built for {wheel_tags}, which this interpreter does not accept (another Python "
        "version, a 32-bit Python, or another platform): download the wheel whose Python (cpXY) and platform tags "
        "match it (python -m pip debug --verbose lists the tags it accepts), or use the Python the wheel was built "
        "for."),
    CauseLine(
        "python_outside_range", "no_matching_wheel",
        r"requires a different Python: (?P<have>[\d.]{1,20}) not in '(?P<spec>[^'\n]{1,60})'",
        "{package_or_it} needs Python {spec}, and this is Python {have}: create an environment with a Python in that "
        "range (conda create -n env python=3.X, or uv venv --python 3.X), or pin an older release of the package that "
        "supports {have}."),
    CauseLine(
        "toolkit_not_torchs_cuda", "version_mismatch",
        r"The detected CUDA version \((?P<toolkit>\d{1,2}\.\d{1,2})\) mismatches the version that was used to "
        r"compile\s{1,8}PyTorch \((?P<torch_cuda>\d{1,2}\.\d{1,2})\)",
        "The CUDA toolkit that compiles the extension (nvcc, CUDA {toolkit}) is not the CUDA torch was built with "
        "({torch_cuda}): point CUDA_HOME at a CUDA {torch_cuda} toolkit (it can sit next to the other), or install "
        "the torch build for CUDA {toolkit} (its index URL ends in /cu{toolkit_tag}), then rebuild with "
        "--no-build-isolation.",
        claims=False),
    # what a library that fails to load names: these only make an answer's first step exact
    CauseLine(
        "compiled_part_missing", "package_missing",
        r"No module named '(?P<module>(?P<parent>[A-Za-z]\w{0,60})\.(?:[\w.]{0,100}\.)?_(?:C|ext|\w{0,40}cuda\w{0,20})|"
        r"[A-Za-z]\w{0,60}_(?:cuda|cpp|kernels?|ext))'",
        "{module} is the compiled part of an installed package[[ ({parent})]], and it was not built or not installed "
        "with it: reinstall the package so that its extension is compiled (from its source folder: pip install -e . "
        "with the CUDA toolkit and a compiler, reading that build's first error) or install its prebuilt wheel for "
        "the installed torch and CUDA; run from outside the source folder, where an unbuilt copy shadows the "
        "installed one.",
        claims=False),
    CauseLine(
        "cuda_runtime_library", "native_library_missing",
        r"(?P<library>lib(?:cudart|cublas|cublasLt|cufft|curand|cusparse|cusolver|nvrtc|nvToolsExt|nvJitLink)"
        r"\w{0,20}\.so\.(?P<cuda_major>\d{1,2})(?:\.\d{1,3})?): cannot open shared object file",
        "A package was built for CUDA {cuda_major} and its runtime library {library} is not on this "
        "machine: install the build of that package made for the CUDA your torch uses (python -c \"import torch; "
        "print(torch.version.cuda)\"), or the CUDA {cuda_major} runtime it expects (the nvidia-*-cu{cuda_major} "
        "wheels, or the toolkit's lib64 on LD_LIBRARY_PATH).",
        claims=False),
    CauseLine(
        "system_library", "native_library_missing",
        r"(?P<library>lib[\w+-]{1,60}\.so)(?:\.\d{1,4}){0,3}: cannot open shared object file",
        "{library_advice}",
        claims=False),
    CauseLine(
        "torch_dlls", "native_library_missing",
        r"_load_dll_libraries\(\)? failed|in _load_dll_libraries\b",
        "torch could not load its own DLLs on Windows: install the latest Microsoft Visual C++ Redistributable (x64) "
        "and restart; if it persists, the Python is one torch does not support (an application's embedded Python, "
        "an unsupported version): install torch into a standard python.org or conda Python[[ (this one is {python})]]."),
    CauseLine(
        "venv_broken", "install_failed",
        r"No pyvenv\.cfg file",
        "The virtual environment is incomplete (its pyvenv.cfg is missing: half-deleted, copied, or made by another "
        "tool): delete its folder, create it again (python -m venv <folder>) in a folder you can write to, then "
        "install into it."),
    CauseLine(
        "dll_load_failed", "native_library_missing",
        r"DLL load failed(?: while importing (?P<module>\w{1,60}))?: (?P<why>[^\n]{1,120})",
        "Windows could not load the compiled module[[ {module}]][[ of {owner_named}]] or a DLL it needs ({why}): "
        "install the latest Microsoft Visual C++ Redistributable (x64) and restart; if it still fails, the package "
        "was built for another Python, torch or CUDA: reinstall {owner} from one source, built for this Python and the "
        "installed torch.",
        claims=False),
    CauseLine(
        "windows_dll", "native_library_missing",
        r"(?:\[WinError (?:126|182|1114)\][^\n]{0,200}?)?Error loading \"(?P<dll_path>[^\"\n]{1,300}\.dll)\" or one of its "
        r"dependencies|\[WinError 126\]",
        "Windows could not load {dll_or_a_dll} or a DLL it depends on: install the latest Microsoft Visual C++ "
        "Redistributable (x64) and restart the shell; if it still fails, reinstall {owner} from one source for this "
        "Python (pip uninstall until pip finds none, then install it once).",
        claims=False),
    CauseLine(
        "windows_procedure", "undefined_symbol",
        r"\[WinError 127\]|The specified procedure could not be found",
        "A compiled library[[ of {owner_named}]] calls a function the loaded DLLs do not have: it was built for another torch "
        "release. Install the release of it built for the installed torch (the same index and CUDA tag), in one pip "
        "command together with torch.",
        claims=False),
)

# the words (lower case) a claiming line's match always holds, one set per line: a text without any of them holds no
# claiming line, so the reader skips its scan of the text (a long log of another kind costs a search per word, not
# one per line; tests/test_explain_review8.py checks every alternative of every claiming line holds one)
CLAIM_WORDS: dict[str, tuple[str, ...]] = {
    "windows_long_paths": ("windows long path support",),
    "torch_missing_in_build": ("no module named",),
    "nvcc_missing": ("nvcc", "cuda_home", "bare_metal_version", "no cuda toolkit found"),
    "no_gpu_at_build": ("compute capability", "could not determine"),
    "gcc_too_new": ("unsupported gnu version",),
    "msvc_too_new": ("visual studio",),
    "msvc_missing": ("visual c++", "'cl", "compiler version"),
    "compiler_missing": ("failed: no such file", "unable to execute", "gcc", "g++", "c++"),
    "pkgconfig_missing": ("pkg-config",),
    "wheel_missing": ("bdist_wheel",),
    "header_missing": ("fatal error",),
    "source_file_missing": ("ninja: error",),
    "rust_missing": ("rust compiler",),
    "compiler_killed": ("killed signal", "out of memory", "virtual memory exhausted"),
    "linker_library_missing": ("cannot find -l",),
    "torch_headers_reject": ("include",),
    "compiler_error": (".c", ".h"),  # a C, C++ or CUDA source or header (.cc, .cpp, .cu, .hpp, ...)
    "cmake_error": ("cmake error at",),
    "cmake_incomplete": ("configuring incomplete",),
    "make_stopped": (": *** [", "calledprocesserror"),
    "build_summary": ("failed building wheel", "could not build wheels", "did not run successfully"),
    "windows_python_missing": ("python was not found", "9009"),
    "index_unreachable": ("/simple/",),
    "conda_package_absent": ("does not exist (perhaps", "nothing provides"),
    "pip_command_word": ("no matching distribution found for",),
    "no_release_for_python": ("could not find a version that satisfies",),
    "wheel_tags_differ": ("is not a supported wheel",),
    "python_outside_range": ("requires a different python",),
    "torch_dlls": ("_load_dll_libraries",),
    "venv_broken": ("no pyvenv.cfg",),
}

# headers the compiler cannot find, and what provides them ("*" at the end: a folder prefix)
HEADERS: dict[str, str] = {
    "Python.h": "the Python development headers are not installed: apt install python3-dev ({python_dev} for the "
                "version that runs pip), or use a conda / python.org Python, which ship them.",
    "cuda_runtime.h": "the CUDA toolkit's headers are not where the build looks: install the CUDA toolkit (not only "
                      "the driver) and set CUDA_HOME to it.",
    "cuda_runtime_api.h": "the CUDA toolkit's headers are not where the build looks: install the CUDA toolkit and "
                          "set CUDA_HOME to it.",
    "cuda.h": "the CUDA toolkit's headers are not where the build looks: install the CUDA toolkit and set CUDA_HOME.",
    "cublas_v2.h": "the CUDA toolkit's headers are incomplete or not on the include path: install the full CUDA "
                   "toolkit (with its libraries' dev parts) and set CUDA_HOME.",
    "cusparse.h": "the CUDA toolkit's headers are incomplete or not on the include path: install the full CUDA "
                  "toolkit and set CUDA_HOME.",
    "cudnn.h": "cuDNN's development headers are not installed: install the cuDNN dev package for your CUDA, or point "
               "CUDNN_INCLUDE_DIR at them.",
    "torch/extension.h": "torch's headers are not visible to the build: pip builds in an isolated environment without "
                         "torch (or torch is older than 1.0); install torch first and rerun with --no-build-isolation.",
    "THC/THC.h": "THC was removed from torch (1.11): the extension's source is written for an older torch; install "
                 "a release of the package that supports the installed torch, or the torch it names.",
    "crypt.h": "libcrypt's headers are missing (a conda Python's compiler): install libxcrypt (conda install "
               "libxcrypt) or the system's libcrypt-dev.",
    "*standard": "the compiler's C++ standard library is not found: on macOS install the Xcode command line tools "
                 "(xcode-select --install); on Linux install g++ (build-essential); on Windows build from the x64 "
                 "Native Tools prompt of Visual Studio.",
    "*": "install the development package that provides it (its -dev / -devel package, or the conda package), or "
         "add its folder to CPATH / the build's include_dirs.",
}
# C and C++ standard headers: the toolchain itself is incomplete
STANDARD_HEADERS = frozenset({"iostream", "cstdint", "cstddef", "cstdlib", "vector", "string", "cmath", "algorithm",
                              "stdio.h", "stdlib.h", "string.h", "math.h", "stddef.h", "stdint.h", "limits.h",
                              "cstdio", "memory", "utility", "type_traits", "functional", "map", "array"})

# system libraries a Python package loads, and how to get them
SYSTEM_LIBRARIES: dict[str, str] = {
    "libGL.so": "OpenCV needs the system's OpenGL library (libGL.so.1): apt install libgl1 (libgl1-mesa-glx on old "
                "Ubuntu), or replace opencv-python with opencv-python-headless.",
    "libgthread-2.0.so": "OpenCV needs GLib: apt install libglib2.0-0, or use opencv-python-headless.",
    "libsndfile.so": "soundfile needs libsndfile: pip install -U soundfile (its wheels bundle it), or apt install "
                     "libsndfile1.",
    "libcudnn.so": "cuDNN is not on this machine or not on the loader's path: install the cuDNN the package was built "
                   "for (the nvidia-cudnn-cu* wheel, or conda's cudnn), or install the package's build that bundles it.",
    "libnccl.so": "NCCL is not on the loader's path: install the torch build that bundles it (pip's CUDA wheels), "
                  "or add NCCL's lib folder to LD_LIBRARY_PATH.",
    "libcuda.so": "the NVIDIA driver's library is not there: this machine (or container) has no NVIDIA driver "
                  "exposed; install the driver, or start the container with the GPU (--gpus all).",
    "libtorch_cuda.so": "torch's own CUDA library is missing: the installed torch is broken or another copy shadows "
                        "it; uninstall torch until pip finds none, then install it once.",
    # torch's own libraries (split and renamed across releases: libtorch_cpu since 1.5): the extension loading one was
    # built for another torch release, no system package provides them
    "*torch": "{library} is one of torch's own libraries, and the compiled package that loads it[[ ({owner_named})]] "
              "was built for another torch release than the installed one: install its build for the installed torch "
              "(the same index and CUDA tag, in one pip command with torch), or the torch release it was built for.",
    "*torch_itself": "torch's own library {library} is missing: the installed torch is broken or another copy shadows "
                     "it; uninstall torch until pip finds none, then install it once.",
    "*": "a package needs {library}, which is not installed or not on the loader's path: find which package provides "
         "it (apt-file search / conda search), install it, or install a build of the package that bundles it.",
}

# torch's own shared libraries (not a system package's): SYSTEM_LIBRARIES["*torch"] answers for them
TORCH_LIBRARIES = r"lib(?:torch\w{0,30}|c10\w{0,20}|shm|caffe2\w{0,30})\.so"

# a traceback frame of pip's own build of a package: its source folder, its isolated build environment, setuptools'
# caller; a setup.py run by "setup.py egg_info" (pip's metadata step) counts too
PIP_BUILD_FRAME = r"pip-req-build|pip-build-env|pip-install-|<pip-setuptools-caller>"
PIP_METADATA_RUN = r"setup\.py['\"]?,? (?:egg_info|bdist_wheel)|Preparing metadata|Getting requirements to build"
# the first step when a Python error was raised inside pip's build of a package (not the user's code)
SETUP_PY_STEP = ("{exception} was raised by {package_pip}'s own setup.py (or its build backend) while pip built it, not "
                 "by your code: the package's build script failed (its bug, or an environment variable or file it "
                 "expects). Install a released wheel of {package_pip} (pip install --only-binary :all: ...) or another "
                 "version of it, or set what its setup.py reads, as the project documents.")

# words pip reads as a package name when a command line is mistyped
PIP_WORDS = frozenset({"install", "pip", "python", "python3", "sudo", "conda", "-m", "git"})

# the linker's missing libraries
LINKER_LIBRARIES: dict[str, str] = {
    "cuda": "-lcuda is the driver's library, which a machine without a driver (a login node, a container) lacks: "
            "link against the toolkit's stub (export LIBRARY_PATH=$CUDA_HOME/lib64/stubs:$LIBRARY_PATH) and rerun.",
    "cudart": "the CUDA runtime is not on the linker's path: set CUDA_HOME to the toolkit and add $CUDA_HOME/lib64 "
              "to LIBRARY_PATH.",
    "*": "install its development package (lib{lib}-dev / conda's {lib}) or add its folder to LIBRARY_PATH, then "
         "rerun.",
}

# what the first compiler error usually means, by where the build runs
COMPILER_ADVICE = {
    "windows": "A source error under MSVC usually means the project's code assumes gcc or POSIX (Windows is not "
               "supported, or only through a patch): install a prebuilt Windows wheel if the project has one, or "
               "build under WSL / Linux.",
    "*": "A missing file or tool in that line is installed; an error in the project's own source means it does not "
         "support this compiler, CUDA or torch: use the versions the project names, or its prebuilt wheel.",
}
