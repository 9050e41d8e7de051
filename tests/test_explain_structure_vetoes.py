"""The failing line's own code overrules its message's category: texts written by hand, none from a wild sample.

A shell running an option as a command is a broken line continuation, not a missing program; an unpacking error on a
``for`` line is about the items the loop iterates (a loader's batches); a ``KeyError`` looking a table up by a
command-line option's value is a value the script does not support; a ``std::bad_alloc`` with no size raised while a
library is imported (or by a ``torch.ops`` call) is a native library built for another torch, not host memory.  Each
veto also has texts it must leave to the message's own answer.
"""

from __future__ import annotations

import pytest

from nbdebug.core.explain import explain

_SITE = "/opt/env/lib/python3.11/site-packages"


def _tb(*frames: tuple[str, int, str, str], error: str) -> str:
    """A Python traceback: (path, line, function, source) per frame, then the exception line."""
    body = "".join(f'  File "{p}", line {n}, in {f}\n    {src}\n' for p, n, f, src in frames)
    return f"Traceback (most recent call last):\n{body}{error}\n"


# ------------------------------------------------------------------ an argument the shell ran as a command

@pytest.mark.parametrize("text, word", [
    ("run_finetune.sh: line 9: --learning_rate: command not found", "--learning_rate"),
    ("scripts/train.sh:line 22: trainer.max_epochs=10: command not found", "trainer.max_epochs=10"),
    ("launch.sh: line 4: --num_processes=8: command not found", "--num_processes=8"),
    ("zsh: command not found: --batch_size", None),
    ("sh: 12: --output_dir: not found", None),
])
def test_an_option_the_shell_ran_as_a_command_is_a_broken_continuation(text, word):
    d = explain(text)
    assert d.kind == "shell_argument_run", (text, d.kind)
    assert "backslash" in d.first_step
    if word is not None:
        assert d.evidence.get("word") == word


@pytest.mark.parametrize("text", [
    "-bash: deepspeed: command not found",
    "bash: nvcc: command not found",
    "sh: 1: ffmpeg: not found",
    "zsh: command not found: accelerate",
])
def test_a_program_the_shell_does_not_find_is_still_missing(text):
    assert explain(text).kind == "package_missing"


def test_a_python_error_before_the_shell_line_keeps_its_own_answer():
    text = ("Traceback (most recent call last):\n  File \"demo.py\", line 3, in <module>\n    import segtools\n"
            "ModuleNotFoundError: No module named 'segtools'\n--config-file: command not found\n")
    assert explain(text).kind == "package_missing"


# ------------------------------------------------------------------ an unpacking error on a for line

@pytest.mark.parametrize("source, error", [
    ("for i, (images, masks) in enumerate(train_loader):", "ValueError: too many values to unpack (expected 2)"),
    ("for x, y, w in loader:", "ValueError: not enough values to unpack (expected 3, got 2)"),
    ("for step, batch_pair in enumerate(dl):  # two views", "ValueError: too many values to unpack (expected 2)"),
    ("images, labels = next(iter(val_loader))", "ValueError: too many values to unpack (expected 2)"),
    ("x, y = batch", "ValueError: not enough values to unpack (expected 2, got 1)"),
])
def test_an_unpacking_error_on_a_for_line_is_the_loops_items(source, error):
    text = _tb(("/home/me/proj/train.py", 88, "train", source), error=error)
    d = explain(text)
    assert d.kind == "loop_items_unpack", d.kind
    assert "next(iter(" in d.first_step
    assert d.evidence["where"].startswith("train.py, line 88")


@pytest.mark.parametrize("source", [
    "images, masks = self.split(out)",  # an assignment of a function's result: the value of the user's line
    "x = [a for a, b in pairs]",  # a comprehension's target is not the statement
])
def test_an_unpacking_error_elsewhere_keeps_the_value_answer(source):
    text = _tb(("/home/me/proj/train.py", 12, "step", source), error="ValueError: too many values to unpack (expected 2)")
    assert explain(text).kind == "wrong_object_attribute"


def test_a_librarys_own_loop_unpacking_its_own_items_is_not_the_batch():
    text = _tb(("/home/me/proj/train.py", 12, "<module>", "trainer.fit(model)"),
               (f"{_SITE}/somelib/hooks.py", 40, "run", "for name, (fn, kwargs) in self.registry.items():"),
               error="ValueError: too many values to unpack (expected 2)")
    assert explain(text).kind != "loop_items_unpack"
    text = _tb(("/home/me/proj/train.py", 12, "<module>", "trainer.fit(model)"),
               (f"{_SITE}/somelib/loop.py", 88, "run", "for images, targets in self.train_loader:"),
               error="ValueError: too many values to unpack (expected 2)")
    assert explain(text).kind == "loop_items_unpack"


def test_a_live_unpacking_error_on_a_for_line():
    batches = [(1, 2, 3), (4, 5, 6)]
    try:
        for _i, (_a, _b) in enumerate(batches):
            pass
    except ValueError as e:
        d = explain(e)
    assert d.kind == "loop_items_unpack"
    assert "enumerate(batches)" in d.summary


# ------------------------------------------------------------------ a table looked up by a command-line option

def test_a_key_error_on_a_command_line_option_is_a_value_the_script_lacks():
    text = _tb(("/home/me/examples/run_ner.py", 640, "<module>", "main()"),
               ("/home/me/examples/run_ner.py", 520, "main", "model_cls, tok_cls = MODEL_TYPES[args.arch]"),
               error="KeyError: 'deberta-v3'")
    d = explain(text)
    assert d.kind == "script_choice_missing", d.kind
    assert d.evidence["table"] == "MODEL_TYPES" and d.evidence["option"] == "args.arch"
    assert "'deberta-v3'" in d.summary


@pytest.mark.parametrize("source, table", [
    ("encoder = BACKBONES[backbone_name](pretrained=True)", "BACKBONES"),
    ("cfg_cls = MODEL_CONFIGS[cfg.model.type]", "MODEL_CONFIGS"),
])
def test_a_key_error_on_a_constant_table_looked_up_by_a_variable_is_a_value_the_code_lacks(source, table):
    text = _tb(("/home/me/proj/build.py", 30, "build", source), error="KeyError: 'convnext_xxl'")
    d = explain(text)
    assert d.kind == "script_choice_missing", d.kind
    assert d.evidence["table"] == table


@pytest.mark.parametrize("source", ["labels = batch['labels']", "value = lookup[key]", "x = table[cfg.name]",
                                    "lr = CONFIG['lr']", "w = STATE[0]"])
def test_other_key_errors_keep_the_missing_key_answer(source):
    text = _tb(("/home/me/proj/train.py", 40, "step", source), error="KeyError: 'labels'")
    assert explain(text).kind == "missing_key"


def test_a_live_key_error_on_an_option_value():
    import argparse

    args = argparse.Namespace(backbone="vit_h")
    BACKBONES = {"resnet50": 1, "vit_b": 2}  # noqa: N806 - a script's module-level table, as scripts name it
    try:
        BACKBONES[args.backbone]
    except KeyError as e:
        d = explain(e)
    assert d.kind == "script_choice_missing"
    assert d.evidence["option"] == "args.backbone"


# ------------------------------------------------------------------ a native allocation failure at import

def test_bad_alloc_while_a_library_imports_is_its_build_not_memory():
    text = _tb(("<string>", 1, "<module>", ""),
               (f"{_SITE}/torchaudio/__init__.py", 2, "<module>", "from . import _extension"),
               (f"{_SITE}/torchaudio/_extension/__init__.py", 38, "<module>", "_init_extension()"),
               (f"{_SITE}/torchaudio/_extension/utils.py", 70, "_init_extension", "torch.ops.torchaudio.cuda_version()"),
               error="MemoryError: std::bad_alloc")
    d = explain(text)
    assert d.kind == "import_failed", d.kind
    assert d.evidence["package"] == "torchaudio"


@pytest.mark.parametrize("text", [
    "MemoryError: std::bad_alloc",  # no frames: nothing says it is not the machine
    _tb(("/home/me/proj/prep.py", 10, "<module>", "data = load_all()"),
        ("/home/me/proj/prep.py", 5, "load_all", "return [np.zeros(10**10)]"), error="MemoryError"),
    _tb((f"{_SITE}/bigtable/__init__.py", 3, "<module>", "TABLE = build()"),
        error="numpy.core._exceptions._ArrayMemoryError: Unable to allocate 40.0 GiB for an array with shape "
              "(5368709120,) and data type float64"),
])
def test_a_memory_error_without_an_import_or_with_a_size_stays_host_memory(text):
    assert explain(text).kind == "host_oom"
