"""The environment: installed versions that do not fit together, native libraries, missing packages, installs.

Besides the entries, three small tables the live checks use (``nbdebug.core.explain._live``):

- ``ADDED_IN``: attributes of torch / torchvision the code may use that a release added (or removed), with the
  release, so that ``module 'torch' has no attribute 'compiler'`` says "added in 2.1; installed: 1.13";
- ``NUMPY_2_FROM``: the first torch release whose wheels are built against NumPy 2 (older ones break on it);
- ``CUDA_INDEXES``: the CUDA wheel indexes pytorch.org lists for each torch release (for a CPU-only build's
  install command).  Companion pins (torchvision, torchaudio -> torch) are not tabled: they are read from the
  installed packages' own metadata (``importlib.metadata.requires``), which states them exactly.
"""

from __future__ import annotations

from nbdebug.core._findings import Fix
from nbdebug.core.knowledge._schema import Entry

__all__ = ["ENTRIES", "IMPORT_STEP", "IMPORT_STEP_TORCH", "ADDED_IN", "NUMPY_2_FROM", "CUDA_INDEXES", "COMPANIONS", "RELEASES", "LIBRARIES_STEP",
           "LIBRARIES_CODE", "NINJA_STEP", "TPU_LIBRARY_STEP", "REQUIREMENT_CHECKED"]

RELEASES = "https://github.com/pytorch/pytorch/releases"
_PREVIOUS = "https://pytorch.org/get-started/previous-versions/"
_LOCALLY = "https://pytorch.org/get-started/locally/"
_VISION_COMPAT = "https://github.com/pytorch/vision#installation"

# (dotted name, release that added it, release that removed it or "") -- from the release notes (RELEASES)
ADDED_IN: tuple[tuple[str, str, str], ...] = (
    ("torch.compile", "2.0", ""),
    ("torch.func", "2.0", ""),
    ("torch.set_default_device", "2.0", ""),
    ("torch.nn.functional.scaled_dot_product_attention", "2.0", ""),
    ("torch.compiler", "2.1", ""),
    ("torch.float8_e4m3fn", "2.1", ""),
    ("torch.float8_e5m2", "2.1", ""),
    ("torch.nn.attention", "2.2", ""),
    ("torch.distributed.device_mesh", "2.2", ""),
    ("torch.utils._pytree.register_pytree_node", "2.2", ""),
    ("torch.get_default_device", "2.3", ""),
    ("torch.uint16", "2.3", ""),
    ("torch.uint32", "2.3", ""),
    ("torch.amp.GradScaler", "2.3", ""),
    ("torch.nn.RMSNorm", "2.4", ""),
    ("torch.library.custom_op", "2.4", ""),
    ("torch.library.register_fake", "2.4", ""),
    ("torch.xpu", "2.4", ""),
    ("torch.distributed.tensor", "2.5", ""),
    ("torch.jit._script_if_tracing", "1.8", ""),
    ("torch._six", "", "2.0"),
    ("torchvision.transforms.functional_tensor", "", "0.17"),
    ("torchvision.transforms.v2", "0.15", ""),
)

# torch < 2.3 wheels were built against NumPy 1.x: importing NumPy 2 there breaks (PyTorch 2.3 release notes)
NUMPY_2_FROM = "2.3"

# CUDA indexes of download.pytorch.org per torch release (pytorch.org/get-started/previous-versions)
CUDA_INDEXES: dict[str, tuple[str, ...]] = {
    "2.0": ("cu117", "cu118"), "2.1": ("cu118", "cu121"), "2.2": ("cu118", "cu121"), "2.3": ("cu118", "cu121"),
    "2.4": ("cu118", "cu121", "cu124"), "2.5": ("cu118", "cu121", "cu124"), "2.6": ("cu118", "cu124", "cu126"),
    "2.7": ("cu118", "cu126", "cu128"), "2.8": ("cu126", "cu128", "cu129"),
}

# packages whose installed versions are shown, and checked against each other's declared requirements
COMPANIONS = ("torch", "torchvision", "torchaudio", "numpy", "transformers", "accelerate", "peft", "diffusers",
              "lightning", "pytorch-lightning", "deepspeed", "timm", "xformers", "bitsandbytes", "torch-xla")

_SEE_VERSIONS = Fix("See what is installed in this kernel's environment",
                    "import sys, importlib.metadata as md\nprint(sys.executable)\n"
                    "for p in ('torch', 'torchvision', 'torchaudio', 'numpy'):\n"
                    "    try: print(p, md.version(p))\n    except md.PackageNotFoundError: print(p, '-')")

# the words of a notice that the run goes on without an optional package (a slower path, a feature turned off)
_GOES_ON = (r"(?i:fall(?:ing)? ?back|instead|optional|will only|only (?:run|use)|for (?:faster|better|speed)|"
            r"to speed (?:it )?up|\bdisabl)")

ENTRIES: tuple[Entry, ...] = (
    Entry(
        slug="numpy_abi",
        title="A compiled package was built for another NumPy",
        summary=("A package with compiled code (torch, torchvision, an extension, pandas, ...) was built against a "
                 "different NumPy than the one installed[[ (built for API {built_api}, installed {numpy_api})]], so it "
                 "cannot load."),
        keywords=("api version", "abi version", "multiarray failed", "_array_api", "size changed", "binary incompatibility",
                  "multiarray_umath failed"),
        patterns=(
            r"compiled against (?:the )?(?:API|ABI) version 0x[0-9a-fA-F]+ but this version of numpy is 0x[0-9a-fA-F]+",
            r"numpy\.core\.(?:multiarray|_multiarray_umath) failed to import",
            r"_ARRAY_API not found",
            r"numpy\.(?:nd)?(?:array|dtype) size changed, may indicate binary incompatibility",
        ),
        priority=93,
        facts=((r"compiled against (?:the )?API version (?P<built_api>0x[0-9a-fA-F]+) but this version of numpy is "
                r"(?P<numpy_api>0x[0-9a-fA-F]+)", {"built_api": "str", "numpy_api": "str"}),),
        causes=(
            "NumPy 2 installed next to a package built for NumPy 1 (torch < 2.3, older extensions): pip upgraded NumPy "
            "for another package.",
            "An older NumPy than the one a package was built against (API version in the message: built > installed).",
        ),
        fixes=(
            Fix("Install a NumPy the compiled packages were built for", "pip install 'numpy<2'  # for torch < 2.3 and "
                "extensions built for NumPy 1\n# or upgrade the package: pip install -U torch torchvision"),
            _SEE_VERSIONS,
        ),
        first_step="Compare the installed NumPy with what torch and the failing package were built for: with torch "
        "older than 2.3, install numpy<2; otherwise upgrade the package named in the traceback.",
        sources=("https://numpy.org/devdocs/dev/depending_on_numpy.html", f"{RELEASES}/tag/v2.3.0"),
    ),
    Entry(
        slug="native_library_missing",
        title="A native library could not be loaded",
        summary=("A compiled library[[ ({library})]] that a package needs was not found or could not be loaded: the "
                 "package was built for other system libraries (CUDA, the C++ runtime) than this machine has."),
        keywords=("redistributable", "cannot open shared object", "dll load failed", "library not loaded", "winerror 126",
                  "image not found", "error loading", "incompatible architecture", "or one of its dependencies",
                  "could not load this library", "requires module: torchaudio", "glibc", "cxxabi_"),
        patterns=(
            r"Microsoft Visual C\+\+ Redistributable is not installed",
            # a macOS build for the other CPU (an x86_64 Python under Rosetta, or the reverse)
            r"mach-o file, but is an incompatible architecture",
            r"(?<![\w.+-])[\w.+-]{1,100}\.so(?:\.[0-9]+)*: cannot open shared object file",
            r"DLL load failed",
            r"Library not loaded: ",
            r"\[WinError 126\]",
            r"\bimage not found\b",
            r"Error loading \"[^\"\n]{1,300}\.dll\" or one of its dependencies",
            # Windows' ctypes (Python 3.8+) naming a package's own .pyd/.dll, and torchaudio's loader
            r"Could not find module '[^'\n]{1,300}\.(?:pyd|dll)' \(or one of its dependencies\)",
            r"Could not load this library: [^\n]{1,300}\.(?:so|pyd|dll|dylib)\b",
            # torchaudio's functions when its compiled extension did not load (its warning says so at import)
            r"requires module: torchaudio\._torchaudio\b",
            # a binary built against a newer C/C++ runtime than the system's (an old libstdc++ in a conda env)
            r"version [`'](?:GLIBCXX|GLIBC|CXXABI)_[\d.]{1,12}' not found",
        ),
        priority=78,
        facts=((r"(?P<library>(?<![\w.+-])[\w.+-]{1,100}\.so(?:\.[0-9]+)*): cannot open shared object file",
                {"library": "str"}),
               (r"Error loading \"(?P<library>[^\"\n]{1,300}\.dll)\"", {"library": "basename"}),
               (r"Could not (?:find module '|load this library: )(?P<library>[^'\n]{1,300}\.(?:pyd|dll|so|dylib))",
                {"library": "basename"})),
        causes=(
            "A package built for a CUDA / C++ runtime this machine does not have (a CUDA wheel on a machine without "
            "the matching libraries, or a wheel for another platform).",
            "Two installs mixed in one environment (conda and pip copies of torch), so a library finds the wrong "
            "neighbour.",
            "On Windows, the Visual C++ Redistributable is missing.",
        ),
        fixes=(
            Fix("Reinstall the package that fails from one source, matching torch",
                "pip uninstall -y torch torchvision torchaudio\npip install torch torchvision torchaudio"),
            _SEE_VERSIONS,
        ),
        first_step="Look at which package imports the missing library (the traceback's last import) and reinstall "
        "it from one source, built for this torch and this platform.",
        sources=(_LOCALLY, "https://pytorch.org/docs/stable/notes/windows.html"),
    ),
    Entry(
        slug="undefined_symbol",
        title="A compiled extension does not match the installed torch",
        summary=("A compiled module was built against another version of torch (or of a library) than the one "
                 "installed: a symbol it needs[[ ({symbol})]] does not exist in the loaded library."),
        keywords=("undefined symbol", "symbol not found", "procedure could not be found", "winerror 127",
                  "not available in this library", "with link time reference"),
        patterns=(
            r"undefined symbol: ?_?\w+",
            # the loader's line naming the shared object, the symbol's name cut off
            r"\.so(?:\.[\d.]{1,20})?: undefined symbol",
            r"Symbol not found: \(?_?\w+",
            # the loader's wording for a versioned symbol the library found first does not define (two builds of one
            # library on the path: libcublas.so.11 with another libcublasLt.so.11)
            r"symbol \w{1,200} version \S{1,100} not defined in file \S{1,200} with link time reference",
            r"The specified procedure could not be found",
            r"\[WinError 127\]",
            # TensorFlow's TPU loader (in torch_xla, TensorFlow, JAX) finding a function missing from the libtpu it
            # loaded: two packages' libtpu builds in one process, or the VM's own /lib/libtpu.so
            r"tpu_library_init_fns\.inc:\d+\] ?\w{1,200} not available in this library|\bTpu\w{1,200} not available in this library",
        ),
        priority=80,
        facts=((r"(?:undefined symbol|Symbol not found): ?\(?(?P<symbol>_?\w{1,200})", {"symbol": "str"}),
               (r"symbol (?P<symbol>\w{1,200}) version \S{1,100} not defined in file", {"symbol": "str"}),
               (r"(?P<symbol>\bTpu\w{1,200}) not available in this library", {"symbol": "str"})),
        causes=(
            "torch was upgraded or downgraded after an extension (torchvision, torchaudio, xformers, flash-attn, "
            "apex, a custom CUDA op) was built or installed.",
            "The extension's wheel was built for another torch release than the one installed.",
            "conda's torch with MKL 2024.1 or newer (undefined symbol iJIT_NotifyEvent): pin mkl==2024.0.",
        ),
        fixes=(
            Fix("Install the companion packages that match this torch",
                "pip install --force-reinstall torchvision torchaudio  # pinned by torch's release"),
            Fix("Rebuild a source-built extension against the installed torch",
                "pip install --no-build-isolation --no-cache-dir --force-reinstall <extension>"),
            _SEE_VERSIONS,
        ),
        first_step="Find the package whose .so (or .dll) is named in the message and reinstall (or rebuild) it for the "
        "installed torch; torch's own library (under torch/lib) means reinstall torch itself in a clean environment. "
        "The live panel lists the installed versions and any pair that does not fit.",
        sources=(_VISION_COMPAT, "https://pytorch.org/tutorials/advanced/cpp_custom_ops.html",
                 "https://github.com/pytorch/pytorch/issues/123097"),
    ),
    Entry(
        slug="api_missing",
        title="The code needs another version of torch (or a library) than the installed one",
        summary=("The code uses[[ {missing}]], which the installed version does not have: the code was written for a "
                 "newer (or older) release."),
        keywords=("normal functioning of this module", "is installed but", "has no attribute", "removed in", "removed since",
                  "deprecated and", "no longer provides", "requires torch", "requires pytorch", "requires transformers", "requires numpy", "requires accelerate", "requires diffusers", "requires peft", "requires torchvision", "requires xformers", "requires triton", "versionconflict", "has no attribut", "cannot import name", "no module named 'torch", "no module named 'torchvision", "no module named '",
                  "can't get attribute"),
        patterns=(
            r"module '[\w.]{1,200}' has no attribute '\w+'",
            # a library naming the release that removed what the code uses ("`np.float_` was removed in the NumPy 2.0
            # release")
            r"(?:was|were|has been|have been) removed in (?:the )?(?:[\w-]{1,40} )?v?\d{1,4}(?:\.\d{1,4}){0,2}\b",
            # ... or since a release, or with the words a deprecation ends in ("is deprecated and no longer
            # supported", "no longer provides `X`; it moved to `y`")
            r"(?:was|were|has been|have been) removed since (?:[A-Za-z][\w-]{0,40} )?v?\d{1,4}(?:\.\d{1,4}){0,2}\b",
            r"\bis deprecated and (?:is )?(?:no longer supported|has been removed|was removed)\b",
            r"\bno longer provides `?\w+`?; it (?:has )?moved to\b",
            r"(?i:requires) (?:torch|pytorch|transformers|numpy|accelerate|diffusers|peft|torchvision|xformers|triton)\s?(?:version\s?)?(?:>=|==|>|<=|~=)\s?[0-9]",
            r"\bVersionConflict\b",
            r"[\w.-]{1,40}(?:>=|==|<=|~=|>|<)[\w.]{1,20} is required for a normal functioning of this module, but found",
            r"[\w.-]{1,40} version [\w.+-]{1,30} is installed but [\w.-]{1,40} requires [\w.-]{1,40} ?(?:>=|==|<=|<|>|~=)",
            r"module '(?:torch|torchvision|torchaudio|numpy)(?:\.\w+)*' has no attribut",
            # a name a library's release added or removed (or a package too old to have it)
            r"cannot import name '?\w+'?",
            # a pickle written by a newer torch (torch._utils._rebuild_tensor_v2 and the like)
            r"Can't get attribute '\w+' on <module 'torch(?:\.\w+)*'",
            # any installed package's module (its file under site-packages): a pickle written by another release of it
            r"Can't get attribute '\w+' on <module '[\w.]{1,200}' from '[^'\n]{0,300}[/\\](?:site|dist)-packages[/\\]",
            # a class a pickle names that the installed library's module lacks (a model saved by a newer release)
            r"Can't get attribute '\w+' on <module '(?:ultralytics|transformers|diffusers|timm|peft|accelerate|mmcv|"
            r"mmdet|mmengine|torchmetrics|pytorch_lightning|lightning)(?:\.\w+)*'",
            r"cannot import name '\w+' from '(?:torch|torchvision|torchaudio)(?:\.\w+)*'",
            # not torch._C / torch.version, which every release has: the build generates them, so their absence is
            # a source checkout run unbuilt or a broken install, not a release that lacks them
            r"No module named '(?!torch\.(?:_C|version)')(?:torch|torchvision|torchaudio)\.[\w.]+'",
            # a submodule missing from a library that did import (Python names the dotted path only then): a module
            # the installed release moved or removed
            # (not a module the package's build generates -- version, _C, _ext --: a source tree never built)
            r"No module named '(?:transformers|diffusers|accelerate|peft|timm|huggingface_hub|datasets|"
            r"pytorch_lightning|lightning|xformers|triton|numpy|scipy|sklearn|PIL|ultralytics|torchmetrics|torchtext)"
            r"\.(?!(?:version|_version|_C|_ext)')[\w.]+'",
        ),
        priority=44,
        facts=(
            (r"module '(?P<owner>(?:torch|torchvision|torchaudio|numpy)(?:\.\w+)*)' has no attribute '(?P<attr>\w+)'",
             {"owner": "str", "attr": "str"}),
            (r"cannot import name '(?P<attr>\w+)' from '(?P<owner>(?:torch|torchvision|torchaudio)(?:\.\w+)*)'",
             {"owner": "str", "attr": "str"}),
            (r"No module named '(?P<owner>(?:torch|torchvision|torchaudio|transformers|diffusers|accelerate|peft|timm|"
             r"huggingface_hub|datasets|pytorch_lightning|lightning|xformers|triton|numpy|scipy|sklearn|PIL))"
             r"\.(?P<attr>[\w.]+)'",
             {"owner": "str", "attr": "str"}),
        ),
        causes=(
            "The installed torch (or torchvision) is older than the code expects: the attribute was added later.",
            "The installed release is newer and removed it (torch._six in 2.0, torchvision.transforms.functional_tensor "
            "in 0.17, numpy.float in NumPy 1.24).",
            "torchvision newer than torch: torchvision calls a torch function that this torch lacks.",
            "No release of the library has the name: the code, a guide or a generated snippet invented it.",
        ),
        fixes=(
            Fix("Install the release the code was written for (its requirements file), with matching companions",
                "pip install -U torch torchvision torchaudio  # code newer than the install\n"
                "# or the release the code pins (its requirements file) with that release's torchvision"),
            _SEE_VERSIONS,
        ),
        first_step="Look the name up in the library's documentation and changelog: if no release has it, the code "
        "(or the guide it follows) names an API that does not exist, so use the documented one. If a release added or "
        "removed it, compare that release with the installed version (the live panel shows it) and install the release "
        "the code needs, with its matching torchvision/torchaudio.",
        sources=(RELEASES, _VISION_COMPAT, "https://numpy.org/doc/stable/release/1.24.0-notes.html"),
    ),
    Entry(
        slug="package_missing",
        title="A package is not installed in the kernel's environment",
        summary="Python cannot import[[ '{module}']]: it is not installed in the environment this kernel or script runs in.",
        keywords=("please install", "no module name", "were not found in your environment", "seems to be not installed", "you tried to install", "no module named", "pip install", "but it was not found", "command not found", "未找到命令", "not recognized as", "an internal or external command", ": not found", ":not found",
                  "not installed", "not been installed", "nomodulename", "is not defined", "commandnotfoundexception",
                  "项识别为", "コマンドレット", "als name eines cmdlet"),
        patterns=(
            # not the optional import a library reports and goes on without ("Error caught was: No module named")
            # also as users retype it ("No Module name 'ultralytics'")
            r"(?<!caught was: )No ?module ?named? ?'?[\w.]+'?",
            # a library's own check raised as the error ("Error: PEFT not installed", "ImportError: DeepSpeed is not
            # installed"), not a log line saying it goes on without one; not CUDA's or a driver's
            r"(?:Error|Exception): (?!(?i:cuda|nvidia|driver|gpu|redistributable|triton|nccl|mpi|cudnn)\b)[A-Za-z][\w-]{1,40} "
            r"(?:is |has )?not (?:been )?installed\b",
            # PyPI's "pytorch" is a placeholder that refuses to install: the package's pip name is torch
            r"You tried to install \"pytorch\"\. The package named for PyTorch is \"torch\"",
            r"(?i:please install|requires)[^\n]{0,160}`?pip install [\w\[\]'\"<>=.,-]+",
            r"requires the [\w-]+ library but it was not found in your environment",
            r"the package [\w-]+ seems to be not installed",
            r"requires the following packages that were not found in your environment",
            r"(?:: command not found|：未找到命令)",
            # a project's notice that an optional package is missing, when it is all the text says (its last line)
            r"(?m)^(?!(?i:cuda|nvidia|driver|gpu|redistributable|triton|nccl|mpi|cudnn|apex)\b)[A-Z][\w.-]{1,30}"
            r"(?: v?[\w.]{1,10})? (?:is )?not installed[.!]?[ \t]*\Z",
            # zsh (macOS's shell) names the command after the message
            r"\bcommand not found: [\w.-]{1,60}",
            # dash (/bin/sh), PowerShell and cmd.exe saying the same: the package that provides the command is not in
            # the active environment (or the environment is not activated)
            r"\bsh: ?\d{1,6}: ?[\w.-]{1,60}: ?not found",
            r"The term '[^'\n]{1,200}' is not recognized as (?:the )?name of a cmdlet",
            # ... and the error record PowerShell prints under it (all that is left when the first line is cut)
            r"ObjectNotFound: \((?P<command>[^:()\n]{1,200}):String\) \[[^\]\n]{0,100}\], CommandNotFoundException",
            r"'[^'\n]{1,200}' is not recognized as an internal or external command",
            r"[\"'][^'\"\n]{1,200}[\"'] is not (?:recognized as )?an internal or external command",
            # PowerShell's refusal in other display languages (zh-CN, ja, de), the command the user typed; not cmd.exe's
            # ("'x' 不是内部或外部命令"), whose name is as often a word of a misread batch file or of a URL split at "&"
            # ('as', 'userid': public probes of the eighth wild round) as a program
            r"无法将[“\"']?[A-Za-z][\w.-]{1,60}[”\"']?项识别为 ?cmdlet",
            r"用語 '[A-Za-z][\w.-]{1,60}' は、コマンドレット",
            r"Die Benennung \"[A-Za-z][\w.-]{1,60}\" wurde (?:nicht )?als Name eines Cmdlet",
            # a library's check that names the package it needs and then how to install that same package ("torchao not
            # installed. Please follow the instructions at <url> to install torchao.")
            # (not a notice that the run goes on without it: "...; falling back to sdpa", "using X instead", "Will only
            # run the manual PyTorch version. Please install flash-attn for faster inference", nor a line that is a
            # warning: voicebox#460)
            r"(?<!Warning: )(?<!WARNING: )(?<!WARN: )\b(?P<module>(?!(?i:cuda|nvidia|driver|gpu|redistributable|triton|"
            r"nccl|mpi|cudnn)\b)[A-Za-z][\w.-]{1,40}) "
            r"(?:is )?not (?:been )?installed\b(?:(?!" + _GOES_ON + r")[^\n]){0,300}"
            r"(?:\n(?:(?!" + _GOES_ON + r")[^\n]){0,300}){0,3}?\binstall (?:the )?(?P=module)\b"
            r"(?![^\n]{0,200}" + _GOES_ON + r")",
            # a project's own check that a package imports ("AssertionError: Please install mmdet to run the demo.")
            r"(?:Error|Exception): (?i:please install) (?![^\n]{0,120}(?i:cuda|nvidia|driver|gpu))[A-Za-z][\w.-]{1,40}",
            # a flag a module defines only when its optional import succeeded ("try: import accelerate;
            # is_accelerate_available = True except ImportError: pass"): the package is missing, not the code's name
            r"name '(?:is_(?P<optional>[a-z][a-z0-9_]{0,40})_available|_?[A-Z][A-Z0-9_]{0,40}_AVAILABLE|HAS_[A-Z][A-Z0-9_]{0,40})' "
            r"is not defined",
        ),
        exception_types=("ModuleNotFoundError",),
        priority=44,
        facts=((r"No module named '?(?P<module>[\w.]+)'?", {"module": "str"}),
               (r"name 'is_(?P<module>[a-z][a-z0-9_]{0,40})_available' is not defined", {"module": "str"})),
        causes=(
            "The package is installed in another environment than the one the kernel uses (a different python / "
            "conda env / venv).",
            "The package's pip name differs from its import name (cv2 = opencv-python, PIL = pillow, sklearn = "
            "scikit-learn, yaml = pyyaml).",
            "A project's own module run from another working directory (not on sys.path).",
        ),
        fixes=(
            Fix("Install into the kernel's own interpreter", "%pip install <package>  # in the notebook: the kernel's python"),
            Fix("See which interpreter runs", "import sys; print(sys.executable); print(sys.path)"),
        ),
        first_step="Install the package with %pip install in the notebook (or python -m pip with the interpreter that "
        "runs the script), using its pip name.",
        sources=("https://docs.python.org/3/library/exceptions.html#ModuleNotFoundError",
                 "https://packaging.python.org/en/latest/tutorials/installing-packages/"),
    ),
    Entry(
        slug="no_matching_wheel",
        title="pip found no build of the package that fits this Python, platform or the other packages",
        summary=("pip could not find a release of the package[[ ({package})]] built for this Python version and "
                 "platform."),
        keywords=("building torch", "building wheel for torch", "bdist_wheel for torch", 'name="torch"', "requires a different python", "satisfies the requirement", "no matching distribution", "not a supported wheel", "torch-0.1.2",
                  "install with miniconda", "suitable distribution", "provide packages for pypi"),
        patterns=(
            r"requires a different Python: [\d.]+ not in",
            r"Could not find a version that satisfies the requirement",
                  r"No matching distribution found for", r"is not a supported wheel on this platform",
                  # PyPI's placeholder of old: no wheel for this Python, so pip took the sdist that refuses
                  r"torch-0\.1\.2(?:\.post\d)?\.tar\.gz",
                  # pip building torch itself from source: no wheel fits this Python / platform
                  r"(?:Building|Running setup\.py bdist_wheel for) (?:wheel for )?torch\b[^\n]{0,40}(?:\.\.\. error|"
                  r"status 'error')",
                  r"setup\(name=\"torch\", version=\"0\.1\.2",
                  r"Please follow the instructions at http://pytorch\.org/ to install with miniconda",
                  r"Could not find suitable distribution for Requirement",
                  # the placeholder on PyPI that pip takes when no wheel fits (torch 0.x's days)
                  r"PyTorch does not currently provide packages for PyPI",
                  ),
        priority=70,
        facts=((r"No matching distribution found for (?P<package>[\w.\-]+)", {"package": "str"}),),
        causes=("The Python version is newer (or older) than the releases of the package support.",
                "Packages pinned to versions that require different versions of a third (torchvision pins one torch).",
                "A 32-bit Python, or an unsupported platform (e.g. torch wheels on an unsupported OS/CPU).",
                "A pinned version that was never published for this platform."),
        fixes=(Fix("Check the Python version against the package's supported versions",
                   "python -c \"import sys, platform; print(sys.version, platform.machine())\""),),
        first_step="Check python --version against the Python versions the package release supports (its PyPI page); "
        "use a supported Python or another release.",
        sources=("https://pypi.org/project/torch/", _PREVIOUS),
    ),
    Entry(
        # pip (or uv) naming installed or requested releases whose pins disagree: which versions fit together is the
        # question, not a build for this platform (no_matching_wheel)
        slug="pip_conflict",
        title="Installed packages pin versions of each other that do not fit together",
        summary=("pip found packages whose requirements disagree[[: {package} needs {requirement}]][[, but {installed} "
                 "is installed]]."),
        keywords=("dependency resolver", "has requirement", "which is incompatible", "resolutionimpossible",
                  "conflicting dependencies", "which is not installed", "no solution found"),
        patterns=(
            # pip's old resolver (the line can be cut after the pin, in a title)
            r"has requirement [\w.-]{1,60}(?:[<>=!~]=?|===)[^\s,]{1,40}",
            r"but you have [\w.-]+ [\w.+-]+ which is incompatible",
            r"ResolutionImpossible",
            # uv's resolver: no set of releases fits the pins and this platform
            r"No solution found when resolving dependencies",
            r"pip's dependency resolver does not currently take into account all the packages that are installed",
            r"Cannot install [^\n]{1,300} because these package versions have conflicting dependencies",
            r"requires [\w.-]{1,60}[<>=!~]=?[^\s,;]{1,40}(?:; [^\n]{1,120})?, which is not installed",
        ),
        priority=70,
        extra={"family": "install_build,environment_version"},
        facts=((r"(?P<package>[\w.-]{1,60} [\w.+-]{1,40}) (?:has requirement|requires) (?P<requirement>[\w.-]{1,60}"
                r"(?:[<>=!~]=?|===)[^\s,;]{1,40}),? but you(?:'ll| will)? have (?P<installed>[\w.-]{1,60} [\w.+-]{1,40})",
                {"package": "str", "requirement": "str", "installed": "str"}),),
        causes=("Packages installed one by one (torch first, then a torchvision that pins another torch), or from two "
                "indexes (a nightly torch with a stable torchvision).",
                "A project's requirements that pin versions which no release set satisfies together.",
                "pip's old resolver installing what it was told and only warning afterwards."),
        fixes=(Fix("Install the packages that pin each other in one command, at versions that fit",
                   "pip install torch==2.4.1 torchvision==0.19.1  # the pair the message names\npip check"),),
        first_step="Read the pin pip names (package X needs Y==v, but Y w is installed) and install the pair in one "
        "command at versions that fit together (torchvision and torchaudio from the same torch release), then run "
        "pip check; if the project pins both, follow its requirements file.",
        sources=("https://pip.pypa.io/en/stable/topics/dependency-resolution/", _PREVIOUS),
    ),
    Entry(
        slug="extension_build_failed",
        title="Building a compiled extension failed",
        summary=("Compiling a C++/CUDA extension failed (pip's build from source, or torch's JIT loader)[[: {reason}]]; "
                 "usually a missing compiler, build tool or CUDA toolkit, or a source tree that does not fit the "
                 "installed torch."),
        keywords=("could not build wheels", "metadata-generation-failed", "build wheel did not run", "ninja", "fatal error:", "error compiling objects", "failed with exit", "cuda_home", "failed building wheel", "building wheel", "visual c++", "nvcc", "unsupported gnu version",
                  "subprocess-exited-with-error", "legacy-install-failure", "command '", "rust compiler", "installable wheels",
                  "error building extension", "cuda_home does not exist", "command errored out",
                  "failed with error code", "running setup.py install", "error:", "错误", "エラー", "error c",
                  "not declared in this scope", "is undefined", "cmake error", "exit status", "command line error", "lnk",
                  "ninja is required", "ds_opt_adam"),
        patterns=(
            r"Could not build wheels for [\w.-]+",
            r"metadata-generation-failed",
            r"Getting requirements to build wheel did not run successfully",
            r"ninja: build stopped",
            r"fatal error: [\w/.+-]{1,200}\.h: No such file or directory",
            r"Error compiling objects for extension",
            # torch.utils.cpp_extension's build step, as the CalledProcessError it raises names it
            r"Command '\['ninja', '-v'",
            r"error: command '[^'\n]{1,300}' failed with exit (?:code|status) \d+",
            r"(?P<reason>CUDA_HOME environment variable is not set)",
            r"CUDA_HOME does not exist, unable to compile CUDA op",
            # older pips' wordings of a build step that failed
            r"ERROR: Command errored out with exit status \d+",
            r"Command \"python setup\.py (?:egg_info|install|bdist_wheel|develop)\" failed with error code \d+",
            r"Running setup\.py install for [\w.-]+ \.\.\. error",
            r"Error building extension '\w+'",
            r"Failed building wheel for [\w.\-]+",
            r"Microsoft Visual C\+\+ 14\.0 (?:or greater )?is required",
            r"nvcc(?: fatal)?\s*: (?:Unsupported gpu architecture|not found)",
            r"unsupported GNU version! gcc versions later than \d+ are not supported",
            r"error: command '[^'\n]{1,200}(?:gcc|g\+\+|nvcc|cl\.exe)' failed",
            r"Failed to build installable wheels for some pyproject\.toml based projects",
            # pip's own summary of a build step that failed, and a Rust toolchain a package needs to build
            r"(?m)^error: subprocess-exited-with-error",
            # pip 22's wording of a setup.py install that failed to build
            r"(?m)^error: legacy-install-failure",
            r"error: can't find Rust compiler",
            # a C++ / CUDA compiler's own diagnostic (gcc, clang, nvcc, MSVC; also in the compiler's language): the
            # build of an extension, whichever tool ran it (not torch.compile's generated code: the compile family)
            r"[\w/\\-]\.(?:cc|cpp|cxx|cu|cuh|hpp|h|c)(?::\d{1,7}){1,2}: ?(?:fatal )?(?:error|错误|エラー)"
            r" ?[:：]",
            r"\.cu\(\d{1,7}\): error: ",
            r"\.(?:cpp|cu|cc|h|cuh)\(\d{1,7}\): (?:fatal )?error C\d{4}",
            r"[\'‘`]\w{1,100}[\'’] was not declared in this scope",
            r"identifier \"\w{1,100}\" is undefined",
            # CMake configuring the build, the linker, and nvcc refusing an option (a GPU architecture it does not know)
            r"CMake Error at [^\n]{1,300}:\d{1,7} ",
            r"\bld returned \d{1,3} exit status",
            r"nvcc fatal\s{0,8}: ",
            r"(?m)^(?:[\w.-]{0,40}-)?(?:gcc|g\+\+|cc|c\+\+|clang|clang\+\+)(?:-\d{1,2})?: (?:fatal )?error: ",
            r"Command line error D\d{4}",
            r"fatal error LNK\d{4}",
            r"Ninja is required to load C\+\+ extensions",
            # DeepSpeed's CPU Adam whose op was never built (its JIT build failed, or the wheel has no ops): the
            # half-made optimizer has no handle to the op (deepspeed issues 1846, Megatron-DeepSpeed 333)
            r"'DeepSpeed\w{0,40}Adam' object has no attribute 'ds_opt_adam'",
        ),
        priority=68,
        facts=((r"(?P<reason>CUDA_HOME environment variable is not set|Microsoft Visual C\+\+ 14\.0[^\n]{0,40}"
                r"|Ninja is required to load C\+\+ extensions"
                r"|unsupported GNU version[^\n]{0,80}|Unsupported gpu architecture '?\w+'?)", {"reason": "str"}),),
        causes=("No prebuilt wheel matched (Python, torch or CUDA version), so pip compiled from source.",
                "The CUDA toolkit (nvcc) or a C++ compiler is missing, or its version is not supported by this CUDA.",
                "The extension's source does not support the installed torch release."),
        fixes=(Fix("Prefer a prebuilt wheel that matches torch and CUDA (see the project's install table)",
                   "pip install <package> --no-build-isolation  # after installing torch, so the build sees it"),
               Fix("Point the build at the CUDA toolkit", "export CUDA_HOME=/usr/local/cuda\nnvcc --version")),
        first_step="Read the first compiler error in the build log (not the last line): a missing CUDA_HOME/nvcc or "
        "compiler means install it; otherwise use a prebuilt wheel for the installed torch.",
        sources=("https://pytorch.org/tutorials/advanced/cpp_custom_ops.html",
                 "https://packaging.python.org/en/latest/tutorials/installing-packages/"),
    ),
)

# The first step of ``extension_build_failed`` when torch's JIT extension loader (cpp_extension.load) finds no ninja:
# nothing was compiled yet, and no wheel applies.
# undefined_symbol's first step when the TPU library's loader names the function missing from the libtpu it loaded
# (pytorch/xla #3786: TensorFlow, imported by torch.utils.tensorboard, loading torch_xla's libtpu)
TPU_LIBRARY_STEP = ("Make one TPU library serve the process: do not let TensorFlow load its own (set TPU_LOAD_LIBRARY=0 "
                    "before importing tensorflow or torch.utils.tensorboard, or uninstall tensorflow), do not mount or "
                    "preload the VM's /lib/libtpu.so next to the libtpu torch_xla installed, and use the libtpu release "
                    "that matches torch_xla.")
NINJA_STEP = ("Install ninja (%pip install ninja), the build tool torch's JIT extension loader (torch.utils.cpp_extension"
              ".load) runs, then rerun: nothing was compiled yet.")

# The first step of ``import_failed`` when torch itself fails inside its own import.
IMPORT_STEP_TORCH = ("Print where torch is installed and which versions pip sees (pip list | grep -i torch): torch failing "
                     "inside its own import is a broken or mixed install (two copies, files of two releases, a build "
                     "for another Python or CUDA); uninstall torch until pip finds none, install it once with the "
                     "command from pytorch.org, and restart.")
# The first step of ``import_failed`` for a torch companion (built against one torch release), filled with the
# import name and the distribution name pip knows it by.
IMPORT_STEP_COMPANION = ("Print the installed versions of {dist} and torch (pip list | grep -i -E 'torch|{dist}') and "
                         "check them against the pairs {dist}'s release notes name; reinstall the {dist} release built "
                         "for the installed torch and Python (pip install --force-reinstall {dist}==<that release>).")
# The first step of ``import_failed`` for any other package.
IMPORT_STEP = ("Print the installed version of {dist} and of the packages it names in the message (pip show {dist}): "
               "importing {package} failed inside its own code, so the install is broken or does not fit the Python "
               "or the other packages installed; reinstall it (pip install --force-reinstall {dist}) and restart the "
               "kernel.")

# Packages built against one torch release: their import fails when the installed torch is another.
TORCH_COMPANIONS = frozenset({"torchvision", "torchaudio", "torchtext", "torchdata", "torch_xla", "xformers", "triton",
                              "torch_scatter", "torch_sparse", "torch_geometric", "torch_cluster", "torchrec",
                              "flash_attn", "apex", "bitsandbytes", "deepspeed", "detectron2", "mmcv", "pytorch3d",
                              "torch_tensorrt", "fbgemm_gpu", "functorch", "torchao", "vllm", "kornia"})
# Import names whose distribution (what pip installs) is named otherwise.
DISTRIBUTIONS: dict[str, str] = {
    "PIL": "Pillow", "cv2": "opencv-python", "sklearn": "scikit-learn", "yaml": "PyYAML", "skimage": "scikit-image",
    "bs4": "beautifulsoup4", "attr": "attrs", "google": "protobuf", "dateutil": "python-dateutil",
    "dotenv": "python-dotenv", "Crypto": "pycryptodome", "serial": "pyserial", "fitz": "PyMuPDF", "magic": "python-magic",
    "pytorch_lightning": "pytorch-lightning", "huggingface_hub": "huggingface-hub", "flash_attn": "flash-attn",
    "torch_xla": "torch-xla", "lightning_fabric": "lightning-fabric", "sentence_transformers": "sentence-transformers",
    "torch_geometric": "torch-geometric", "torch_scatter": "torch-scatter", "torch_sparse": "torch-sparse",
    "mpl_toolkits": "matplotlib", "jwt": "PyJWT", "docx": "python-docx", "git": "GitPython", "OpenSSL": "pyOpenSSL",
}

ENTRIES += (
    Entry(
        slug="import_failed",
        title="A package failed while importing its own parts",
        summary=("Importing {package} failed inside {package} itself[[ ({where})]]: the package is installed, but a "
                 "part of it (usually compiled code) does not load with the torch, Python or libraries installed."),
        causes=("A package built for another torch (torchvision, torchaudio, an extension) than the installed one.",
                "A package built for another Python or NumPy, or a broken install (two copies, a half-finished "
                "upgrade)."),
        fixes=(Fix("Reinstall it (a torch companion: the release for your torch)", "pip install --force-reinstall "
                   "<package>"),),
        first_step="Print the installed version of the package that failed (and of torch, for a package built "
        "against torch), and reinstall the release of that package that fits the installed Python and packages.",
        sources=(RELEASES, _VISION_COMPAT),
        extra={"family": "environment_version"},
    ),
    Entry(
        slug="module_shadowed",
        title="A package was imported while it was still being imported (a file named like it, or a cycle)",
        summary=("Python found[[ '{module}']] only partly initialised: a file or folder of the project has the "
                 "package's name (torch.py, transformers/, numpy.py) and is imported instead of it, or two modules "
                 "import each other."),
        keywords=("partially initialized module",),
        patterns=(r"partially initialized module '[\w.]{1,200}'",),
        priority=70,
        extra={"family": "user_code_python,environment_version"},
        facts=((r"partially initialized module '(?P<module>[\w.]{1,200})'", {"module": "str"}),),
        causes=("A script or folder in the working directory named like the package (torch.py, random.py, "
                "transformers.py), which Python imports first.",
                "A broken or mixed install: files of two releases of the package in one site-packages (an upgrade "
                "over an old copy, pip and conda both installing it), so its own modules import each other wrongly.",
                "Two of the project's modules importing each other at import time."),
        fixes=(Fix("See which file Python imports", "import importlib.util\n"
                   "print(importlib.util.find_spec('torch').origin)  # should be inside site-packages"),),
        first_step="Print where the module comes from (importlib.util.find_spec(name).origin): a file of the project "
        "named like the package is to be renamed (and its __pycache__ deleted); inside site-packages, the install "
        "is broken or mixed: uninstall the package until pip finds none left, then install it once, and restart.",
        sources=("https://docs.python.org/3/reference/import.html#the-module-search-path",),
    ),
    Entry(
        slug="namespace_package",
        title="Python imported a folder named like the package, not the installed package",
        summary=("Python imported[[ '{module}']] from no file ('unknown location'): it found a folder of that name "
                 "without an __init__.py on the path (a cloned repository, a data folder, a leftover of an "
                 "uninstall), or the package is not installed here, so none of its names exist[[ ('{name}' among "
                 "them)]]."),
        keywords=("(unknown location)",),
        patterns=(r"cannot import name '?\w{1,200}'? from '[\w.]{1,200}' \(unknown location\)",),
        priority=70,  # more than a name missing from a release (api_missing): no release was imported at all
        extra={"family": "environment_version,user_code_python"},
        facts=((r"cannot import name '?(?P<name>\w{1,200})'? from '(?P<module>[\w.]{1,200})'",
                {"name": "str", "module": "str"}),),
        causes=("A folder named like the package in the working directory or on sys.path (the package's cloned "
                "repository, a project folder), which Python imports as an empty namespace package.",
                "The package is not installed in this environment (only a folder of its name is on the path), or an "
                "uninstall left its folder behind without its files."),
        fixes=(Fix("See where Python finds it", "import importlib.util\n"
                   "print(importlib.util.find_spec('<package>').submodule_search_locations)  # the folder(s) it uses"),
               Fix("Install it, or run from another directory", "pip install <package>  # or cd elsewhere / rename "
                   "the folder")),
        first_step="Print where Python finds the package (importlib.util.find_spec(name).submodule_search_locations): "
        "a folder of the project or a cloned repository is to be renamed or left (run from another directory, or "
        "install that checkout with pip install -e .); with no such folder, install the package in this environment.",
        sources=("https://docs.python.org/3/reference/import.html#namespace-packages",),
    ),
    Entry(
        slug="cli_usage",
        title="A command-line tool rejected its arguments",
        summary=("The command[[ `{prog}`]] rejected its command line and stopped before doing anything[[ ({what})]]. "
                 "Either the command line has a typo, or it was copied from documentation for another release of the tool "
                 "(or another package's command of the same name comes first on PATH)."),
        # argparse's "prog: error: argument --x: invalid int value", click's "Error: No such command 'run'."
        keywords=(": error: argument", ": error: unrecognized arguments", ": error: the following arguments",
                  "error: no such command", "error: no such option", "error: got unexpected extra argument",
                  "error: invalid value for"),
        patterns=(r"^[\w.-]{1,100}: error: (?:argument [\w./-]{1,200}: (?:invalid|expected|not allowed|ignored|"
                  r"conflicting)|unrecognized arguments: |the following arguments are required: )",
                  r"^Error: (?:No such (?:command|option)|Got unexpected extra arguments?|Invalid value for) "),
        priority=30,  # below every error a program raised: a usage line is printed before anything runs
        # (its first step, read the error under the usage, is the step for a typo too, which labels file as "other":
        # an em dash typed for "--", tune11 q010)
        extra={"family": "environment_version,library_api_misuse,other"},
        facts=((r"^(?P<prog>[\w.-]{1,100}): error: ", {"prog": "str"}),
               (r"^[Uu]sage: (?P<prog>[\w.-]{1,100}) ", {"prog": "str"}),
               (r"(?:error: |Error: )(?P<what>(?:argument [\w./-]{1,200}|unrecognized arguments: [^\n]{1,200}|No such "
                r"(?:command|option):? [^\n]{1,200}|Got unexpected extra arguments? [^\n]{1,200}|Invalid value for "
                r"[^:\n]{1,200}))", {"what": "str"})),
        causes=("An option, value or command that the installed release of the tool does not have: the command was "
                "copied from a README or tutorial written for another release.",
                "Another package installed a command of the same name, which comes first on PATH.",
                "A typo, or a value of another type than the option takes."),
        fixes=(Fix("See what the installed tool accepts", "<command> --help\n<command> <subcommand> --help\n"
                   "which <command>  # whose command it is; pip show <package> for its version"),),
        first_step="Read the error line under the usage: it names the option, value or command rejected. Run the "
        "command with --help and compare with the line you copied: what the docs name but --help lacks belongs to "
        "another release of the tool (or another package's command of that name, see `which`): install the release "
        "the docs are for, or use what --help lists.",
        sources=("https://docs.python.org/3/library/argparse.html#exiting-methods",
                 "https://click.palletsprojects.com/en/stable/exceptions/"),
    ),
    Entry(
        slug="torch_unbuilt",
        title="torch was imported without its build-generated files (a source checkout, or a broken install)",
        summary=("torch's[[ '{module}']] module is missing: every release has it, because building torch generates it "
                 "(the compiled torch._C, torch/version.py). Python imported a torch folder that was never built "
                 "-- usually the PyTorch repository in the working directory -- or an install with files missing."),
        keywords=("no module named 'torch._c'", "no module named 'torch.version'", "failed to load pytorch c ext"),
        patterns=(r"No module named '(?:torch\._C|torch\.version)'",
                  # torch's own __init__ when it finds the repository's torch/_C folder instead of the extension
                  r"Failed to load PyTorch C extensions"),
        priority=60,  # more than a missing package: it names torch's own build
        extra={"family": "install_build,environment_version"},
        facts=((r"No module named '(?P<module>torch\.(?:_C|version))'", {"module": "str"}),),
        causes=("Python runs in the PyTorch repository (or a folder holding its torch/ directory), which shadows the "
                "installed torch and has no compiled parts.",
                "A source build that did not finish (python setup.py install in the source tree, a CI job that "
                "imports the tree before building it).",
                "An install with files missing (an interrupted upgrade, two copies of torch)."),
        fixes=(Fix("See which torch Python imports", "import importlib.util\n"
                   "print(importlib.util.find_spec('torch').origin)  # should be inside site-packages"),
               Fix("In a source checkout: build it in place, or run from another directory",
                   "python setup.py develop  # or: cd .. && python -c 'import torch'")),
        first_step="Print where torch comes from (importlib.util.find_spec('torch').origin): a source checkout is to "
        "be built (python setup.py develop) or left (run from another directory); inside site-packages, uninstall "
        "torch until pip finds none and install it once.",
        sources=("https://github.com/pytorch/pytorch/issues/574", "https://github.com/pytorch/pytorch#from-source"),
    ),
    Entry(
        slug="install_failed",
        title="pip could not write, download or verify the packages it was installing",
        summary=("pip found the packages but could not install them[[: {reason}]]: the disk, a file in use, the "
                 "folder's permissions, the network or the download itself stopped it."),
        keywords=("timeouterror", "protocolerror", "could not install packages due to", "do not match the hashes", "externally-managed-environment",
                  "files.pythonhosted.org", "download.pytorch.org", "invalid requirement", "could not fetch url",
                  "condahttperror"),
        patterns=(
            r"Could not install packages due to an (?:OSError|EnvironmentError)",
            r"THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE",
            r"(?m)^error: externally-managed-environment",
            r"(?:ReadTimeoutError|ConnectTimeoutError|ProtocolError)[^\n]{0,120}(?:files\.pythonhosted\.org|pypi\.org|"
            r"download\.pytorch\.org)",
            r"ERROR: Invalid requirement: ",
            # pip unable to reach its index (a proxy, TLS interception, no network)
            r"Could not fetch URL https?://[^\s:]{1,300}: ",
            # conda unable to reach its channel
            r"CondaHTTPError: HTTP \d{3} CONNECTION FAILED for url",
        ),
        priority=66,
        extra={"family": "install_build"},
        facts=((r"Could not install packages due to an \w+: (?P<reason>\[(?:Errno|WinError) \d+\][^\n:]{0,80})",
                {"reason": "str"}),),
        causes=("No space left where pip unpacks (often /tmp, or the cache): torch's wheels are GBs.",
                "A file held by a running program (Windows: a kernel or IDE using torch's DLLs), or a folder without "
                "write permission (a system Python).",
                "A download cut short (a timeout, a proxy), so the file's hash does not match.",
                "A system Python that forbids pip (externally managed), or a requirement written in a form pip does "
                "not accept (a +cu suffix without the index URL)."),
        fixes=(Fix("Install into a virtual environment, without the cache",
                   "python -m venv .venv && . .venv/bin/activate\n"
                   "pip install --no-cache-dir torch --index-url https://download.pytorch.org/whl/cu121"),),
        first_step="Read pip's reason after 'due to' (the Errno): free disk space (df -h, or --no-cache-dir), close "
        "programs that use the package and retry, install into a virtual environment (or with --user) where the folder "
        "is not writable, and retry a cut download with pip cache purge and a longer --timeout.",
        sources=("https://pip.pypa.io/en/stable/cli/pip_install/", "https://pytorch.org/get-started/locally/"),
    ),
    Entry(
        slug="conda_not_found",
        title="conda found no build of the packages for this platform in its channels, or none that fit together",
        summary=("conda could not solve the environment: the channels it searched have no build of the packages for "
                 "this platform and Python, or the pinned versions do not fit together."),
        keywords=("packagesnotfounderror", "packagenotfounderror", "unsatisfiableerror", "resolvepackagenotfound",
                  "not available from current channels", "solving environment: failed"),
        patterns=(r"Packages?NotFoundError: (?:The following packages are not available from current channels|Package "
                  r"missing in current)",
                  r"UnsatisfiableError: The following specifications were found",
                  r"(?m)^ResolvePackageNotFound:",
                  r"Solving environment: failed\b"),
        priority=66,
        extra={"family": "install_build"},
        causes=("The channel holding the package is not named (-c pytorch -c nvidia, or conda-forge).",
                "No build for this platform or Python (win-32, osx-arm64 for old releases, linux-aarch64), or a release "
                "too old to be published any more.",
                "An environment file pinning exact builds of another platform."),
        fixes=(Fix("Install torch with pip from the selector's command instead",
                   "pip install torch torchvision --index-url https://download.pytorch.org/whl/cu121"),),
        first_step="Compare the platform in conda's 'Current channels' list (e.g. win-32, osx-arm64) and the Python "
        "version with the builds the release publishes: name the channel that has it, choose a release built for "
        "this platform, or install torch with pip from pytorch.org's command.",
        sources=("https://pytorch.org/get-started/locally/",
                 "https://docs.conda.io/projects/conda/en/latest/user-guide/troubleshooting.html"),
    ),
    Entry(
        slug="audio_backend_missing",
        title="torchaudio has no library installed to read or write audio files",
        summary=("torchaudio found no audio backend that handles the file[[ ({uri})]]: it reads and writes files through "
                 "soundfile, sox or FFmpeg (TorchCodec in recent releases), and none of them is installed or loads."),
        keywords=("failed to load ffmpeg", "audio i/o backend", "appropriate backend to handle uri", "no audio backend", "ffmpeg libraries",
                  "torchcodec is required", "is not one of available backends"),
        patterns=(r"No audio I/O backend is available",
                  r"Couldn't find appropriate backend to handle uri",
                  r"No audio backend is available",
                  r"Failed to load FFmpeg librar",
                  r"TorchCodec is required for \w+",
                  r"Backend \"\w+\" is not one of available backends"),
        priority=62,
        extra={"family": "environment_version"},
        facts=((r"handle uri (?P<uri>[^\n{}]{1,200}?) and format", {"uri": "str"}),),
        causes=("torchaudio installed without any audio library (soundfile on Windows/macOS, sox or FFmpeg on Linux).",
                "An FFmpeg of a major version the installed torchaudio does not load, or torchaudio 2.9+ expecting "
                "TorchCodec."),
        fixes=(Fix("Install a backend and check that torchaudio sees it",
                   "%pip install soundfile\nimport torchaudio; print(torchaudio.list_audio_backends())"),),
        first_step="Print torchaudio.list_audio_backends(): if it is empty, install soundfile (pip install soundfile), "
        "or FFmpeg / TorchCodec for the formats and torchaudio release you use, and restart the kernel.",
        sources=("https://pytorch.org/audio/stable/installation.html",
                 "https://pytorch.org/audio/stable/torchaudio.html"),
    ),
    Entry(
        slug="protobuf_version",
        title="protobuf is newer than the generated code a package ships (tensorboard, an older library)",
        summary=("protobuf 4 refuses the _pb2.py files a package generated with an older protoc: the installed "
                 "protobuf is newer than that package supports."),
        keywords=("descriptors cannot", "regenerated with protoc"),
        patterns=(r"Descriptors cannot (?:not )?be created directly",
                  r"must be regenerated with protoc >= ?\d"),
        priority=64,
        extra={"family": "environment_version"},
        causes=("An upgrade (often pulled in by another package) installed protobuf 4.x next to a package whose "
                "generated code needs 3.x: tensorboard, onnx, older transformers or ray releases.",),
        fixes=(Fix("Pin protobuf to the 3.20 series (or upgrade the package that ships the old code)",
                   "%pip install 'protobuf<=3.20.3'"),),
        first_step="Install protobuf 3.20.x (pip install 'protobuf<=3.20.3'), or upgrade the package named in the "
        "traceback to a release built for protobuf 4, then restart the kernel.",
        sources=("https://protobuf.dev/news/2022-05-06/#python-updates",),
    ),
    Entry(
        slug="git_fetch_failed",
        title="git could not fetch a package's source (network, or a branch, tag or commit that no longer exists)",
        summary=("The install fetches a package's source with git, and git failed: it could not reach the host "
                 "(a proxy, firewall or TLS problem), or the branch, tag or commit pinned there does not exist "
                 "(a pull request's ref after its merge, a commit rebased away)."),
        keywords=("git operation failed", "reference is not a tree", "did not find branch or tag", "unable to access",
                  "unable to connect to", "rpc failed", "early eof", "unexpected disconnect", "index-pack",
                  "did not run successfully"),
        patterns=(
            # uv's report of a git dependency it could not fetch
            r"Git operation failed",
            r"fatal: reference is not a tree: [0-9a-f]{7,40}",
            # pip, for a branch or tag that is not there (a pull request's ref after its merge)
            r"Did not find branch or tag '[^'\n]{1,200}', assuming revision or ref",
            r"fatal: unable to access '(?:https?|git)://[^'\n]{1,300}': ",
            r"fatal: unable to connect to [\w.-]{1,200}:",
            r"git (?:clone|fetch|checkout)\b[^\n]{0,300} did not run successfully",
            # the transfer cut by the network part-way (curl's error code, the pack stream ending early)
            r"\berror: RPC failed; (?:curl|HTTP) \d+",
            r"\bfatal: (?:early EOF|fetch-pack: unexpected disconnect|fetch-pack: invalid index-pack output)",
            r"\bfetch-pack: unexpected disconnect while reading sideband packet",
        ),
        priority=72,  # before the build step that failed because git did
        extra={"family": "install_build"},
        causes=("The machine cannot reach the git host: a proxy, VPN, firewall or TLS interception (schannel / "
                "SSL errors on Windows).",
                "The branch, tag or commit the install names no longer exists: a pull request's ref after its merge, "
                "a pinned commit that was rebased away, a deleted branch."),
        fixes=(Fix("Check that git reaches the repository and the ref exists",
                   "git ls-remote https://github.com/<org>/<repo> <branch-or-tag>"),
               Fix("Install a published release instead of the git source", "pip install <package>")),
        first_step="Run git ls-remote on the repository URL from the same machine: if it fails, fix the network "
        "(proxy, VPN, firewall, TLS settings); if the ref is missing, pin an existing branch, tag or commit (or install "
        "the release from PyPI).",
        sources=("https://pip.pypa.io/en/stable/topics/vcs-support/", "https://git-scm.com/docs/git-ls-remote"),
    ),
    Entry(
        slug="extension_build_lock",
        title="A C++/CUDA extension build waits on a lock an earlier, interrupted build left behind",
        summary=("torch's just-in-time extension loader builds an extension (DeepSpeed's ops, a project's kernels) "
                 "and takes a lock file in its build folder first; a build that was killed left that lock, so every "
                 "later run waits on it forever."),
        keywords=("extensions root", "file_baton", "lock file exists"),
        patterns=(
            # the process stopped right after torch announced the build folder: the last line of the log
            r"as PyTorch extensions root\.\.\.[\s>]*\Z",
            # a stack dump (py-spy, faulthandler) of the wait
            r"\bwait \(torch/utils/file_baton\.py:\d+\)",
            # faulthandler's dump of the wait (its frame lines have no comma before "in", and stay in the text)
            r"torch[/\\]utils[/\\]file_baton\.py\", line \d+ in wait",
            # torch's own warning when it finds the lock before building
            r"Lock file exists in build directory: '[^'\n]{1,500}'",
        ),
        # a Python traceback of the wait (a Ctrl-C after the hang: KeyboardInterrupt), whose frames normalising drops
        frames=(r"torch[/\\]utils[/\\]file_baton\.py\", line \d+, in wait",),
        priority=60,
        # the labels' first step for such a hang, whether they file it as a hang or as the build: delete the lock
        extra={"family": "install_build,performance_or_hang"},
        causes=("An earlier run was killed (Ctrl-C, a job's time limit, an out-of-memory kill) while it built the "
                "extension, and its lock file stayed in ~/.cache/torch_extensions/<python_cuda>/<op>/.",
                "Several processes (ranks) share the build folder on a network file system that does not release "
                "the lock."),
        fixes=(Fix("Delete the extension's build folder (or only its lock file), then rerun",
                   "rm -rf ~/.cache/torch_extensions/*/<op_name>   # or its 'lock' file only"),
               Fix("Build in a fresh folder", "export TORCH_EXTENSIONS_DIR=/tmp/torch_extensions_$USER")),
        first_step="Delete the stale lock: remove the op's folder (or its 'lock' file) under the extensions root the "
        "log names (~/.cache/torch_extensions/...), or point TORCH_EXTENSIONS_DIR to a fresh folder, and rerun.",
        sources=("https://discuss.pytorch.org/t/freezing-at-using-home-user-cache-torch-extensions-as-pytorch-"
                 "extensions-root/132759",),
    ),
)

# a package named with a version specifier ("mmcv>=2.0.0rc4", "`accelerate>=0.20.1`"): not a parameter's bound
# ("lr >= 0.0"), nor CUDA's or the driver's own version (``version_mismatch``)
_NOT_A_PACKAGE = r"(?!(?i:lr|eps|dim|size|value|alpha|beta|gamma|momentum|weight_decay|index|rate|threshold|cuda|cudnn|nvidia|driver|gpu|sm|compute|capability|version|memory|batch|length|count|number|ratio|epoch|steps?|seed)\b)"
_PACKAGE_SPEC = _NOT_A_PACKAGE + r"[A-Za-z][\w.-]{1,60}? ?(?:>=|==|~=|<=) ?v?\d{1,4}\.\d{1,4}"

ENTRIES += (
    Entry(
        slug="version_required",
        title="The code states a version requirement for a package",
        summary=("The message states a version requirement[[ ({requirement})]]: the code, or a library it calls, was "
                 "written for a release of that package; the installed one may be another."),
        # an operator of a version specifier, or the words of the patterns without one (most texts have neither, so
        # the patterns, which scan every position, rarely run)
        keywords=(">=", "==", "~=", "<=", "or higher", "or newer", "or later", "or above", "or greater",
                  "too old", "not supported", "unsupported", "incompatible", "not compatible"),
        patterns=(
            # the requirement after the words that state it ("requires `accelerate>=0.20.1`", "please install
            # mmcv>=2.0.0rc4", "is incompatible with transformers<4.30")
            r"(?i:\brequire[sd]?\b|\bneeds?\b|please (?:install|upgrade|update|use)|incompatible|"
            r"not compatible|only supports?|not supported)[^\n]{0,100}?(?<![\w.-])[`'\"(]?(?P<requirement>"
            + _PACKAGE_SPEC + r")",
            # the installed one named with its version, then the complaint ("MMCV==1.6.0 is used but incompatible")
            # (no parameter's bound is followed by "is used but incompatible": the name is a package's)
            r"(?<![\w.-])[`'\"(]?[A-Za-z][\w.-]{1,60}? ?(?:==|>=|<=|~=) ?v?\d{1,4}\.\d{1,4}[\w.+-]{0,20}"
            r"[`'\")]? (?i:is (?:used but |installed but )?(?:incompatible|not compatible|not supported|unsupported|required|"
            r"needed|too old))",
            # "needs bitsandbytes version 0.39.0 or higher", "requires tokenizers 0.13 or newer"
            r"(?i:\bneeds?|\brequire[sd]?)\b (?:at least )?" + _NOT_A_PACKAGE + r"[A-Za-z][\w.-]{1,60} (?:version )?v?\d{1,4}"
            r"\.\d{1,4}[\w.+-]{0,20}\+? (?i:or (?:higher|newer|later|above|greater))",
            # "jaxlib version 0.4.1 is newer than and incompatible with jax version 0.3.25"
            r"(?<![\w.-])(?P<requirement>[A-Za-z][\w.-]{1,60} (?:version )?v?\d{1,4}\.\d{1,4}[\w.+-]{0,20}) is (?:newer|older) "
            r"than and incompatible with",
            # lightning_utilities' RequirementCache, as Lightning raises it ("Requirement 'torch>=2.1' not met")
            r"Requirement '" + _PACKAGE_SPEC + r"[^'\n]{0,40}' not met",
            # the Python running the code named as one a package does not support ("Python 3.12 is not supported by
            # this version of onnxruntime")
            r"\bPython v?3\.\d{1,2}(?:\.\d{1,3})? (?:is|was) (?:not supported|unsupported|not compatible|too old)",
            # "torch version 1.8.1 is not supported", "numpy version 1.19 is too old"
            r"(?<![\w.-])(?!(?i:cuda|cudnn|driver|nvidia)\b)[A-Za-z][\w.-]{1,60} (?:version|release) v?\d{1,4}\.\d{1,4}"
            r"[\w.+-]{0,20} (?:is|was) "
            r"(?:too old|not supported|unsupported|incompatible|not compatible)",
        ),
        priority=46,  # before a plain "please install" (package_missing): the version is the question
        facts=((r"(?P<requirement>(?<![\w.-])" + _PACKAGE_SPEC + r"[\w.+-]{0,20})", {"requirement": "str"}),),
        extra={"family": "environment_version"},
        causes=("The installed release of the package is older (or newer) than the code or a library it calls "
                "supports.",
                "The package was upgraded after it was imported: the kernel still runs the old copy until it restarts.",
                "Two requirements files (the project's and a library's) pin versions that do not fit together."),
        fixes=(Fix("Install the version the message asks for, then restart the kernel",
                   "%pip install 'PACKAGE>=VERSION'   # the requirement the message states; then Kernel > Restart"),
               Fix("See what is installed", "import importlib.metadata as md\nprint(md.version('PACKAGE'))")),
        first_step="Compare the installed version of the package the message names (pip show <package>) with the "
        "requirement it states, install a version that meets it (or the versions of the calling library that fit the "
        "installed one), and restart the kernel so the new version is the one imported.",
        sources=("https://packaging.python.org/en/latest/specifications/version-specifiers/",
                 "https://pip.pypa.io/en/stable/cli/pip_install/"),
    ),
)

# What the live check of ``version_required`` says, by what it found: the row under the live evidence, the first step
# and the likely causes (None keeps the entry's), filled with {req} (the stated requirement), {name}, {installed} and
# {imported} (the version of the copy this kernel imported).
REQUIREMENT_CHECKED: dict[str, tuple[str, str, tuple[str, ...] | None]] = {
    "absent": ("{req}: {name} is not an installed package",
               "The message states {req}, and no package named {name} is installed in this kernel's environment: if "
               "{name} is a package, install it (%pip install '{req}') and restart the kernel; if it is an argument or "
               "setting, the message states a bound on its value, not a version.",
               ("{name} is not installed in the environment this kernel runs (another virtualenv or conda env).",
                "{name} is an argument or setting, and the message states a bound on its value.")),
    "stale": ("installed {name} {installed} meets {req}, but this kernel imported {imported}",
              "{name} {installed} is installed and meets {req}, but this kernel still runs the {imported} it imported "
              "before the upgrade: restart the kernel (Kernel > Restart) and rerun.",
              ("The package was upgraded after it was imported: the kernel still runs the old copy until it "
               "restarts.",)),
    "met": ("installed {name} {installed} meets {req}",
            "The installed {name} {installed} already meets {req}, so the version is not the cause: read the rest of "
            "the message for what it really needs (a GPU feature, a setting, another package).",
            ("The message states the version together with another need (a GPU feature such as bf16, a setting, "
             "another package), and that other need is what is missing.",
             "The library's own check reads the installed version wrongly (a local build tag such as +cpu, a "
             "development release).")),
    "missed": ("installed {name} {installed} does not meet {req}",
               "The installed {name} {installed} does not meet {req}: install a release that does (%pip install "
               "'{req}', or the release of the calling library made for {installed}) and restart the kernel.",
               None),
}

# The first step of ``libraries_disagree``, filled with the two packages (import names and pip's names).
LIBRARIES_STEP = ("Print the installed versions of {caller_dist} and {dist} (pip show {caller_dist} {dist}): {caller} "
                  "calls {package} with a name or argument the installed {package} does not have, so the two releases "
                  "do not fit. Install the {dist} release that {caller_dist}'s requirements name (or the {caller_dist} "
                  "release made for the installed {dist}) and restart the kernel.")

# The code of ``libraries_disagree``'s fix, filled with the two distributions' names.
LIBRARIES_CODE = ("import importlib.metadata as md\nfor d in ('{caller_dist}', '{dist}'):\n"
                  "    print(d, md.version(d), md.distribution(d).locate_file(''))")

ENTRIES += (
    Entry(
        slug="libraries_disagree",
        title="Two installed libraries do not fit together",
        summary=("{exc_type} was raised inside {package}[[ ({where})]] while {caller} called it[[ ({caller_where})]]: "
                 "one library asked the other for something its installed release does not have."),
        causes=("One of the two libraries was upgraded (or pinned) without the other: the caller was written for "
                "another release of the library it calls.",
                "An old copy of the called library shadows the new one (a system package, another site-packages)."),
        fixes=(Fix("See both versions and where each is installed",
                   LIBRARIES_CODE.format(caller_dist="CALLER", dist="CALLED")),),
        first_step="Print the installed versions of both libraries in the traceback's last frames and install the "
        "release of the called one that the caller requires; then restart the kernel.",
        sources=("https://pip.pypa.io/en/stable/cli/pip_show/",
                 "https://packaging.python.org/en/latest/specifications/version-specifiers/"),
        extra={"family": "environment_version"},
    ),
)

ENTRIES += (
    Entry(
        # a library that shells out (whisper's and ffmpeg-python's ffmpeg, a compiler, git, sox): subprocess raises
        # FileNotFoundError for the program, in any language Windows speaks, before the program ever runs
        slug="program_missing",
        title="A program the code runs is not installed or not on PATH",
        summary=("Python could not start a program[[ ('{program}')]] that the code, or a library it calls, runs as a "
                 "separate process: it is not installed, or its folder is not on the PATH this kernel or script sees."),
        keywords=("filenotfounderror",),
        patterns=(
            r"FileNotFoundError: \[(?:Errno|WinError) 2\]",
        ),
        # subprocess starting the program: its frame among the innermost (a Popen( on another frame's line, or
        # subprocess's frames further up, say nothing of the file a library's open() missed)
        extra={"requires": r"\b_execute_child[ \t]*\r?\n(?:[^\n]*\n){0,5}?[^\n]*FileNotFoundError:",
               "family": "environment_version,install_build"},
        priority=52,
        facts=((r"No such file or directory: '(?P<program>[^'\n/\\]{1,80})'", {"program": "str"}),),
        causes=("The program is not installed on this machine (ffmpeg, sox, git, a compiler).",
                "It is installed, but its folder is not on the PATH of the process that runs the code (a notebook "
                "server started before the install, a conda environment not activated, Windows' PATH not refreshed)."),
        fixes=(Fix("See whether this process finds the program", "import shutil; print(shutil.which('ffmpeg'))"),
               Fix("Install it (ffmpeg as the example)", "conda install -c conda-forge ffmpeg   # or: apt install ffmpeg / "
                   "winget install ffmpeg")),
        first_step="Find which program the traceback's library runs (the command just above subprocess's frames), check "
        "it with shutil.which('<program>') in the same kernel, and install it or put its bin folder on PATH; then "
        "restart the kernel so the new PATH is seen.",
        sources=("https://docs.python.org/3/library/subprocess.html#exceptions",
                 "https://docs.python.org/3/library/shutil.html#shutil.which"),
    ),
)

ENTRIES += (
    Entry(
        # torch's ONNX exporter checking its own arguments before it converts anything (placed by explain/_machinery's
        # exporter rules): an opset this torch's exporter does not know, not an operator of the model
        slug="onnx_opset_unsupported",
        title="The installed torch's ONNX exporter does not know the opset asked for",
        summary=("torch.onnx.export was asked for an ONNX opset[[ ({opset})]] the installed torch's exporter does not "
                 "support: the torch release is older than that opset's support (nothing of the model was "
                 "converted yet)."),
        extra={"family": "environment_version,compile"},
        causes=("The export script (or the tool that calls it) was written for a newer torch, whose exporter "
                "supports that opset.",
                "An opset_version given by hand above the highest one the installed torch supports."),
        fixes=(Fix("See the installed torch and the highest opset its exporter supports",
                   "import torch\nprint(torch.__version__)\n"
                   "from torch.onnx._constants import ONNX_MAX_OPSET  # torch >= 1.13\nprint(ONNX_MAX_OPSET)"),),
        first_step=("Print torch.__version__: this torch's ONNX exporter stops below the opset asked for, so upgrade "
                    "torch to a release that supports it (with its matching torchvision; from torch 2.9, dynamo=True "
                    "exports the newer opsets), or export with a lower opset_version that still has the model's "
                    "operators."),
        sources=("https://pytorch.org/docs/stable/onnx_torchscript.html",),
    ),
    Entry(
        # the dynamo-based exporter (the default of torch.onnx.export since torch 2.9) converting the TorchScript
        # exporter's arguments for torch.export (torch/onnx/_internal/exporter/_compat.py) and giving up
        slug="onnx_exporter_arguments",
        title="torch.onnx.export's new exporter does not take the arguments the code gives",
        summary=("torch.onnx.export ran its dynamo-based exporter (the default since torch 2.9), which could not "
                 "translate an argument written for the older TorchScript-based exporter (dynamic_axes) into its "
                 "own (dynamic_shapes)."),
        extra={"family": "compile,environment_version"},
        causes=("An export script written for torch before 2.9, whose torch.onnx.export used the TorchScript-based "
                "exporter and its dynamic_axes, run with a torch whose default is the dynamo-based exporter.",),
        fixes=(Fix("Keep the TorchScript-based exporter the script was written for",
                   "torch.onnx.export(model, args, 'model.onnx', dynamic_axes=dynamic_axes, dynamo=False)"),
               Fix("Or give the new exporter its own argument",
                   "batch = torch.export.Dim('batch')\n"
                   "torch.onnx.export(model, (x,), 'model.onnx', dynamo=True, dynamic_shapes=({0: batch},))"),),
        first_step=("Pass dynamo=False to torch.onnx.export to keep the TorchScript-based exporter that takes "
                    "dynamic_axes (or replace dynamic_axes with dynamic_shapes as torch.export takes them), or "
                    "install the torch release the export script was written for."),
        sources=("https://pytorch.org/docs/stable/onnx_export.html",
                 "https://pytorch.org/docs/stable/onnx.html"),
    ),
)

ENTRIES += (
    Entry(
        # pip saying the package is installed, then the shell refusing the command of the same name: the command is in
        # Python's Scripts (bin) folder, which is not on PATH (auto-py-to-exe#352), not a package to install (placed by
        # explain/_claims.py's installed_command)
        slug="command_not_on_path",
        title="The package is installed, but its command is not on PATH",
        summary=("pip says[[ '{command}']] is already installed, yet the shell cannot find the command of that name: "
                 "the command sits in the Scripts (bin) folder of the Python that pip installed into, and that folder "
                 "is not on the PATH of this shell."),
        extra={"family": "environment_version,package_missing"},
        causes=("Python was installed without \"Add Python to PATH\" (or pip installed with --user), so the folder "
                "of the commands packages install is not on PATH.",
                "PATH changed after the shell opened: a new terminal reads it again."),
        fixes=(Fix("See the folder pip puts commands in", "python -c \"import sysconfig; "
                   "print(sysconfig.get_path('scripts'))\""),
               Fix("Run the package through the interpreter instead", "python -m auto_py_to_exe  # its import name")),
        first_step=("Run the command through the interpreter pip installed it into (python -m <its import name>, "
                    "dashes as underscores), or add that Python's Scripts folder (python -c \"import sysconfig; "
                    "print(sysconfig.get_path('scripts'))\") to PATH and open a new terminal; installing it again "
                    "changes nothing."),
        sources=("https://docs.python.org/3/using/windows.html#finding-the-python-executable",
                 "https://packaging.python.org/en/latest/tutorials/installing-packages/"),
    ),
)

ENTRIES += (
    Entry(
        # torch's messages that only old releases print: the code (or a library such as captum) relies on what a later
        # torch allows, so the installed torch is older than it needs
        slug="torch_too_old",
        title="The installed torch is older than the code needs",
        summary=("This message comes only from an old torch release[[ (before {fixed_in})]]: the code, or a library it "
                 "calls, relies on what later releases allow."),
        keywords=("should never return any values",),
        patterns=(
            # torch < 1.2: forward hooks could not replace a module's output (captum's layer methods do)
            r"forward hooks should never return any values",
        ),
        priority=50,
        extra={"family": "environment_version", "fixed_in_default": "torch 1.2"},
        causes=("torch was installed long before the code (or the library's release) it runs.",),
        fixes=(Fix("See the installed torch and upgrade it with its companions",
                   "import torch; print(torch.__version__)\n%pip install -U torch torchvision torchaudio"),),
        first_step="Print torch.__version__ and upgrade torch (with its matching torchvision / torchaudio) to the "
        "release the code or library requires; then restart the kernel.",
        sources=("https://github.com/pytorch/pytorch/releases/tag/v1.2.0",),
    ),
)

# A live error that ran through installed libraries whose declared requirements the installed versions break
# (explain/_installed.py): the first step of an error no category names, or a library's own check.
FRAME_CONFLICT_STEP = ("The libraries this error ran through do not fit the versions installed: {conflict}. Install "
                       "versions that fit (`{command}`), restart the kernel, and run the cell again; if the error "
                       "stays, read the library's message next.")
FRAME_CONFLICT_SLUGS = frozenset({"unknown", "library_raised", "import_failed"})

ENTRIES += (
    Entry(
        # "cannot import name 'X' from 'Y'" where Y is no library nbdebug knows and Python gave no installed file (a
        # top-level name without a path, or the project's own file): whose module it is decides the step, not a release
        slug="name_missing_in_module",
        title="A module the code imports from does not define the name (whose module is it?)",
        summary=("Python imported a module[[ '{module}']] that has no[[ '{name}']]: the project's own module (a file "
                 "missing from the checkout, an older copy, a circular import) or another package of the same name "
                 "found first on the path."),
        keywords=("cannot import name",),
        patterns=(r"cannot import name '?\w{1,200}'? from '[\w.]{1,200}'",),
        priority=46,  # above api_missing: the guards keep it to modules that are not a known library's
        extra={"family": "user_code_python,environment_version"},
        facts=((r"cannot import name '?(?P<name>\w{1,200})'? from '(?P<module>[\w.]{1,200})'",
                {"name": "str", "module": "str"}),),
        causes=(
            "The project's own module: a file or folder missing from the checkout, an older copy of it, or a circular "
            "import between the project's modules.",
            "Another module of the same name found first on sys.path (a pip package, a folder of another project).",
        ),
        fixes=(Fix("See which file Python imports", "import importlib.util\n"
                   "print(importlib.util.find_spec('<module>').origin)  # the project's file, or another package's?"),),
        first_step="Print which file Python imports for the module (importlib.util.find_spec(name).origin): the "
        "project's own file must define the name (update the checkout, or fix the import); another package's file "
        "means the project's module is not first on sys.path (run from the project's root, or rename the clash).",
        sources=("https://docs.python.org/3/reference/import.html#the-module-search-path",),
    ),
)

ENTRIES += (
    Entry(
        # a web app's server (uvicorn, aiohttp, gradio: asyncio's create_server words it so) finding its port taken: a
        # copy of the app still running, or another program on that port -- not torch.distributed's rendezvous port
        # (address_in_use), which c10d reports in its own words
        slug="server_port_in_use",
        title="A web app's server could not listen on its port: another process holds it",
        summary="The app's web server could not listen on[[ port {port}]]: another process (often an earlier copy of "
                "the same app) already uses it.",
        keywords=("error while attempting to bind on address", "cannot find empty port"),
        patterns=(
            r"\[Errno (?:98|48|10048)\] error while attempting to bind on address \(",
            r"Cannot find empty port in range: \d{1,5}-\d{1,5}",
        ),
        priority=56,  # above address_in_use: the words of a web server's bind, not a process group's store
        extra={"family": "other"},
        facts=((r"bind on address \('[^'\n]{0,100}', (?P<port>\d{2,5})", {"port": "int"}),
               (r"Cannot find empty port in range: (?P<port>\d{2,5})", {"port": "int"})),
        causes=("The same app (a web UI, a demo) is still running from an earlier start, in another terminal or as a "
                "kernel that was not shut down.",
                "Another program listens on that port."),
        fixes=(Fix("See which process holds the port", "lsof -i :7860      # Windows: netstat -ano | findstr :7860"),
               Fix("Or start the app on a free port", "demo.launch(server_port=7861)  # or the app's --port option / "
                   "GRADIO_SERVER_PORT")),
        first_step="Stop the process that holds the port (lsof -i :<port>, or netstat -ano on Windows: often an earlier "
        "copy of the same app), or start the app on another port (its --port option, server_port=, "
        "GRADIO_SERVER_PORT).",
        sources=("https://www.gradio.app/docs/gradio/blocks#blocks-launch",
                 "https://www.uvicorn.org/settings/#socket-binding"),
    ),
)

ENTRIES += (
    Entry(
        # an HTTP client (requests / urllib3) refused by a server on this machine: the local service the script talks
        # to (Visdom's 8097, a model server, a dashboard) is not running -- no process group's rendezvous
        slug="local_service_unreachable",
        title="A server on this machine that the code talks to is not running",
        summary=("The code sent a request to a server on this machine[[ (port {port})]] and nothing answered: the "
                 "service (a dashboard such as Visdom, a local model or API server) was not started, or listens "
                 "elsewhere."),
        keywords=("connectionpool(host='localhost'", "connectionpool(host='127.0.0.1'", "connectionpool(host='0.0.0.0'"),
        patterns=(r"HTTPS?ConnectionPool\(host='(?:localhost|127\.0\.0\.1|0\.0\.0\.0)', port=\d{1,5}\): Max retries "
                  r"exceeded",),
        priority=58,  # above connection_refused (a process group's store): an HTTP client's words
        extra={"family": "other"},
        facts=((r"ConnectionPool\(host='[^'\n]{1,60}', port=(?P<port>\d{1,5})\)", {"port": "int"}),),
        causes=("The server was never started (Visdom's dashboard on port 8097 needs python -m visdom.server running "
                "before training).",
                "It runs on another machine or port than the code's settings say, or it stopped."),
        fixes=(Fix("Start the server first (Visdom as the example)", "python -m visdom.server  # then start training"),
               Fix("See whether anything listens there", "lsof -i :8097      # Windows: netstat -ano | findstr :8097")),
        first_step="Start the server the code talks to on that port before running the code (lsof -i :<port> shows "
        "whether anything listens), point the code at where it really runs, or turn that logging/reporting option "
        "off.",
        sources=("https://docs.python.org/3/library/exceptions.html#ConnectionRefusedError",),
    ),
)

# Visdom's dashboard, the commonest local server a training script reports to (its default port)
VISDOM_PORT = 8097
VISDOM_STEP = ("Start Visdom's server before training (python -m visdom.server, which listens on port 8097), or turn "
               "the script's Visdom option off.")
