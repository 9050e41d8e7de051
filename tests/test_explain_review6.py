"""Over-reach the sixth review found in the structure-placed and newer categories: the reviewer's own texts (written
by hand, none from a wild sample), each with the texts its category must still claim."""

from __future__ import annotations

import pytest

from nbdebug.core.explain import explain

_SITE = "/opt/env/lib/python3.11/site-packages"


def _tb(*frames: tuple[str, int, str, str], error: str) -> str:
    """A Python traceback: (path, line, function, source) per frame, then the exception line."""
    body = "".join(f'  File "{p}", line {n}, in {f}\n    {src}\n' for p, n, f, src in frames)
    return f"Traceback (most recent call last):\n{body}{error}\n"


_TOO_MANY = "ValueError: too many values to unpack (expected 2)"


# ------------------------------------------------------------------ H1: a loop over a zip or a dict is no Dataset

@pytest.mark.parametrize("source, iterable, hint", [
    ("for a, b in zip(xs, ys, zs):", "zip(xs, ys, zs)", "zip has arguments"),
    ("for a, b in zip(xs, ys, zs): pass", "zip(xs, ys, zs)", "zip has arguments"),
    ("for k, v in cfg:", "cfg", ".items()"),
])
def test_a_users_loop_over_no_loader_is_not_told_about_a_dataset(source, iterable, hint):
    d = explain(_tb(("train.py", 12, "<module>", source), error=_TOO_MANY))
    assert d.kind == "loop_items_unpack"
    assert d.evidence["iterable"] == iterable
    assert not d.first_step.startswith("Take one item") and "make the Dataset" not in d.first_step
    assert f"next(iter({iterable}))" in d.first_step and hint in d.first_step


@pytest.mark.parametrize("source", ["for imgs, labels in train_dl:", "for x, y in val_ds:",
                                    "for i, (x, y) in enumerate(pbar):", "for x, y in loader: step(x, y)"])
def test_a_users_loop_over_a_loader_still_names_the_dataset(source):
    d = explain(_tb(("train.py", 12, "<module>", source), error=_TOO_MANY))
    assert d.kind == "loop_items_unpack"
    assert d.first_step.startswith("Take one item") and "make the Dataset's __getitem__" in d.first_step
    assert not d.evidence["iterable"].endswith("step(x, y)")


def test_a_live_loop_over_a_zip_names_no_call_as_what_raised():
    xs = ys = zs = [1, 2]
    try:
        for _a, _b in zip(xs, ys, zs):  # noqa: B905 - the user's zip of three, unpacked into two names
            pass
    except ValueError as e:
        d = explain(e)
    assert d.kind == "loop_items_unpack"
    assert "Dataset" not in d.first_step and "zip has arguments" in d.first_step
    assert "zip(...)" not in str(dict(d.evidence))


# ------------------------------------------------------------------ H2: a dict of data in capitals is no registry

@pytest.mark.parametrize("source, key", [
    ("lr = CONFIG[key]", "'lr'"), ("x = batch[args.key]", "'image'"), ("state = STATE_DICT[name]", "'conv1.weight'"),
    ("ids = [VOCAB[tok] for tok in tokens]", "'the'"),
])
def test_a_key_error_on_a_dict_of_data_is_not_a_scripts_choice(source, key):
    d = explain(_tb(("train.py", 12, "<module>", source), error=f"KeyError: {key}"))
    assert d.kind == "missing_key", d.kind


def test_a_live_key_error_on_a_capitals_config_is_not_a_scripts_choice():
    CONFIG = {"lr": 0.1}  # noqa: N806 - a module-level constant as scripts name it
    key = "batch_size"
    try:
        CONFIG[key]
    except KeyError as e:
        d = explain(e)
    assert d.kind != "script_choice_missing"


@pytest.mark.parametrize("source, table", [
    ("config_class, model_class, tokenizer_class = MODEL_CLASSES[args.model_type]", "MODEL_CLASSES"),
    ("model = models_dict[opt.arch](pretrained=True)", "models_dict"),
    ("net = NETS[name](num_classes=10)", "NETS"),
    ("cls = ARCHS[arch_name]", "ARCHS"),
])
def test_a_registry_looked_up_by_a_value_is_still_a_scripts_choice(source, table):
    d = explain(_tb(("run.py", 40, "main", source), error="KeyError: 'resnet200'"))
    assert d.kind == "script_choice_missing", d.kind
    assert f"print(sorted({table}))" in d.first_step
    assert "MODEL_CLASSES" not in d.first_step or table == "MODEL_CLASSES"


# ------------------------------------------------------------------ H3: an environment assignment is no continuation

@pytest.mark.parametrize("text", [
    "bash: CUDA_VISIBLE_DEVICES=0: command not found",
    "/tmp/rv6.sh: line 2: WANDB_MODE=offline: command not found",
    "zsh: command not found: lr=0.1",
    "'CUDA_VISIBLE_DEVICES' is not recognized as an internal or external command,\noperable program or batch file.",
])
def test_an_environment_assignment_run_as_a_command_is_no_continuation_nor_a_package(text):
    assert explain(text).kind not in ("shell_argument_run", "package_missing")


@pytest.mark.parametrize("text, word", [
    ("train.sh: line 7: --gradient_accumulation_steps=4: command not found", "--gradient_accumulation_steps=4"),
    ("./run.sh: line 30: model.name=llama: command not found", "model.name=llama"),
    ("sh: 3: trainer.max-epochs=3: not found", "trainer.max-epochs=3"),
])
def test_an_option_or_a_dotted_override_run_as_a_command_is_still_a_continuation(text, word):
    d = explain(text)
    assert d.kind == "shell_argument_run"
    assert d.evidence["word"] == word


@pytest.mark.parametrize("text", ["bash: nvcc: command not found", "'nvcc' is not recognized as an internal or external command,"])
def test_a_program_the_shell_lacks_is_still_a_package(text):
    assert explain(text).kind == "package_missing"


# ------------------------------------------------------------------ M4: a missing working directory is no program

_SUB = (("/usr/lib/python3.11/subprocess.py", 1026, "__init__", "self._execute_child(args, executable, preexec_fn,"),
        ("/usr/lib/python3.11/subprocess.py", 1950, "_execute_child",
         "raise child_exception_type(errno_num, err_msg, err_filename)"))


@pytest.mark.parametrize("text", [
    _tb(("train.py", 5, "<module>", "subprocess.run(['python','x.py'], cwd='out')"), *_SUB,
        error="FileNotFoundError: [Errno 2] No such file or directory: 'out'"),
    _tb(("t.py", 5, "<module>", "subprocess.run(cmd, cwd=out_dir)"), *_SUB,
        error="FileNotFoundError: [Errno 2] No such file or directory: 'runs/exp1'"),
    _tb(("train.py", 4, "<module>", "subprocess.Popen(cmd)  # then read log"), (_SITE + "/foo.py", 9, "load", "open(path)"),
        error="FileNotFoundError: [Errno 2] No such file or directory: 'log.txt'"),
])
def test_a_missing_folder_or_file_is_no_missing_program(text):
    assert explain(text).kind != "program_missing"


@pytest.mark.parametrize("cwd", ["nbdebug_review6_missing_dir", "/nonexistent_nbdebug_review6/x"])
def test_a_live_missing_working_directory_is_no_missing_program(cwd, tmp_path, monkeypatch):
    import subprocess
    import sys

    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as info:
        subprocess.run([sys.executable, "-c", "pass"], cwd=cwd, check=False)
    assert explain(info.value).kind != "program_missing"


def test_a_program_a_library_runs_is_still_missing():
    text = _tb(("train.py", 5, "<module>", "whisper.load_audio('a.mp3')"),
               (_SITE + "/whisper/audio.py", 58, "load_audio", "out = run(cmd, capture_output=True, check=True).stdout"),
               ("/usr/lib/python3.11/subprocess.py", 548, "run", "with Popen(*popenargs, **kwargs) as process:"), _SUB[1],
               error="FileNotFoundError: [Errno 2] No such file or directory: 'ffmpeg'")
    d = explain(text)
    assert d.kind == "program_missing"
    assert d.evidence["program"] == "ffmpeg"


# ------------------------------------------------------------------ M5: a kind of data or a literal is no option

@pytest.mark.parametrize("text", ["ValueError: Unknown label type: 'continuous'", "ValueError: Invalid literal: abc",
                                  "ValueError: Unsupported image type uint16", "ValueError: Invalid value: 3"])
def test_a_kind_of_data_refused_is_no_option(text):
    assert explain(text).kind != "option_not_accepted"


def test_a_refused_value_does_not_say_a_library_refused_it_nor_keeps_backticks():
    from nbdebug.render.diagnosis import diagnosis_html, diagnosis_text

    d = explain("ValueError: mode must be one of 'train' or 'eval'")
    assert d.kind == "option_not_accepted"
    assert not d.summary.startswith("The library")
    d = explain("ValueError: Invalid `attn_implementation`: flash")
    assert d.kind == "option_not_accepted"
    assert d.evidence["option"] == "attn_implementation"
    assert "`attn_implementation`" not in diagnosis_text(d) and "`attn_implementation`" not in diagnosis_html(d)
    assert not any("packaging.python.org" in s for s in d.sources)


# ------------------------------------------------------------------ M6: an array's dimensions are not a tensor's

_SKLEARN_2D = ("ValueError: Expected 2D array, got 1D array instead:\narray=[1. 2. 3.].\nReshape your data either using "
               "array.reshape(-1, 1) if your data has a single feature or array.reshape(1, -1) if it contains a single "
               "sample.")


def test_scikit_learns_array_check_is_no_tensor_shape():
    d = explain(_SKLEARN_2D)
    assert d.kind != "shape_reported"
    assert "unsqueeze" not in str(d.fixes)


@pytest.mark.parametrize("text", ["AssertionError: expected 3 dims, got 4",
                                  "ValueError: Expected x to have 3 dimensions but got 2",
                                  "ValueError: Expected 3D tensor, but got 2D"])
def test_a_reported_dimension_count_is_still_the_shape_without_saying_a_library_or_einops(text):
    d = explain(text)
    assert d.kind == "shape_reported"
    assert not d.summary.startswith("The library") and not any("einops" in s for s in d.sources)


def test_a_live_assert_on_the_users_own_shape_does_not_blame_a_library():
    import torch

    x = torch.ones(2, 3)
    try:
        assert x.dim() == 3, f"expected 3 dims, got {x.dim()}"
    except AssertionError as e:
        d = explain(e)
    assert d.kind == "shape_reported"
    assert "library that raised" not in d.summary


# ------------------------------------------------------------------ M7: a tensor of the wrong rank or dtype is a tensor

@pytest.mark.parametrize("text", ["ValueError: x must be a tensor of rank 2",
                                  "TypeError: the value argument must be a Tensor with dtype float32",
                                  "ValueError: input is not a tensor with 4 dimensions",
                                  "TypeError: expected Tensor as element 0 in argument 0, but got Tensor"])
def test_a_tensor_of_another_rank_or_dtype_is_no_missing_tensor(text):
    assert explain(text).kind != "not_a_tensor"


@pytest.mark.parametrize("text", ["TypeError: input must be a Tensor, got tuple",
                                  "TypeError: x is not a torch.Tensor",
                                  "TypeError: expected Tensor as element 1 in argument 0, but got list"])
def test_a_value_that_is_no_tensor_still_is(text):
    assert explain(text).kind == "not_a_tensor"


# ------------------------------------------------------------------ L8: a validator's words are not ComfyUI's graph

@pytest.mark.parametrize("text", ["ValueError: Required input is missing: labels",
                                  "jsonschema.exceptions.ValidationError: Required input is missing: name",
                                  "ValueError: Return type mismatch between linked nodes: foo"])
def test_a_validators_words_alone_are_no_workflow(text):
    assert explain(text).kind != "workflow_invalid"


@pytest.mark.parametrize("text, node", [
    ("Prompt outputs failed validation\nKSampler 3:\n- Required input is missing: model", "KSampler 3"),
    ("Failed to validate prompt for output 9:\n* CheckpointLoaderSimple 4:\n  - Value not in list: ckpt_name\n"
     "Output will be ignored", "CheckpointLoaderSimple 4"),
])
def test_comfyuis_validation_is_still_the_workflow(text, node):
    d = explain(text)
    assert d.kind == "workflow_invalid"
    assert d.evidence["node"] == node


# ------------------------------------------------------------------ L9: a newer version of what saved no file

def test_an_image_made_by_a_newer_library_is_no_checkpoint():
    assert explain("Note: the image was created with a newer version of Pillow, colors may differ").kind != \
        "checkpoint_other_release"


@pytest.mark.parametrize("text", [
    "ValueError: The model file was saved with a newer version of xgboost and cannot be read.",
    "RuntimeError: This checkpoint was saved with pytorch-lightning 2.1.0, but you are running 1.9.5",
    "RuntimeError: the weights were serialized with a newer version of the library",
])
def test_a_file_saved_by_another_release_is_still_one(text):
    assert explain(text).kind == "checkpoint_other_release"


# ------------------------------------------------------------------ L10: a long text's patterns search its end

@pytest.mark.parametrize("prefix", ["step 1 loss 0.5\n" * 70_000, "x" * 400_000 + "\n", "y" * 400_000 + " "])
def test_an_error_at_the_end_of_a_long_text_is_found(prefix):
    assert explain(prefix + "ModuleNotFoundError: No module named 'timm'\n").kind == "package_missing"
    assert explain(prefix + "Traceback (most recent call last):\n  File \"t.py\", line 1, in <module>\n    import timm\n"
                   "ModuleNotFoundError: No module named 'timm'\n").kind == "package_missing"
