"""Issue 23, round 8b: the bounded reader of install, build and environment logs (``core/explain/_build_log.py``).

The reader finds the line that holds the cause (the compiler's or setup.py's first error above pip's summary, a tool,
header or library that is missing, a package manager that found no release for this Python or platform) and fills
its first step with what the line and the log name (the package, the Python version, the platform, torch's version).

``PROBES`` are public texts with their threads' addresses: the tuning half of the round's own sample
(``test_explain_round8b_sample.py``, labelled before the explainer ran) and texts found for the reader's other lines.
Each positive failed before the reader: the text was unknown, or its first step was the category's generic one,
without what the line names.  Negatives: texts that share a line's words but not its evidence keep the answer they had.
"""

from __future__ import annotations

import ctypes
import importlib.util
import re
import sys
from pathlib import Path

import pytest
from test_explain_round8b_sample import HELDOUT, ITEMS, TUNE

from nbdebug.core.explain import explain
from nbdebug.core.explain._build_log import claim, read

_SAMPLE = {item[0]: item for item in ITEMS}
BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_explain_wild.py"


def _text(item_id: str) -> str:
    assert item_id in TUNE, "tests use the tuning half only"
    return _SAMPLE[item_id][5]


# (address, the category, words the first step must hold, text)
PROBES: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    # unknown before: the cause line places them
    (_SAMPLE["b01"][1], "install_failed", ("cannot reach the package index", "mmcv", "--proxy"), _text("b01")),
    (_SAMPLE["b10"][1], "conda_not_found", ("pytorch3d", "Windows", "3.12"), _text("b10")),
    (_SAMPLE["b37"][1], "extension_build_failed", ("torch's own headers", "another torch release"), _text("b37")),
    (_SAMPLE["b41"][1], "extension_build_failed", ("nvcc", "CUDA_HOME"), _text("b41")),
    (_SAMPLE["b44"][1], "extension_build_failed", ("nvcc", "mamba-ssm", "--no-build-isolation"), _text("b44")),
    # placed before with the category's generic step: now the step names what the line names
    (_SAMPLE["b05"][1], "package_missing", ("detectron2._C", "compiled part"), _text("b05")),
    (_SAMPLE["b29"][1], "package_missing", ("causal_conv1d_cuda", "compiled part"), _text("b29")),
    (_SAMPLE["b39"][1], "package_missing", ("deepspeed_transformer_cuda", "not built"), _text("b39")),
    (_SAMPLE["b09"][1], "install_failed", ("quotes", "Drop the single quotes"), _text("b09")),
    (_SAMPLE["b12"][1], "extension_build_failed", ("xformers", "Python 3.11", "Windows", "from source"), _text("b12")),
    (_SAMPLE["b28"][1], "extension_build_failed", ("causal-conv1d", "torch 2.0.1+cu118", "Windows"), _text("b28")),
    (_SAMPLE["b21"][1], "extension_build_failed", ("nvcc", "torch-scatter"), _text("b21")),
    (_SAMPLE["b11"][1], "native_library_missing", ("Visual C++ Redistributable", "reinstall torch"), _text("b11")),
    (_SAMPLE["b47"][1], "extension_build_failed", ("building mamba_ssm failed", "pip install -v mamba_ssm"),
     _text("b47")),
    (_SAMPLE["b52"][1], "no_matching_wheel", ("no release of torchaudio",), _text("b52")),
    (_SAMPLE["b55"][1], "undefined_symbol", ("built for another torch release",), _text("b55")),
    # the reader's other lines, on public texts found for them
    ("https://github.com/tianzhi0549/FCOS/issues/37", "extension_build_failed", ("gcc 6 or older", "CC=gcc-6"),
     "/usr/local/cuda-9.0/include/crt/host_config.h:119:2: error: #error -- unsupported GNU version! gcc versions "
     "later than 6 are not supported! #error -- unsupported GNU version! gcc versions later than 6"),
    ("https://github.com/endernewton/tf-faster-rcnn/issues/352", "extension_build_failed", ("gcc 6 or older",),
     "ERROR:`/usr/local/cuda-9.0/include/crt/host_config.h:119:2: error: #error --Unsupported GNU version later than "
     "6 are not supported!`"),
    # the compiler's refusal comes before CMake's report of it
    ("https://github.com/ceccocats/tkDNN/issues/134", "extension_build_failed", ("gcc 8 or older",),
     "/usr/local/cuda/include/crt/host_config.h:138:2: error: #error -- unsupported GNU version! gcc versions later "
     "than 8 are not supported!\n  138 | #error -- unsupported GNU version! gcc versions later than 8 are not "
     "supported!\n      |  ^~~~~\nCMake Error at kernels_generated_upsample.cu.o.cmake:220 (message):"),
    ("https://github.com/JPaulMora/Pyrit/issues/294", "extension_build_failed", ("Python.h", "python3-dev"),
     "building 'cpyrit._cpyrit_cuda' extension\ngcc -pthread -fno-strict-aliasing -DNDEBUG -g -fwrapv -O2 -Wall "
     "-Wstrict-prototypes -fPIC -I/usr/local/cuda/include -I/usr/include/python2.6 -c _cpyrit_cuda.c -o "
     "build/temp.linux-x86_64-2.6/_cpyrit_cuda.o -Wall\n_cpyrit_cuda.c:39: fatal error: Python.h: No such file or "
     "directory\ncompilation terminated.\nerror: command 'gcc' failed with exit status 1"),
    ("https://github.com/rusty1s/pytorch_sparse/issues/5", "extension_build_failed",
     ("torch/extension.h", "--no-build-isolation"),
     "`cpu/scatter.cpp:1:29: fatal error: torch/extension.h: No such file or directory\n    compilation terminated.\n"
     "    error: command 'gcc' failed with exit status 1`"),
    # MSVC's wording, in another language's quotes
    ("https://github.com/pytorch/pytorch/issues/8329", "extension_build_failed", ("cuda.h", "CUDA toolkit"),
     "c:\\anaconda2\\envs\\python3\\lib\\site-packages\\torch\\lib\\include\\thc\\THCGeneral.h(12): fatal error "
     "C1083: can not open or include such file: \u201ccuda.h\u201d: No such file or directory"),
    # torch's extension builder comparing nvcc with torch's CUDA, inside pip's build output
    ("https://github.com/lipzh5/ResearchProgress/issues/11", "version_mismatch",
     ("CUDA 10.1", "CUDA 12.1 toolkit", "CUDA_HOME"),
     "      _check_cuda_version(compiler_name, compiler_version)\n        File \"/mnt/sdd/PycharmProjects/distilled-"
     "feature-fields/venv/lib/python3.9/site-packages/torch/utils/cpp_extension.py\", line 413, in _check_cuda_version"
     "\n          raise RuntimeError(CUDA_MISMATCH_MESSAGE.format(cuda_str_version, torch.version.cuda))\n      "
     "RuntimeError:\n      The detected CUDA version (10.1) mismatches the version that was used to compile\n      "
     "PyTorch (12.1). Please make sure to use the same CUDA versions.\n      \n      [end of output]\n  \n  note: This "
     "error originates from a subprocess, and is likely not a problem with pip.\n  ERROR: Failed building wheel for "
     "torch-scatter\n  Running setup.py clean for torch-scatter\nFailed to build torch-scatter"),
    ("https://github.com/facebookresearch/pytorch3d/issues/1786", "version_mismatch", ("CUDA 11.7 toolkit", "/cu120"),
     "      RuntimeError:\n      The detected CUDA version (12.0) mismatches the version that was used to compile\n"
     "      PyTorch (11.7). Please make sure to use the same CUDA versions.\n\n      [end of output]\n\n  note: This "
     "error originates from a subprocess, and is likely not a problem with pip.\n  ERROR: Failed building wheel for "
     "pytorch3d"),
    ("https://github.com/myshell-ai/OpenVoice/issues/450", "extension_build_failed",
     ("libavformat", "pkg-config", "-dev"),
     "Collecting av==10.* (from faster-whisper==0.9.0->MyShell-OpenVoice==0.0.0)\n  Using cached av-10.0.0.tar.gz (2.4 "
     "MB)\n  Installing build dependencies ... done\n  Getting requirements to build wheel ... error\n  error: "
     "subprocess-exited-with-error\n  \n  \u00d7 Getting requirements to build wheel did not run successfully.\n  "
     "\u2502 exit code: 1\n  \u2570\u2500> [29 lines of output]\n      Package libavformat was not found in the "
     "pkg-config search path.\n      Perhaps you should add the directory containing `libavformat.pc'\n      to the "
     "PKG_CONFIG_PATH environment variable\n      No package 'libavformat' found"),
    # torch's JIT extension loader on Windows looking for MSVC's compiler
    ("https://github.com/HRNet/HRNet-Semantic-Segmentation/issues/176", "extension_build_failed",
     ("no C++ compiler", "Build Tools"),
     "When I run train.py, it raise \"subprocess.CalledProcessError: Command '['where', 'cl']' returned non-zero exit "
     "status 1.\". How to solve this problem?"),
    ("https://github.com/m-bain/whisperX/issues/1235", "native_library_missing",
     ("fbgemm.dll", "Visual C++ Redistributable", "reinstall torch"),
     "Traceback (most recent call last):\n  File \"C:\\Users\\cwol2\\whisperx\\Kit-Whisperx\\app.py\", line 2, in "
     "<module>\n    import torch\n  File \"C:\\Users\\cwol2\\miniconda3\\envs\\whisperx-web-ui\\lib\\site-packages\\"
     "torch\\__init__.py\", line 130, in <module>\n    raise err\nOSError: [WinError 182] The operating system cannot "
     "run %1. Error loading \"C:\\Users\\cwol2\\miniconda3\\envs\\whisperx-web-ui\\lib\\site-packages\\torch\\lib\\"
     "fbgemm.dll\" or one of its dependencies."),
    # cmd.exe's code for a command it cannot find, the message in the user's language
    ("https://github.com/Delcos/Hentai-Diffusion/issues/6", "program_missing", ("exit code 9009", "python.org"),
     "\"exit code: 9009\n\nstderr:\nNo se encontr\u00be Python; ejecuta sin argumentos para instalar desde Microsoft "
     "Store o deshabilita este acceso directo en Configuraci\u00be > Administrar alias de ejecuci\u00be de la "
     "aplicaci\u00be.\""),
    # pip's box behind a launcher's prefixes (ComfyUI-Manager): the step that failed, whatever starts the line
    ("https://github.com/sipie800/ComfyUI-PuLID-Flux-Enhanced/issues/10", "extension_build_failed",
     ("first error line above",),
     "[2024-10-28 14:45:53.066]    Downloading filterpy-1.4.5.zip (177 kB)\n[2024-10-28 14:45:53.143]    Preparing "
     "metadata (setup.py): started\n[2024-10-28 14:45:53.366]    Preparing metadata (setup.py): finished with status "
     "'error'\n[2024-10-28 14:45:53.610] [!]   error: subprocess-exited-with-error\n[2024-10-28 14:45:53.614] [!]   "
     "\n[2024-10-28 14:45:53.614] [!]   python setup.py egg_info did not run successfully"),
    ("https://github.com/PeterL1n/BackgroundMattingV2/issues/30", "no_matching_wheel",
     ("torch==1.7.0 is newer than every release", "0.1.2.post2", "64-bit"),
     "Collecting torch==1.7.0 (from -r requirements.txt (line 3))\n  ERROR: Could not find a version that satisfies "
     "the requirement torch==1.7.0 (from -r requirements.txt (line 3)) (from versions: 0.1.2, 0.1.2.post1, "
     "0.1.2.post2)\nERROR: No matching distribution found for torch==1.7.0 (from -r requirements.txt (line 3))"),
    ("https://github.com/chenfei-wu/TaskMatrix/issues/431", "no_matching_wheel",
     ("torch==1.13.1 is older than every release", "2.0.0 or newer"),
     "D:\\VisualGPT\\TaskMatrix>pip install -r requirements.txt\nCollecting langchain==0.0.101 (from -r "
     "requirements.txt (line 1))\n  Using cached langchain-0.0.101-py3-none-any.whl (344 kB)\nERROR: Could not find "
     "a version that satisfies the requirement torch==1.13.1 (from versions: 2.0.0, 2.0.1)\nERROR: No matching "
     "distribution found for torch==1.13.1"),
)


@pytest.mark.parametrize("address,kind,words,text", PROBES, ids=[p[0].split("github.com/")[-1] for p in PROBES])
def test_the_cause_line_makes_the_first_step_specific(address: str, kind: str, words: tuple[str, ...],
                                                       text: str) -> None:
    d = explain(text)
    assert d.kind == kind, address
    for word in words:
        assert word in d.first_step, (address, d.first_step)
    assert d.evidence.get("cause_line"), address  # the line the answer rests on is shown
    assert not re.search(r"\{\w+\}|\[\[|\]\]", d.first_step), d.first_step  # every field filled or dropped


def test_the_evidence_is_the_cause_line_not_pips_summary() -> None:
    d = explain(_text("b21"))
    assert d.evidence["cause_line"].startswith("error: command '/usr/local/cuda/bin/nvcc' failed")
    assert d.evidence["package"] == "torch-scatter"


# negatives: the same words without the evidence each line needs
def test_a_notebooks_own_missing_torch_is_not_a_build_without_torch() -> None:
    text = ("Traceback (most recent call last):\n  File \"train.py\", line 1, in <module>\n    import torch\n"
            "ModuleNotFoundError: No module named 'torch'")
    d = explain(text)
    assert d.kind == "package_missing"
    assert "--no-build-isolation" not in d.first_step
    assert read(text) is None


def test_inductors_generated_code_failing_to_compile_stays_torch_compiles() -> None:
    # https://github.com/pytorch/pytorch/issues/106513: g++ run by torch.compile, not a package's build
    text = ("torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\nCppCompileError: C++ compile error\n\n"
            "Command:\ng++ /tmp/tmpmipqltu2/wo/cwofhk5bheglvf2kvz2fxg424zpuf5xgtndnpvzhlwb4rsdddqmp.cpp -shared -fPIC "
            "-Wall -std=c++17 -Wno-unused-variable -I/workspace/pytorch/torch/include -I/opt/conda/include/python3.8 "
            "-o /tmp/tmpmipqltu2/wo/x.so")
    d = explain(text)
    assert d.kind == "torch_compile"
    assert "cause_line" not in d.evidence


def test_a_requirement_pin_is_not_the_installed_torch() -> None:
    step = explain(next(p[3] for p in PROBES if 'BackgroundMattingV2' in p[0])).first_step
    assert "torch 1.7.0" not in step  # torch==1.7.0 is what was asked for, not what is installed


def test_a_live_exception_is_never_placed_by_a_log_line() -> None:
    try:
        raise RuntimeError("-- Configuring incomplete, errors occurred!")
    except RuntimeError as exc:
        d = explain(exc)
    assert d.kind != "extension_build_failed"
    assert claim("-- Configuring incomplete, errors occurred!") is not None  # the same words, pasted: a build's


def test_a_wrapper_that_names_no_cause_stays_unknown() -> None:
    # https://github.com/kohya-ss/sd-scripts/issues/704 (labelled not actionable): pip's output is hidden
    assert explain(_SAMPLE["b16"][5]).kind == "unknown"


def test_pip_given_a_command_word_as_a_package_says_so() -> None:
    text = ("Collecting install\n  ERROR: Could not find a version that satisfies the requirement install (from "
            "versions: none)\nERROR: No matching distribution found for install")
    assert "named 'install'" in explain(text).first_step


def test_the_held_out_half_gets_no_answer_of_another_family() -> None:
    # the round's own held-out half (figures in the final report): no reader line may send it the wrong way
    spec = importlib.util.spec_from_file_location("bench_explain_wild", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)  # the families each category answers, as the wild sample's scorer counts them
    for item_id, address, _actionable, family, _step, text in ITEMS:
        if item_id in HELDOUT:
            d = explain(text)
            assert not d.known or family in bench.family_of(d.kind), address


def _reader_patterns() -> list[tuple[str, str]]:
    from nbdebug.core.explain import _build_log
    from nbdebug.core.knowledge.install import CAUSES

    found = [(f"install.{c.name}.line", c.line) for c in CAUSES]
    found += [(f"install.{c.name}.needs", c.needs) for c in CAUSES if c.needs]
    for name, value in vars(_build_log).items():
        for pattern in value if isinstance(value, tuple) else (value,):
            if isinstance(pattern, re.Pattern):
                found.append((f"_build_log.{name}", pattern.pattern))
    return found


@pytest.mark.parametrize(("where", "pattern"), _reader_patterns())
def test_the_readers_patterns_are_linear_on_adversarial_lines(where: str, pattern: str) -> None:
    # the same complexity check as test_patterns_redos (a ratio to a linear scan, not a time) on the reader's lines
    from test_patterns_redos import _BOUND, _slowest

    ratio, n, _ = _slowest(re.compile(pattern, re.MULTILINE), pattern)
    assert ratio < _BOUND, (where, ratio, n)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux loader's wording")
def test_a_live_library_that_does_not_load_is_named_in_the_first_step() -> None:
    try:
        ctypes.CDLL("libnbdebug_absent_for_test.so.3")
    except OSError as exc:  # the loader's own error, raised for real
        d = explain(exc)
    assert d.kind == "native_library_missing"
    assert "libnbdebug_absent_for_test.so" in d.first_step
    assert "libnbdebug_absent_for_test.so.3" in d.evidence["cause_line"]
