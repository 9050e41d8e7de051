"""A reviewer's finds on the install / build-log reader (review8b), each on the public thread's text it came from.

- torch's own libraries (libtorch_cpu.so, libc10.so, ...) are no system package: an extension failing to load one
  was built for another torch release (pytorch_scatter#173), never "apt-file search";
- conda's "Collecting package metadata" line names no package (affordance_diffusion#21);
- pip's own hint that Windows has no long path support is the cause (vulncheck-oss/sdk-python#1);
- an extension's undefined c10 / at / torch symbol is the extension's build for another torch, not the driver
  (flash-attention#667);
- a Python error raised inside pip's build of a package is its setup.py's, not the user's code (dpt-rp1-py#80);
- a compiler the system killed inside a ninja build calls for fewer jobs, not a smaller batch (vllm#3180's reply);
  Python.h's step names the Python the build shows.
"""
from __future__ import annotations

import pytest

from nbdebug.core.explain import explain

SCATTER_173 = "OSError: libtorch_cpu.so: cannot open shared object file: No such file or directory"


@pytest.mark.parametrize("library", ["libtorch_cpu.so", "libc10.so", "libtorch.so", "libtorch_python.so",
                                     "libshm.so", "libcaffe2_nvrtc.so"])
def test_torch_own_library_missing_is_an_extension_built_for_another_torch(library):
    d = explain(SCATTER_173.replace("libtorch_cpu.so", library))
    assert d.kind == "native_library_missing"
    assert "apt-file" not in d.first_step and "conda search" not in d.first_step
    assert "built for another torch release" in d.first_step and "installed torch" in d.first_step
    assert d.evidence["library"] == library


def test_torch_own_library_names_the_extension_that_loads_it():
    text = ('Traceback (most recent call last):\n  File "train.py", line 2, in <module>\n    import torch_scatter\n'
            '  File "/home/u/.local/lib/python3.8/site-packages/torch_scatter/__init__.py", line 12, in <module>\n'
            "    torch.ops.load_library(importlib.machinery.PathFinder().find_spec(f'{library}_{suffix}', "
            "[osp.dirname(__file__)]).origin)\n"
            '  File "/home/u/.local/lib/python3.8/site-packages/torch/_ops.py", line 106, in load_library\n'
            "    ctypes.CDLL(path)\n" + SCATTER_173)
    d = explain(text)
    assert d.kind == "native_library_missing"
    assert "(torch_scatter)" in d.first_step and "apt-file" not in d.first_step


def test_a_system_library_still_gets_the_system_package_step():
    d = explain("OSError: libfoo_bar.so.2: cannot open shared object file: No such file or directory")
    assert "apt-file search" in d.first_step  # the catch-all, for a library no wheel in the text ships


CONDA_21 = ("Collecting package metadata (repodata.json): done\nSolving environment: failed\n\n"
            "LibMambaUnsatisfiableError: Encountered problems while solving:\n"
            "  - nothing provides cudatoolkit >=11.1,<11.2 needed by pytorch-1.10.0-py3.6_cuda11.1_cudnn8.0.5_0")


def test_conda_collecting_package_metadata_names_no_package():
    d = explain(CONDA_21)
    assert d.kind == "conda_not_found"
    assert "package" not in d.evidence
    assert "cudatoolkit" in d.first_step


GENERIC = {"package", "packages", "metadata", "install", "pip", "python", "requirements", "git", "http", "https",
           "the", "from", "wheel", "wheels", "setup", "build"}


@pytest.mark.parametrize("text", [
    CONDA_21,
    "Collecting package metadata (current_repodata.json): failed\n\nPackagesNotFoundError: The following packages "
    "are not available from current channels:\n\n  - pytorch3d",
    "Collecting packages\nERROR: Failed building wheel for packages\nerror: subprocess-exited-with-error",
    "pip install package\nERROR: Could not find a version that satisfies the requirement package (from versions: none)",
])
def test_no_fact_is_a_generic_word(text):
    d = explain(text)
    for key, value in d.evidence.items():
        if isinstance(value, str) and key != "first_step_detail":
            assert value.lower() not in GENERIC, (key, value)


LONG_PATH = ("ERROR: Could not install packages due to an OSError: [Errno 2] No such file or directory: "
             "'C:\\\\Users\\\\u\\\\AppData\\\\Local\\\\Temp\\\\pip-install-x\\\\xformers\\\\third_party/flash-attention/"
             "csrc/a.cpp'\nHINT: This error might have occurred since this system does not have Windows Long Path "
             "support enabled. You can find information on how to enable this at "
             "https://pip.pypa.io/warnings/enable-long-paths")


def test_windows_long_path_hint_is_the_cause():
    d = explain(LONG_PATH)
    assert d.kind == "install_failed"
    assert "LongPathsEnabled" in d.first_step and "TEMP" in d.first_step
    assert "disk space" not in d.first_step
    assert "Long Path support" in d.evidence["cause_line"]


def test_an_errno_without_the_hint_keeps_install_failed_step():
    d = explain(LONG_PATH.split("\nHINT")[0])
    assert d.kind == "install_failed" and "LongPathsEnabled" not in d.first_step


@pytest.mark.parametrize("symbol", ["_ZNK3c106SymIntltEl", "_ZN2at4_ops5zeros4callEv",
                                    "_ZN5torch3jit17parseSchemaOrNameERKSs", "THPVariableClass"])
def test_extension_undefined_torch_symbol_is_the_extension_build(symbol):
    text = ("ImportError: /home/m/envs/nlp/lib/python3.11/site-packages/flash_attn_2_cuda.cpython-311-x86_64-linux-"
            f"gnu.so: undefined symbol: {symbol}\nPyTorch 2.1.0")
    d = explain(text)
    assert d.kind == "undefined_symbol"
    assert "nvidia-smi" not in d.first_step and "installed torch" in d.first_step


def test_an_undefined_cuda_symbol_is_still_version_mismatch():
    d = explain("ImportError: /x/site-packages/foo/_C.so: undefined symbol: cudaGetDriverEntryPoint")
    assert d.kind == "version_mismatch"


DPT_80 = ("pip3 install .\n    Complete output from command python setup.py egg_info:\n    Traceback (most recent call "
          "last):\n      File \"<string>\", line 1, in <module>\n      File \"/tmp/pip-req-build-cqpg7swb/setup.py\", "
          "line 44, in <module>\n        version=os.environ['TRAVIS_TAG'].replace(\"v\", \"\"),\n      File "
          "\"/usr/lib/python3.7/os.py\", line 678, in __getitem__\n        raise KeyError(key) from None\n"
          "    KeyError: 'TRAVIS_TAG'")


def test_error_raised_in_pips_build_of_a_package_is_its_setup_py():
    d = explain(DPT_80)
    assert d.kind == "extension_build_failed"
    assert "setup.py" in d.first_step and "KeyError: 'TRAVIS_TAG'" in d.first_step
    assert "keys" not in d.first_step


def test_error_in_build_env_setuptools_is_the_build():
    text = ("  Getting requirements to build wheel: finished with status 'error'\n  Traceback (most recent call last):\n"
            '    File "/tmp/pip-build-env-abc/overlay/lib/python3.10/site-packages/setuptools/dist.py", line 90, in '
            "finalize\n      value = attrs['keywords']\n  KeyError: 'keywords'")
    d = explain(text)
    assert d.kind == "extension_build_failed" and "setup.py" in d.first_step


def test_the_same_error_in_the_users_own_code_is_still_the_users():
    text = ('Traceback (most recent call last):\n  File "/home/u/train.py", line 44, in <module>\n'
            "    tag = os.environ['TRAVIS_TAG']\n  File \"/usr/lib/python3.7/os.py\", line 678, in __getitem__\n"
            "    raise KeyError(key) from None\nKeyError: 'TRAVIS_TAG'")
    assert explain(text).kind == "missing_key"


KILLED = ("  /usr/local/cuda/bin/nvcc -c csrc/a.cu -o build/a.o\n  Killed\n  ninja: build stopped: subcommand failed.\n"
          "  RuntimeError: Error compiling objects for extension\n  ERROR: Failed building wheel for vllm")


def test_compiler_killed_in_a_build_lowers_max_jobs():
    d = explain(KILLED)
    assert d.kind == "extension_build_failed"
    assert "MAX_JOBS" in d.first_step and "num_workers" not in d.first_step


def test_a_training_process_killed_is_still_host_oom():
    assert explain("Epoch 3: 40%|####  | 400/1000\nKilled\n").kind == "host_oom"


def test_python_h_names_the_python_the_build_shows():
    text = ("x86_64-linux-gnu-gcc -fPIC -I/usr/include/python3.7m -c opencood/utils/box_overlaps.c -o build/b.o\n"
            "opencood/utils/box_overlaps.c:29:10: fatal error: Python.h: No such file or directory\n"
            "error: command 'x86_64-linux-gnu-gcc' failed with exit status 1")
    d = explain(text)
    assert "python3.7-dev" in d.first_step and "3.X" not in d.first_step
    assert "python3.X-dev" in explain(text.replace("python3.7m", "python")).first_step


def test_torch_own_library_missing_while_torch_itself_imports_is_torchs_install():
    text = ('Traceback (most recent call last):\n  File "<stdin>", line 1, in <module>\n'
            '  File "/opt/conda/lib/python3.10/site-packages/torch/__init__.py", line 229, in <module>\n'
            "    from torch._C import *  # noqa: F403\n" + SCATTER_173.replace("OSError", "ImportError"))
    d = explain(text)
    assert d.kind == "native_library_missing"
    assert "uninstall torch" in d.first_step and "apt-file" not in d.first_step
