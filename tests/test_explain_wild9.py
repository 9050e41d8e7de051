"""Issue 23, the ninth wild sample's round: rules of evidence and message classes, on hand-written texts.

Each test names the mechanism (not a sample's text: the wild samples' texts stay out of the tests) and checks both
sides of it: the class it places, and the neighbour it must leave alone.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from nbdebug.core.explain import explain
from nbdebug.core.explain._normalize import unwrap
from nbdebug.core.explain._structure import read


def _tb(*frames: tuple[str, int, str, str], error: str) -> str:
    lines = ["Traceback (most recent call last):"]
    for path, line, func, source in frames:
        lines += [f'  File "{path}", line {line}, in {func}', f"    {source}"]
    return "\n".join(lines + [error])


# --- a signal's notice and a status code's name -------------------------------------------------------------------

def test_a_status_code_named_aborted_is_no_abort():
    # TensorFlow / XLA / gRPC's ABORTED status names the runtime's error, not a signal
    assert explain("Aborted: Session 1f2e3d4c5b6a7980 is not found error").kind != "native_crash"
    # the shell's notice stays a native crash
    assert explain("terminate called without an active exception\nAborted (core dumped)").kind == "native_crash"
    assert explain("Aborted").kind == "native_crash"


def test_a_tpu_library_missing_a_function_is_a_library_that_does_not_fit():
    text = ("2024-01-01 10:00:00.000000: F ./tensorflow/core/tpu/tpu_library_init_fns.inc:98] "
            "TpuEmbeddingEngine_ExecutePartitioner not available in this library.\n"
            "*** SIGABRT received by PID 1 (TID 1) on cpu 3 from PID 1; stack trace: ***")
    d = explain(text)
    assert d.kind == "undefined_symbol"  # the abort is the check's consequence: the check's message is the answer
    assert d.evidence["symbol"] == "TpuEmbeddingEngine_ExecutePartitioner"
    assert "TPU_LOAD_LIBRARY=0" in d.first_step and "libtpu" in d.first_step
    # the words alone, from another library, are not the TPU's
    assert explain("Error: Not available in this library. Use @grpc/proto-loader instead").kind != "undefined_symbol"


# --- a name missing from a module: whose module is it? ---------------------------------------------------------------

@pytest.mark.parametrize(("text", "kind"), [
    # a top-level module no known library owns, no file given: the project's own as easily as another package
    ("ImportError: cannot import name 'build_net' from 'nets'", "name_missing_in_module"),
    # the project's own file, by its path
    ("ImportError: cannot import name 'Net' from 'model' (/home/u/proj/model.py)", "name_missing_in_module"),
    # a known library, or a package's submodule, or an installed file: the release's question
    ("ImportError: cannot import name 'Config' from 'mmcv'", "api_missing"),
    ("ImportError: cannot import name 'runtime' from 'torch_xla'", "api_missing"),
    ("ImportError: cannot import name 'Thing' from 'somelib.sub'", "api_missing"),
    ("ImportError: cannot import name 'Thing' from 'somelib' (/opt/env/lib/python3.10/site-packages/somelib/__init__.py)",
     "api_missing"),
])
def test_a_name_missing_from_a_module_is_placed_by_whose_module_it_is(text, kind):
    assert explain(text).kind == kind


# --- files, programs and checkpoints --------------------------------------------------------------------------------

def test_a_missing_data_file_is_file_not_found_but_a_model_file_stays_the_checkpoints():
    data = _tb(("/home/u/app/train.py", 9, "main", "rows = open('data/train.csv').read()"),
               error="FileNotFoundError: [Errno 2] No such file or directory: 'data/train.csv'")
    d = explain(data)
    assert d.kind == "file_not_found" and d.evidence["path"] == "data/train.csv"
    model = _tb(("/home/u/app/train.py", 9, "main", "state = torch.load('runs/best.pt')"),
                ("/env/lib/python3.10/site-packages/torch/serialization.py", 990, "load",
                 "with _open_file_like(f, 'rb') as opened_file:"),
                error="FileNotFoundError: [Errno 2] No such file or directory: 'runs/best.pt'")
    assert explain(model).kind == "checkpoint_load_failed"
    # a bare model file's path (weights, a tokenizer's files) is not a data file's, nor a program's bare name
    for path in ("weights/model.pth", "llama/tokenizer_config.json", "ffmpeg", "/usr/local/cuda/bin/nvcc",
                 "./pretrained/resnet50"):
        assert explain(f"FileNotFoundError: [Errno 2] No such file or directory: '{path}'").kind != "file_not_found"


def test_a_live_missing_program_is_no_missing_file():
    with pytest.raises(FileNotFoundError) as info:
        subprocess.run(["nbdebug-test-no-such-program-9"], check=False)
    assert explain(info.value).kind == "program_missing"


def test_a_live_missing_file_is_file_not_found():
    with pytest.raises(FileNotFoundError) as info:
        open("/nonexistent-nbdebug-dir/data.csv")  # noqa: SIM115 - the error is the point
    assert explain(info.value).kind == "file_not_found"


# --- notebooks -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "usage: ipykernel_launcher.py [-h] [--lr LR]\nipykernel_launcher.py: error: unrecognized arguments: -f "
    "/home/u/.local/share/jupyter/runtime/kernel-0a1b2c3d-0000-4000-8000-000000000000.json",
    "An exception has occurred, use %tb to see the full traceback.\n\nSystemExit: 2",
])
def test_argparse_reading_the_kernels_command_line(text):
    d = explain(text)
    assert d.kind == "argparse_in_notebook"
    assert "parse_args(" in d.first_step


def test_a_scripts_own_usage_error_stays_the_tools():
    assert explain("usage: train.py [-h] --data DATA\ntrain.py: error: the following arguments are required: "
                   "--data").kind == "cli_usage"


def test_colab_frames_kept_as_markdown_links_are_read():
    text = ("NameError                                 Traceback (most recent call last)\n"
            "[<ipython-input-3-0123456789ab>](https://localhost:8080/#) in <cell line: 1>()\n"
            "----> 1 x = np.zeros(3)\n\n"
            "NameError: name 'np' is not defined")
    s = read(text)
    assert [f.path for f in s.frames] == ["<ipython-input-3-0123456789ab>"]
    assert explain(text).kind == "user_code_error"  # the cell's own line


# --- NameError and StopIteration -------------------------------------------------------------------------------------

def test_a_name_error_without_frames_is_not_guessed():
    # a NameError quoted without its frames (a title, an app's log line) shows nothing of whose code used the name:
    # a library's own missing import (pyg's 'Tensor'), an app whose torch import failed ('torch' in its log), the
    # user's cell; such guesses were wrong on unopened samples, so the text stays unknown (live: its frames answer)
    assert explain("NameError: name 'np' is not defined").kind == "unknown"
    assert explain("12:00:00 ERROR    Exception: name 'torch' is not defined").kind == "unknown"
    # raised in a library's own file while it imports: not the user's missing import
    lib = _tb(("/home/u/app/run.py", 1, "<module>", "import somelib"),
              ("/env/lib/python3.10/site-packages/somelib/__init__.py", 12, "<module>", "for name in dir(_C):"),
              error="NameError: name '_C' is not defined")
    assert explain(lib).kind != "user_code_error"


def test_a_live_name_error_is_answered_by_its_frame():
    try:
        exec("undefined_name_nbdebug_9 + 1", {})  # noqa: S102 - a NameError raised by real code
    except NameError as e:
        assert explain(e).kind in {"unknown", "user_code_error"}  # its frame, never a guessed category


def test_next_on_an_empty_loader():
    text = _tb(("/home/u/app/train.py", 30, "main", "batch = next(iter(loader))"),
               ("/env/lib/python3.10/site-packages/torch/utils/data/dataloader.py", 630, "__next__",
                "data = self._next_data()"),
               error="StopIteration")
    assert explain(text).kind == "iterator_empty"
    assert explain("RuntimeError: generator raised StopIteration").kind != "iterator_empty"


# --- dicts keyed by tensors ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "KeyError: tensor(3)",
    "KeyError: \"tensor(159, device='cuda:0')\"",
    "KeyError: Parameter containing:\ntensor([[0.1, 0.2]], requires_grad=True)",
])
def test_a_dict_looked_up_by_a_tensor(text):
    assert explain(text).kind == "tensor_key_missing"


def test_a_plain_missing_key_stays_missing_key():
    assert explain("KeyError: 'labels'").kind == "missing_key"


# --- messages wrapped over lines -------------------------------------------------------------------------------------

def test_a_message_wrapped_at_a_terminals_width_is_read_as_one_line():
    text = ("RuntimeError: Detected that PyTorch and torchvision were compiled with different\n"
            "CUDA versions. PyTorch has CUDA Version=11.7 and torchvision has CUDA \n"
            "Version=11.8. Please reinstall the torchvision that matches your PyTorch \ninstall.")
    assert explain(text).kind == "version_mismatch"


def test_unwrap_keeps_frames_short_lines_and_new_messages_apart():
    text = ("short line\nnext line\n"
            "  File \"/a/b.py\", line 3, in f\n    x = 1\n"
            "a line that is long enough to have been wrapped by a terminal at its width\n"
            "RuntimeError: a new message")
    assert unwrap(text) == text
    wrapped = "a line that is long enough to have been wrapped by a terminal at its width and\ngoes on here"
    assert unwrap(wrapped) == wrapped.replace("\n", " ")


# --- pins, ports, servers, kernels -----------------------------------------------------------------------------------

def test_pins_that_disagree_are_not_a_missing_wheel():
    d = explain("ERROR: torchvision 0.6.1 has requirement torch==1.5.1, but you'll have torch 1.5.0 which is "
                "incompatible.")
    assert d.kind == "pip_conflict"
    assert d.evidence == {"package": "torchvision 0.6.1", "requirement": "torch==1.5.1", "installed": "torch 1.5.0"}
    assert explain("ERROR: No matching distribution found for torch==9.9").kind == "no_matching_wheel"


def test_a_web_servers_port_is_not_the_rendezvous_port():
    assert explain("ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 7860): address "
                   "already in use").kind == "server_port_in_use"
    assert explain("RuntimeError: The server socket has failed to listen on any local network address. The server "
                   "socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).").kind == \
        "address_in_use"


def test_a_refused_request_to_a_local_server():
    text = ("requests.exceptions.ConnectionError: HTTPConnectionPool(host='localhost', port=8097): Max retries exceeded "
            "with url: /events (Caused by NewConnectionError('<urllib3.connection.HTTPConnection object at 0x7f>: "
            "Failed to establish a new connection: [Errno 111] Connection refused'))")
    d = explain(text)
    assert d.kind == "local_service_unreachable" and d.evidence["port"] == 8097


def test_torchs_autograd_checks():
    for text in ("RuntimeError: torch/csrc/autograd/input_buffer.cpp:14: add: Assertion `pos >= 0` failed.",
                 'RuntimeError: x INTERNAL ASSERT FAILED at "C:\\\\torch\\\\csrc\\\\autograd\\\\engine.cpp":1, please '
                 "report a bug to PyTorch."):
        assert explain(text).kind == "autograd_internal_assert", text
    # an engine message that names the user's mistake keeps its own category
    assert explain("RuntimeError: Trying to backward through the graph a second time").kind == "backward_twice"


def test_sdpa_without_an_allowed_kernel():
    assert explain("RuntimeError: No available kernel.  Aborting execution.").kind == "sdpa_no_kernel"


@pytest.mark.parametrize(("text", "kind"), [
    ("RuntimeError: expected type torch.FloatTensor but got torch.cuda.FloatTensor", "device_mismatch"),
    ("RuntimeError: expected type torch.FloatTensor but got torch.DoubleTensor", "unknown"),
    ("RuntimeError: cannot perform reduction function max on tensor with no elements because the operation does not "
     "have an identity", "shape_reported"),
    ("RuntimeError: Internal Triton PTX codegen error", "torch_compile"),
    ("FATAL: this function is for sm80, but was built for sm75", "version_mismatch"),
    ("RuntimeError: torch_xla/csrc/aten_xla_bridge.cpp:62 : Check failed: xtensor", "xla_input_on_cpu"),
    ("    + CategoryInfo          : ObjectNotFound: (accelerate:String) [], CommandNotFoundException",
     "package_missing"),
    ("ValueError: Invalid log settings: foo, must be a comma separated list\nValid settings:\nall, aot, dynamo",
     "option_not_accepted"),
])
def test_message_classes_of_the_round(text, kind):
    assert explain(text).kind == kind


def test_the_round_runs_in_a_fresh_interpreter():
    # the new categories load with the rest of the table (no import cycle through the guards)
    out = subprocess.run([sys.executable, "-c", "from nbdebug.core.explain import explain; "
                          "print(explain('KeyError: tensor(1)').kind)"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "tensor_key_missing"


def test_workers_started_before_the_main_guard():
    text = ("RuntimeError: \n        An attempt has been made to start a new process before the\n        current process "
            "has finished its bootstrapping phase.")
    d = explain(text)
    assert d.kind == "spawn_main_guard" and "__main__" in d.first_step


@pytest.mark.parametrize("text", [
    "OSError: Can't load tokenizer for 'org/some-model'. If you were trying to load it from "
    "'https://huggingface.co/models', make sure you don't have a local directory with the same name.",
    "huggingface_hub.errors.GatedRepoError: 403 Client Error. Cannot access gated repo for url "
    "https://huggingface.co/org/some-model/resolve/main/config.json.",
])
def test_the_hub_refusing_a_models_files_is_the_checkpoints_question_with_the_hubs_step(text):
    d = explain(text)
    assert d.kind == "checkpoint_load_failed"
    assert "huggingface-cli login" in d.first_step
