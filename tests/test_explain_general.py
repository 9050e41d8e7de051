"""Mechanisms that answer errors of one shape from any library: texts written by hand, none from the wild sample.

Each mechanism reads what the message or the traceback's structure says, not one library's wording: a shape reported
by whatever library checked it, a library's own exception class, a program a library runs that is not on PATH, an
error raised while backward runs a custom Function.  Each also has texts it must leave to other answers.
"""

from __future__ import annotations

import pytest

from nbdebug.core.explain import explain

_SITE = "/opt/env/lib/python3.11/site-packages"


def _tb(*frames: tuple[str, int, str, str], error: str) -> str:
    """A Python traceback: (path, line, function, source) per frame, then the exception line."""
    body = "".join(f'  File "{p}", line {n}, in {f}\n    {src}\n' for p, n, f, src in frames)
    return f"Traceback (most recent call last):\n{body}{error}\n"


# ------------------------------------------------------------------ a shape reported by any library

@pytest.mark.parametrize("text", [
    # einops, as it prints a failed rearrange (three ways a shape is refused)
    'einops.EinopsError:  Error while processing rearrange-reduction pattern "b c (h p1) (w p2) -> b (h w) (p1 p2 c)".\n'
    " Input tensor shape: torch.Size([8, 3, 225, 225]). Additional info: {'p1': 16, 'p2': 16}.\n"
    " Shape mismatch, can't divide axis of length 225 in chunks of 16",
    'einops.EinopsError:  Error while processing rearrange-reduction pattern "b t c -> (b t) c".\n'
    " Input tensor shape: torch.Size([4, 77]). Additional info: {}.\n Expected 3 dimensions, got 2",
    'einops.EinopsError:  Error while processing rearrange-reduction pattern "B C (P L) -> B C P L".\n'
    " Input tensor shape: torch.Size([19, 1000]). Additional info: {'L': 100}.\n"
    " Wrong shape: expected 3 dims. Received 2-dim tensor.",
    # a model library's own checks, in words no torch op uses
    "RuntimeError: Shapes are not broadcastable for mul operation",
    "ValueError: Expected the train_X to have 2 dimensions but got 3",
    "ValueError: X has shape torch.Size([10, 3]) but the model expects 4 features",
    "ValueError: feature map dimension 7 is not divisible by 2",
    # two tensors that must agree, as a Bayesian-optimisation library says it
    "TensorDimensionError: Expected train_X and train_Y to have the same number of dimensions (got train_X with "
    "dimension 3 and train_Y with dimension 2).",
    "RuntimeError: Expected mean and covariance to have the same batch shape, but got torch.Size([8]) and "
    "torch.Size([6])",
    # a count of dimensions in other words, an equation against a tensor, labels against a prior's mean
    "RuntimeError: Expected 3D tensor, but got 2D",
    "ValueError: Expected x to have ndim 3 but got 2",
    "TensorDimensionError: An explicit output dimension is required. Expected Y with dimension 2 (got Y.dim()=1).",
    "RuntimeError: einsum(): the number of subscripts in the equation (3) does not match the number of dimensions (2) "
    "for operand 0 and no ellipsis was given",
    "RuntimeError: the shapes of the prior mean and the training labels are mismatched.",
    "AssertionError: input and baseline must have the same shape",
    # two counts of the data that must agree, from a graph library
    "GraphError: Expected number of edge features to match number of edges (len(src)). Got 310 and 312 instead.",
])
def test_a_shape_any_library_reports_is_a_shape_answer(text):
    d = explain(text)
    assert d.kind == "shape_reported"
    assert "shape" in d.first_step


def test_a_size_that_does_not_divide_is_named_with_its_numbers():
    d = explain('einops.EinopsError:  Error while processing rearrange-reduction pattern "b c (h p) w -> b c h p w".\n'
                " Input tensor shape: torch.Size([2, 3, 30, 32]). Additional info: {'p': 4}.\n"
                " Shape mismatch, can't divide axis of length 30 in chunks of 4")
    assert d.evidence["reported_shape"] == "torch.Size([2, 3, 30, 32])"
    assert "An axis of length 30 does not split into parts of 4." in d.summary


def test_a_shape_reported_after_the_launcher_line_is_the_answer_not_the_launcher():
    text = ('einops.EinopsError:  Error while processing rearrange-reduction pattern "b n (a t) -> b n a t".\n'
            " Input tensor shape: torch.Size([32, 4000]). Additional info: {'t': 400}.\n"
            " Wrong shape: expected 3 dims. Received 2-dim tensor.\n"
            "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 4121) of "
            "binary: /usr/bin/python")
    assert explain(text).kind == "shape_reported"


@pytest.mark.parametrize(("text", "kind"), [
    # torch's own wording keeps its own category (it knows the operation and the layer)
    ("RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x10 and 20x5)", "shape_mismatch"),
    # a checkpoint's parameter of another shape is the state dict's question
    ("RuntimeError: Error(s) in loading state_dict for Net:\n\tsize mismatch for fc.weight: copying a param with "
     "shape torch.Size([10, 512]) from checkpoint, the shape in current model is torch.Size([2, 512]).",
     "size_mismatch_state_dict"),
])
def test_torch_and_checkpoint_shapes_keep_their_own_answers(text, kind):
    assert explain(text).kind == kind


@pytest.mark.parametrize("text", [
    'einops.EinopsError:  Error while processing rearrange-reduction pattern "b c -> b c d".\n'
    " Input tensor shape: torch.Size([2, 3]). Additional info: {}.\n"
    " Identifiers only on one side of expression (should be on both): {'d'}",
    "einops.EinopsError: Ellipsis found in right side, but not left side of a pattern b c -> b c ...",
    "EinopsError: Unknown axis k in pattern",
    'EinopsError: Imbalanced parentheses in pattern: "b (c h"',
])
def test_a_pattern_written_wrong_is_no_shape(text):
    assert explain(text).kind == "pattern_invalid"


# ------------------------------------------------------------------ an error raised while backward runs a Function

def test_a_pasted_attribute_error_cut_at_torchs_backward_is_a_custom_functions_backward():
    text = ("AttributeError: 'SoftClampFunction' object has no attribute 'saved_mask'\n" + _tb(
        ("/home/u/proj/train.py", 88, "step", "loss.backward()"),
        ("/opt/env/lib/python3.8/site-packages/torch/_tensor.py", 255, "backward",
         "torch.autograd.backward(self, gradient, retain_graph, create_graph, inputs=inputs)"),
        ("/opt/env/lib/python3.8/site-packages/torch/autograd/__init__.py", 147, "backward",
         "Variable._execution_engine.run_backward("), error="").rstrip())
    d = explain(text)
    assert d.kind == "backward_function_raised"
    assert "train.py, line 88" in d.summary  # the line that started backward, named as such


def test_a_live_custom_function_whose_backward_reads_an_unset_attribute():
    import torch

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            if x.sum() > 1e9:  # the attribute is set on one branch only
                ctx.scale = 2.0
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * ctx.scale

    x = torch.ones(3, requires_grad=True)
    with pytest.raises(AttributeError) as info:
        Scale.apply(x).sum().backward()
    d = explain(info.value)
    assert d.kind == "backward_function_raised"
    assert "in backward" in d.evidence["where"]


@pytest.mark.parametrize(("text", "kind"), [
    # the same class outside backward: the user's own line
    (_tb(("/home/u/proj/train.py", 12, "main", "out.logits.mean()"),
         error="AttributeError: 'tuple' object has no attribute 'logits'"), "wrong_object_attribute"),
    # the engine's own check raised in backward keeps its category
    (_tb(("/home/u/proj/train.py", 88, "step", "loss.backward()"),
         (f"{_SITE}/torch/autograd/__init__.py", 147, "backward", "Variable._execution_engine.run_backward("),
         error="RuntimeError: one of the variables needed for gradient computation has been modified by an inplace "
               "operation: [torch.FloatTensor [4, 8]], which is output 0 of ReluBackward0, is at version 1; expected "
               "version 0 instead."), "inplace_autograd"),
])
def test_errors_outside_a_functions_backward_keep_their_answers(text, kind):
    assert explain(text).kind == kind


# ------------------------------------------------------------------ a program a library runs, not on PATH

_SUBPROCESS = (("/home/u/app/transcribe.py", 31, "main", "audio = decode(path)"),
               (f"{_SITE}/audiotools/io.py", 58, "decode", "out = subprocess.run(cmd, capture_output=True).stdout"),
               ("/usr/lib/python3.11/subprocess.py", 548, "run", "with Popen(*popenargs, **kwargs) as process:"),
               ("/usr/lib/python3.11/subprocess.py", 1953, "_execute_child",
                "raise child_exception_type(errno_num, err_msg, err_filename)"))


@pytest.mark.parametrize("error", [
    "FileNotFoundError: [Errno 2] No such file or directory: 'sox'",
    # Windows, in the user's language: the class and the number say it
    "FileNotFoundError: [WinError 2] Das System kann die angegebene Datei nicht finden",
])
def test_a_program_subprocess_cannot_start_is_missing_or_off_path(error):
    d = explain(_tb(*_SUBPROCESS, error=error))
    assert d.kind == "program_missing"
    assert "PATH" in d.first_step


def test_a_live_program_that_is_not_installed():
    import subprocess

    with pytest.raises(FileNotFoundError) as info:
        subprocess.run(["nbdebug-test-no-such-program", "-version"], check=False)
    d = explain(info.value)
    assert d.kind == "program_missing"
    assert d.evidence["program"] == "nbdebug-test-no-such-program"


def test_a_missing_data_file_is_no_missing_program():
    text = _tb(("/home/u/app/train.py", 9, "main", "df = open('data/train.csv')"),
               error="FileNotFoundError: [Errno 2] No such file or directory: 'data/train.csv'")
    assert explain(text).kind != "program_missing"


# ------------------------------------------------------------------ a library's own check that a package imports

@pytest.mark.parametrize("text", [
    "ImportError: mmpose has not been installed. Import mmpose failed.",
    "RuntimeError: pycocotools has not been installed, please install it first",
])
def test_a_package_said_not_installed_in_any_tense_is_missing(text):
    assert explain(text).kind == "package_missing"


# ------------------------------------------------------------------ messages of a kind, from any project

@pytest.mark.parametrize("text", [
    "Cloning into 'stable-diffusion-webui'...\nerror: RPC failed; curl 92 HTTP/2 stream 5 was not closed cleanly\n"
    "fatal: early EOF\nfatal: fetch-pack: invalid index-pack output",
    "error: 4721 bytes of body are still expected\nfetch-pack: unexpected disconnect while reading sideband packet",
])
def test_a_git_transfer_cut_by_the_network_is_a_failed_fetch(text):
    d = explain(text)
    assert d.kind == "git_fetch_failed"
    assert "network" in d.first_step


@pytest.mark.parametrize(("text", "node"), [
    ("got prompt\nFailed to validate prompt for output 9:\n* SaveImage 9:\n  - Required input is missing: images\n"
     "Output will be ignored", "SaveImage 9"),
    ("Prompt outputs failed validation\nFaceDetailer:\n- Return type mismatch between linked nodes: bbox_detector, "
     "SEGM_DETECTOR != BBOX_DETECTOR", "FaceDetailer"),
])
def test_a_workflow_comfyui_refuses_names_the_node(text, node):
    d = explain(text)
    assert d.kind == "workflow_invalid"
    assert d.evidence["node"] == node


@pytest.mark.parametrize("text", [
    "TypeError: cannot assign 'torchvision.ops.misc.FrozenBatchNorm2d' as child module 'bn1' (torch.nn.Module or None "
    "expected)",
    "TypeError: cannot assign 'torch.FloatTensor' as parameter 'weight' (torch.nn.Parameter or None expected)",
])
def test_a_value_of_another_kind_assigned_to_a_module_is_the_codes_value(text):
    assert explain(text).kind == "wrong_object_attribute"


def test_a_live_tensor_assigned_to_a_parameter():
    import torch

    layer = torch.nn.Linear(2, 2)
    with pytest.raises(TypeError) as info:
        layer.weight = torch.zeros(2, 2)  # a plain tensor, not nn.Parameter(...)
    assert explain(info.value).kind == "wrong_object_attribute"


def test_a_message_only_old_torch_prints_asks_for_a_newer_torch():
    d = explain("RuntimeError: forward hooks should never return any values, but '<function attribute_hook at "
                "0x7f2a1c>' didn't return None")
    assert d.kind == "torch_too_old"
    assert "torch 1.2" in d.summary


@pytest.mark.parametrize(("text", "module"), [
    # a flag a module sets only when its optional import succeeded
    ("NameError: name 'is_xformers_available' is not defined", "xformers"),
    ("NameError: name 'APEX_AVAILABLE' is not defined", None),
])
def test_an_optional_imports_flag_never_defined_is_a_missing_package(text, module):
    d = explain(text)
    assert d.kind == "package_missing"
    assert d.evidence.get("module") == module


def test_any_other_undefined_name_is_no_missing_package():
    assert explain("NameError: name 'train_loader' is not defined").kind != "package_missing"


@pytest.mark.parametrize("text", [
    "ValueError: Input contains NaN, infinity or a value too large for dtype('float64').",
    "ValueError: Input X contains NaN.",
    "ValueError: The parameter scale has invalid values",
])
def test_a_library_finding_nan_in_its_input_is_a_nan_answer(text):
    assert explain(text).kind == "nan_loss"


@pytest.mark.parametrize("text", [
    "RuntimeError: `torch.cuda.amp.autocast(args...)` is deprecated and no longer supported. Please use "
    "`torch.amp.autocast('cuda', args...)` instead.",
    "NotImplementedError: `fit_gpytorch_model` has been removed since BoTorch 0.9; use `fit_gpytorch_mll` instead.",
    "ImportError: The module `mylib.layers.legacy` no longer provides `GatedBlock`; it moved to `mylib.layers`.",
])
def test_an_api_a_release_removed_is_a_version_answer(text):
    assert explain(text).kind == "api_missing"


@pytest.mark.parametrize(("text", "saved_with"), [
    ("ValueError: The checkpoint was saved with pytorch-lightning 2.2.1, but you are running 1.9.5.",
     "pytorch-lightning 2.2.1"),
    ("RuntimeError: This index was created with a newer version of the library and cannot be read.", None),
])
def test_a_file_saved_by_another_release_names_the_release(text, saved_with):
    d = explain(text)
    assert d.kind == "checkpoint_other_release"
    assert d.evidence.get("saved_with") == saved_with


@pytest.mark.parametrize(("text", "kind"), [
    # torch.utils.cpp_extension's build, as the error it raises names it
    ("subprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit status 1.",
     "extension_build_failed"),
    # uv's resolver finding no releases that fit (pins that disagree: pip_conflict since the ninth sample's round)
    ("  × No solution found when resolving dependencies:\n  ╰─▶ Because torchaudio==2.1.0 depends on torch==2.1.0 and "
     "you require torch==2.4.0, we can conclude that your requirements are unsatisfiable.", "pip_conflict"),
    # conda unable to reach its channel
    ("CondaHTTPError: HTTP 000 CONNECTION FAILED for url <https://conda.anaconda.org/conda-forge/linux-64/repodata.json>",
     "install_failed"),
])
def test_install_tools_failures_in_their_other_wordings(text, kind):
    assert explain(text).kind == kind


def test_a_live_shape_a_models_own_check_reports_names_the_module_and_its_input():
    import torch

    class Patches(torch.nn.Module):
        def forward(self, x):
            if x.dim() != 4:
                raise ValueError(f"Expected input to have 4 dimensions, got {x.dim()}")
            return x

    model = torch.nn.Sequential(torch.nn.Identity(), Patches())
    with pytest.raises(ValueError) as info:
        model(torch.zeros(3, 32, 32))  # (C, H, W): the batch dimension is missing
    d = explain(info.value, roots={"model": model})
    assert d.kind == "shape_reported"
    assert d.evidence["module"] == "model.1"
    assert d.evidence["module_input_shapes"] == {"x": [3, 32, 32]}


def test_an_op_without_a_cuda_kernel_in_this_build_is_a_build_mismatch():
    # a CPU torchvision next to a CUDA torch
    d = explain("NotImplementedError: Could not run 'torchvision::roi_align' with arguments from the 'CUDA' backend. "
                "This could be because the operator doesn't exist for this backend")
    assert d.kind == "version_mismatch"


@pytest.mark.parametrize(("text", "option"), [
    ("ValueError: lr_scheduler must be one of ['linear', 'cosine', 'constant'], got 'cosin'", None),
    ("ValueError: Unsupported pooling 'gem'. Choose from ['avg', 'max']", None),
    ("AssertionError: split should be either 'train' or 'test'", None),
    ("ValueError: Unknown loss 'focal2'", "loss"),
    ("ValueError: Invalid sampler_type: None", "sampler_type"),
])
def test_a_value_an_option_does_not_take_is_named_with_both_readings(text, option):
    d = explain(text)
    assert d.kind == "option_not_accepted"
    assert d.evidence.get("option") == option
    assert "release" in d.first_step  # a misspelt value, or one another release accepts


@pytest.mark.parametrize(("text", "kind"), [
    # what the value is says more: a device string, a registry's name
    ("RuntimeError: Invalid device string: 'cuda:0,1'", None),
    ("RuntimeError: Unknown model (vit_base_patch99)", "registry_name_missing"),
])
def test_values_of_a_known_kind_keep_their_answers(text, kind):
    d = explain(text)
    assert d.kind != "option_not_accepted"
    if kind is not None:
        assert d.kind == kind


@pytest.mark.parametrize("text", [
    "ValueError: shape mismatch while loading checkpoint weights for layer4.1.conv2",
    "RuntimeError: Shape mismatch when copying a param from the pretrained model: got [256] expected [512]",
])
def test_a_checkpoints_shape_mismatch_is_not_a_shape_a_library_reported(text):
    assert explain(text).kind != "shape_reported"


def test_a_patterns_line_that_names_a_size_is_the_shapes_question():
    d = explain("EinopsError: axis h of size 7 in pattern cannot be split: shape mismatch")
    assert d.kind == "shape_reported"


@pytest.mark.parametrize("text", [
    # a class attribute a release renamed, and a value tested with `in`: a value of another kind than the code expects
    "AttributeError: type object 'Resampling' has no attribute 'BICUBICX'",
    "TypeError: argument of type 'NoneType' is not iterable",
])
def test_values_of_another_kind_in_their_other_wordings(text):
    assert explain(text).kind == "wrong_object_attribute"


def test_a_value_refused_in_a_traceback_is_placed_by_the_frame_that_raised():
    # the code's own check: the line that raised, not a library's option
    text = _tb(("/home/u/proj/data.py", 40, "get_dataset", 'raise ValueError(f"Unknown dataset {name!r}")'),
               error="ValueError: Unknown dataset 'cifar100x'")
    assert explain(text).kind == "user_code_error"


def test_a_live_file_saved_by_another_release_shows_the_installed_versions():
    def load(path):
        raise RuntimeError(f"{path} was saved with a newer version of the library and cannot be read")

    with pytest.raises(RuntimeError) as info:
        load("index.bin")
    d = explain(info.value)
    assert d.kind == "checkpoint_other_release"
    assert any(k == "Installed" and "torch" in v for k, v in d.live.facts)


@pytest.mark.parametrize(("text", "got"), [
    ("TypeError: linear(): argument 'input' (position 1) must be Tensor, not tuple", "tuple"),
    ("TypeError: expected Tensor as element 1 in argument 0, but got list", "list"),
    ("TypeError: Input must be a torch.Tensor, got numpy.ndarray", "numpy.ndarray"),
    ("AssertionError: Given input is not a torch.Tensor", None),
    ("TypeError: conv2d() received an invalid combination of arguments - got (list, Parameter, Parameter, tuple, "
     "tuple, tuple, int), but expected one of: ...", None),
])
def test_a_value_that_is_not_a_tensor_names_what_it_is(text, got):
    d = explain(text)
    assert d.kind == "not_a_tensor"
    assert d.evidence.get("got") == got


def test_a_live_tuple_passed_to_a_layer():
    import torch

    out = (torch.zeros(2, 4), None)  # a model's output, passed on whole
    with pytest.raises(TypeError) as info:
        torch.nn.Linear(4, 2)(out)
    d = explain(info.value)
    assert d.kind == "not_a_tensor"
    assert d.evidence["got"] == "tuple"
