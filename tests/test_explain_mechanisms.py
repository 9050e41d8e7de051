"""Family answers that reach texts no list names: version requirements, shells, compilers, loaders, two libraries.

Every text here is written by hand for its structure (no text of the wild sample): a requirement stated with a version
specifier, a shell that cannot find a command, a compiler's diagnostic line, an error raised below a loader of a
model's files, a name missing in one library's frame called from another library's.  Each rule also has the texts it
must leave alone: a parameter's bound is no version, torch.compile's generated C++ is no extension build, a
signature's TypeError inside ``from_pretrained`` is no broken file, torch's ``Module.__getattr__`` is the user's model.
"""

from __future__ import annotations

import pytest

from nbdebug.core.explain import explain
from nbdebug.core.explain._structure import owner_of

_SITE = "/opt/env/lib/python3.10/site-packages"
# the warning transformers prints when a checkpoint is loaded under a new head (nearly every fine-tuning run)
_HEAD_WARNING = ("Some weights of BertForSequenceClassification were not initialized from the model checkpoint at "
                 "bert-base-uncased and are newly initialized: ['classifier.bias', 'classifier.weight']\nYou should "
                 "probably TRAIN this model on a down-stream task to be able to use it for predictions and inference.\n")


def _tb(*frames: tuple[str, int, str, str], error: str) -> str:
    """A Python traceback: (path, line, function, source) per frame, then the exception line."""
    body = "".join(f'  File "{p}", line {n}, in {f}\n    {src}\n' for p, n, f, src in frames)
    return f"Traceback (most recent call last):\n{body}{error}\n"


@pytest.mark.parametrize("text", [
    "ImportError: The video pipeline requires `moviepy>=1.0.3`; found moviepy 0.2.3",
    "RuntimeError: spacy==2.3.5 is used but incompatible. Please install spacy>=3.0.0.",
    "ValueError: Quantization needs optimum version 1.12.0 or higher",
    "AssertionError: scipy version 1.4.1 is not supported by this release",
    "ModuleNotFoundError: Requirement 'torchmetrics>=1.2.0' not met. HINT: Try running `pip install -U 'torchmetrics>=1.2.0'`",
])
def test_a_stated_version_requirement_is_an_environment_answer(text):
    d = explain(text)
    assert d.kind == "version_required"
    assert "restart the kernel" in d.first_step


def test_the_requirement_is_a_fact():
    d = explain("ImportError: This exporter requires onnx>=1.14.1 (installed: 1.12.0)")
    assert d.evidence["requirement"] == "onnx>=1.14.1"


@pytest.mark.parametrize("text", [
    "ValueError: Invalid momentum value, requires momentum >= 0.0 and got -0.5",
    "RuntimeError: requires lr >= 0.1 for the warm-up schedule",
    "RuntimeError: This kernel requires CUDA>=11.8 with compute capability >= 8.0",
])
def test_a_parameter_bound_or_the_cuda_version_is_no_package_requirement(text):
    assert explain(text).kind != "version_required"


@pytest.mark.parametrize("text", [
    "PS C:\\work> torchrun --nproc_per_node 2 train.py\ntorchrun : The term 'torchrun' is not recognized as the name of "
    "a cmdlet, function, script file, or operable program.",
    "'wandb' is not recognized as an internal or external command,\noperable program or batch file.",
    "/bin/sh: 1: tensorboard: not found",
])
def test_a_shell_that_cannot_find_a_command_is_a_missing_package(text):
    assert explain(text).kind == "package_missing"


@pytest.mark.parametrize("text", [
    "csrc/roi_align_kernel.cpp:57:9: error: 'AT_DISPATCH_FLOATING_TYPES_AND_HALF' was not declared in this scope",
    "/usr/include/c10/util/Half.h:12:3: 错误：‘constexpr’ 需要一个常量表达式",
    "src/fused.cu(118): error: identifier \"THCudaCheck\" is undefined",
    "ops\\nms.cpp(40): error C2065: 'THFloatTensor': undeclared identifier",
])
def test_a_compilers_diagnostic_is_an_extension_build(text):
    assert explain(text).kind == "extension_build_failed"


def test_torch_compile_generated_cpp_is_the_compile_family():
    text = ("torch._inductor.exc.CppCompileError: C++ compile error\n"
            "/tmp/torchinductor_ana/q4/cq4x.cpp:21:14: error: 'vec' was not declared in this scope")
    assert explain(text).kind != "extension_build_failed"


def test_an_os_error_below_from_pretrained_is_the_model_files():
    text = _tb(("infer.py", 8, "<module>", "model = AutoModelForSeq2SeqLM.from_pretrained(args.ckpt_dir)"),
               (f"{_SITE}/transformers/modeling_utils.py", 3120, "from_pretrained", "raise EnvironmentError("),
               error="OSError: Error: no weights file in ./runs/exp3 (looked for model.safetensors, pytorch_model.bin)")
    d = explain(text)
    assert d.kind == "checkpoint_load_failed"
    assert d.evidence["loader"] == "from_pretrained" and d.evidence["user_where"] == "infer.py, line 8, in <module>"
    assert "infer.py, line 8" in d.first_step


def test_an_unlisted_message_inside_torch_load_is_the_checkpoint_file():
    text = _tb(("eval.py", 30, "main", "sd = torch.load(path, map_location='cpu')"),
               (f"{_SITE}/torch/serialization.py", 1040, "load", "return _legacy_load(opened_file, map_location)"),
               (f"{_SITE}/torch/serialization.py", 1260, "_legacy_load", "magic_number = pickle_module.load(f)"),
               error="_pickle.UnpicklingError: A brand new reader complaint nobody listed")
    d = explain(text)
    assert d.kind == "checkpoint_load_failed" and d.evidence["loader"] == "torch.load"
    assert "asked torch.load to read" in d.first_step
    assert "was raised while torch.load was reading them (serialization.py, line 1040, in load)" in d.summary


def test_the_users_line_calling_a_loader_places_an_error_raised_below_it():
    text = _tb(("load.py", 4, "<module>", "weights = torch.load(fs.open('s3://bucket/ckpt.pt'))"),
               (f"{_SITE}/s3fs/core.py", 77, "_fetch_range", "raise OSError(msg)"),
               error="OSError: the object was replaced while it was being read")
    assert explain(text).kind == "checkpoint_load_failed"


@pytest.mark.parametrize("text", [
    # a keyword the model's __init__ does not take: a signature, the call's or the release's
    _tb(("run.py", 3, "<module>", "m = AutoModel.from_pretrained(name, use_flash=True)"),
        (f"{_SITE}/transformers/modeling_utils.py", 3500, "from_pretrained", "model = cls(config, **kwargs)"),
        error="TypeError: __init__() got an unexpected keyword argument 'use_flash'"),
    # the class a pickle names is missing in the loading script: define or import it, the file is fine
    _tb(("predict.py", 12, "<module>", "net = torch.load('net.pt')"),
        (f"{_SITE}/torch/serialization.py", 1028, "load", "return _load(opened_zipfile, map_location)"),
        error="AttributeError: Can't get attribute 'TinyNet' on <module '__main__' from 'predict.py'>"),
    # a device named in the message: the device families
    _tb(("predict.py", 12, "<module>", "sd = torch.load('net.pt')"),
        (f"{_SITE}/torch/serialization.py", 1028, "load", "return _load(opened_zipfile, map_location)"),
        error="RuntimeError: Attempting to restore a tensor on device 3 that is not visible"),
    # a loader inside a distributed engine
    _tb(("train.py", 50, "<module>", "engine.load_checkpoint(out)"),
        (f"{_SITE}/deepspeed/runtime/engine.py", 2700, "load_checkpoint", "raise ValueError(msg)"),
        error="ValueError: the saved world size does not match"),
    # transformers' new-head warning, then an unrelated library error: the warning is no notice of missing files
    _HEAD_WARNING + _tb(("train.py", 60, "<module>", "trainer.train()"),
                        (f"{_SITE}/transformers/trainer.py", 1539, "train", "return inner_training_loop("),
                        (f"{_SITE}/torch/utils/data/_utils/fetch.py", 54, "fetch", "return self.collate_fn(data)"),
                        (f"{_SITE}/transformers/data/data_collator.py", 249, "__call__", "batch = pad("),
                        (f"{_SITE}/transformers/tokenization_utils_base.py", 3300, "pad", "raise ValueError("),
                        error="ValueError: You should supply an encoding or a list of encodings to this method that "
                              "includes input_ids, but you provided ['text', 'label']"),
    _HEAD_WARNING + _tb(("train.py", 30, "<module>", "trainer.fit(model, dm)"),
                        (f"{_SITE}/lightning/pytorch/loops/fit_loop.py", 300, "setup_data", "raise ValueError("),
                        error="ValueError: `Dataloader` returned 0 length. Please make sure this returns at least 1 "
                              "batch."),
    # a save (safetensors' writer below save_pretrained) is no load
    _tb(("train.py", 50, "<module>", 'model.save_pretrained("out")'),
        (f"{_SITE}/transformers/modeling_utils.py", 2500, "save_pretrained", "safe_save_file(shard, path)"),
        (f"{_SITE}/safetensors/torch.py", 284, "save_file", "serialize_file(_flatten(tensors), filename)"),
        (f"{_SITE}/safetensors/torch.py", 470, "_flatten", "raise ValueError("),
        error="ValueError: You are trying to save a non contiguous tensor: `encoder.layer.0.attention.self.query.weight`"
              " which is not allowed. It either means you are trying to save tensors which are reference of each other "
              "in which case it's recommended to save only the full tensors, and reslice at load time, or simply call "
              "`.contiguous()` on your tensor to pack it before saving."),
    # a package to install, or remote code to trust: the message states the fix, and it is not the file
    _tb(("train.py", 8, "<module>", "tok = AutoTokenizer.from_pretrained('google/mt5-small')"),
        (f"{_SITE}/transformers/models/auto/tokenization_auto.py", 700, "from_pretrained",
         "return tokenizer_class_fast.from_pretrained(name)"),
        (f"{_SITE}/transformers/tokenization_utils_fast.py", 120, "__init__", "raise ValueError("),
        error="ValueError: Couldn't instantiate the backend tokenizer from one of: \n(1) a `tokenizers` library "
              "serialization file, \n(2) a slow tokenizer instance to convert or \n(3) an equivalent slow tokenizer "
              "class to instantiate and convert. \nYou need to have sentencepiece installed to convert a slow "
              "tokenizer to a fast one."),
    _tb(("train.py", 8, "<module>", "model = AutoModel.from_pretrained('THUDM/chatglm-6b')"),
        (f"{_SITE}/transformers/models/auto/auto_factory.py", 456, "from_pretrained", "config = AutoConfig.load(name)"),
        (f"{_SITE}/transformers/dynamic_module_utils.py", 535, "resolve_trust_remote_code", "raise ValueError("),
        error="ValueError: Loading THUDM/chatglm-6b requires you to execute the configuration file in that repo on "
              "your local machine. Make sure you have read the code there to avoid malicious use, then set the option "
              "`trust_remote_code=True` to remove this error."),
])
def test_the_loader_rule_gives_way(text):
    assert explain(text).kind != "checkpoint_load_failed"


def test_a_name_missing_in_one_library_called_from_another_is_two_releases():
    text = _tb(("app.py", 9, "<module>", "emb = encoder.encode(texts)"),
               (f"{_SITE}/sentencekit/encoder.py", 120, "encode", "mask = batch.attention_mask_2d"),
               (f"{_SITE}/tokenkit/batch.py", 40, "__getattr__", "raise AttributeError(item)"),
               error="AttributeError: attention_mask_2d")
    d = explain(text)
    assert d.kind == "libraries_disagree"
    assert (d.evidence["package"], d.evidence["caller"]) == ("tokenkit", "sentencekit")
    assert "pip show sentencekit tokenkit" in d.first_step
    code = d.fixes[0].code  # the two names filled in: copied as it is, it runs
    assert "for d in ('sentencekit', 'tokenkit')" in code and "<" not in code and "CALLER" not in code


@pytest.mark.parametrize("text", [
    # torch's Module.__getattr__: an attribute of the user's own model
    _tb(("train.py", 20, "<module>", "trainer.train()"),
        (f"{_SITE}/transformers/trainer.py", 2000, "train", "self.model.gradient_checkpointing_enable()"),
        (f"{_SITE}/torch/nn/modules/module.py", 1900, "__getattr__", "raise AttributeError("),
        error="AttributeError: 'MyNet' object has no attribute 'gradient_checkpointing_enable'"),
    # a None where an object was expected: a value, not a release
    _tb(("app.py", 9, "<module>", "emb = encoder.encode(texts)"),
        (f"{_SITE}/sentencekit/encoder.py", 120, "encode", "mask = self.tok(texts).mask"),
        (f"{_SITE}/tokenkit/batch.py", 40, "wrap", "return value.mask"),
        error="AttributeError: 'NoneType' object has no attribute 'mask'"),
])
def test_the_two_libraries_rule_gives_way(text):
    assert explain(text).kind != "libraries_disagree"


def test_an_egg_being_built_is_its_package():
    assert owner_of("build/bdist.linux-x86_64/egg/torchvision/datasets/folder.py") == "torchvision"
    assert owner_of("/home/u/envs/py/lib/python3.6/site-packages/detkit-0.3-py3.6-linux.egg/detkit/ops.py") == "detkit"
    assert owner_of("/home/u/project/eggs/train.py") == "user"


def test_a_librarys_own_lookup_failing_is_not_a_call_it_rejected():
    own = _tb(("qa.py", 6, "<module>", "answer = reader(question=q, context=c)"),
              (f"{_SITE}/readerkit/pipeline.py", 410, "__call__", "best = [scores[s] for s in starts]"),
              error="KeyError: 0")
    assert explain(own).kind == "unknown"
    # a key the call asked for, looked up by the library's pop / get: the call's key
    asked = _tb(("cfg.py", 6, "<module>", "trainer = Trainer.from_params(params)"),
                (f"{_SITE}/confkit/params.py", 250, "pop", "value = self.params.pop(key)"),
                error="KeyError: 'scheduler'")
    assert explain(asked).kind == "library_raised"


def test_a_library_unpacking_its_own_result_is_not_the_users_object():
    text = _tb(("bench.py", 25, "main", "runner.run()"),
               (f"{_SITE}/benchkit/runner.py", 665, "run", "mem, summary = self.measure(name, batch)"),
               error="ValueError: too many values to unpack (expected 2)")
    assert explain(text).kind == "unknown"
    users = _tb(("bench.py", 25, "main", "mem, summary = runner.run()"),
                error="ValueError: too many values to unpack (expected 2)")
    assert explain(users).kind != "unknown"


def test_cudas_lazy_initialisation_in_the_frames_is_the_gpu_being_unusable():
    frames = (("fit.py", 14, "<module>", "net = net.to('cuda')"),
              (f"{_SITE}/torch/nn/modules/module.py", 1340, "to", "return self._apply(convert)"),
              (f"{_SITE}/torch/cuda/__init__.py", 319, "_lazy_init", "torch._C._cuda_init()"))
    assert explain(_tb(*frames, error="RuntimeError: an initialisation failure nobody has listed")).kind == (
        "cuda_unavailable")
    cut = _tb(*frames, error="").rstrip("\n")  # a paste that stops in those frames
    assert explain(cut).kind == "cuda_unavailable"
    assert explain("RuntimeError: CUDA error: system has unsupported display driver / cuda driver combination"
                   ).kind == "cuda_unavailable"


def test_a_release_named_as_the_one_that_removed_a_name_is_the_environment():
    assert explain("AttributeError: `np.int_` was removed in the NumPy 2.0 release. Use `np.int64`.").kind == "api_missing"
    assert explain("ImportError: cannot use load_dataset_builder: it has been removed in datasets 3.0").kind == (
        "api_missing")


@pytest.mark.parametrize("text", [
    "CMake Error at third_party/CMakeLists.txt:88 (find_package):\n  Could not find a package configuration file",
    "/usr/bin/ld: cannot find -lcublasLt\ncollect2: error: ld returned 1 exit status",
    "nvcc fatal   : Value 'sm_100' is not defined for option 'gpu-architecture'",
])
def test_build_tools_failing_are_an_extension_build(text):
    assert explain(text).kind == "extension_build_failed"


_COLLATE = f"{_SITE}/torch/utils/data/_utils/collate.py"


@pytest.mark.parametrize(("source", "error", "step", "problem"), [
    ("raise TypeError(default_collate_err_msg_format.format(elem_type))",
     "TypeError: default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found <class "
     "'NoneType'>", "ds[i]", "not all of the same structure"),
    # a worker's default_collate stacks with out=... (shared memory), which autograd refuses: the samples' history
    ("return torch.stack(batch, 0, out=out)",
     "RuntimeError: stack(): functions with out=... arguments don't support automatic differentiation, but one of "
     "the arguments requires grad.", "detach()", "requires grad"),
])
def test_an_error_in_the_collate_step_is_the_batchs_samples(source, error, step, problem):
    text = _tb(("train.py", 40, "<module>", "for xb, yb in loader:"),
               (f"{_SITE}/torch/utils/data/_utils/fetch.py", 55, "fetch", "return self.collate_fn(data)"),
               (_COLLATE, 212, "collate", source), error=error)
    d = explain(text)
    assert d.kind == "collate_failed" and d.evidence["exc_type"] == error.split(":")[0]
    assert step in d.first_step and problem in d.summary and "collate_problem" not in d.evidence
    assert ("same structure" in d.first_step) == (step == "ds[i]")  # the structure only where it is the question


def test_samples_of_different_sizes_in_the_collate_step_are_not_the_structure_rule():
    text = _tb(("train.py", 40, "<module>", "for xb, yb in loader:"),
               (_COLLATE, 274, "collate_tensor_fn", "out = elem.new(storage).resize_(len(batch), *list(elem.size()))"),
               error="RuntimeError: Trying to resize storage that is not resizable")
    assert explain(text).kind != "collate_failed"


@pytest.mark.parametrize("text", [
    "ValueError: num_samples should be a positive integer value, but got num_samples=0",
    "FileNotFoundError: Found no valid file for the classes cat, dog. Supported extensions are: .jpg, .png",
    "Loading images from ./data/train ...\nFound 0 images belonging to 3 classes.",
])
def test_a_dataset_that_found_nothing_is_the_data_path(text):
    assert explain(text).kind == "dataset_empty"


def test_an_unlisted_error_inside_torch_distributed_is_the_distributed_family():
    text = _tb(("ddp.py", 31, "main", "dist.all_gather_into_tensor(out, local)"),
               (f"{_SITE}/torch/distributed/c10d_logger.py", 83, "wrapper", "return func(*args, **kwargs)"),
               (f"{_SITE}/torch/distributed/distributed_c10d.py", 3800, "all_gather_into_tensor",
                "work = group._allgather_base(output_tensor, input_tensor, opts)"),
               error="RuntimeError: a backend refusal nobody has listed")
    d = explain(text)
    assert d.kind == "distributed_call_failed" and d.evidence["user_where"] == "ddp.py, line 31, in main"
    assert "TORCH_DISTRIBUTED_DEBUG=DETAIL" in d.first_step


_DIST = f"{_SITE}/torch/distributed"


@pytest.mark.parametrize("text", [
    _tb(("train.py", 50, "forward", "return self.proj(x)"),
        (f"{_SITE}/torch/nn/modules/linear.py", 125, "forward", "return F.linear(input, self.weight, self.bias)"),
        (f"{_DIST}/tensor/_api.py", 340, "__torch_dispatch__", "return DTensor._op_dispatcher.dispatch("),
        (f"{_DIST}/tensor/_dispatch.py", 819, "_try_replicate_spec_for_scalar_tensor", "raise RuntimeError("),
        error="RuntimeError: aten.mm.default: got mixed torch.Tensor and DTensor, need to convert all torch.Tensor to "
              "DTensor before calling distributed operators!"),
    _tb(("train.py", 50, "<module>", "dcp.load(state_dict, checkpoint_id='ckpt/step100')"),
        (f"{_DIST}/checkpoint/state_dict_loader.py", 200, "load", "keys = sorted(state_dict.keys())"),
        (f"{_DIST}/checkpoint/default_planner.py", 495, "create_local_plan", "raise RuntimeError("),
        error="RuntimeError: Missing key in checkpoint state_dict: model.lm_head.weight."),
    _tb(("train.py", 40, "save", "dcp.save(state)"),
        (f"{_DIST}/checkpoint/_storage_utils.py", 30, "_storage_setup", "raise RuntimeError("),
        error="RuntimeError: `checkpoint_id` must be specificed if storage_writer/storage_reader is None."),
])
def test_a_single_process_api_of_torch_distributed_is_not_the_process_groups_call(text):
    # DTensor, distributed checkpoint: the message names the user's mistake, which one process shows
    assert explain(text).kind != "distributed_call_failed"


def test_a_launchers_report_raised_in_torch_distributed_is_not_the_call_rule():
    text = _tb(("/usr/bin/torchrun", 8, "<module>", "sys.exit(main())"),
               (f"{_SITE}/torch/distributed/launcher/api.py", 260, "launch_agent", "raise ChildFailedError("),
               error="torch.distributed.elastic.multiprocessing.errors.ChildFailedError: train.py FAILED")
    assert explain(text).kind != "distributed_call_failed"


def test_a_pickled_class_of_the_saving_script_is_the_checkpoints_module():
    text = _tb(("eval.py", 3, "<module>", "net = torch.load('m.pt', weights_only=False)"),
               (f"{_SITE}/torch/serialization.py", 1028, "load", "return _load(opened_zipfile, map_location)"),
               (f"{_SITE}/torch/serialization.py", 1400, "find_class", "return super().find_class(mod_name, name)"),
               error="AttributeError: Can't get attribute 'UNetSmall' on <module '__main__' from 'eval.py'>")
    d = explain(text)
    assert d.kind == "checkpoint_module_missing" and d.evidence["main_class"] == "UNetSmall"
    assert "'UNetSmall' of the script that saved it" in d.summary and "__main__" in d.first_step


def test_a_syntax_error_in_a_librarys_file_is_its_import_not_the_users_code():
    text = (f'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\n    from fancylib import run\n'
            f'  File "{_SITE}/fancylib/core.py", line 12\n    match cmd:\n          ^\nSyntaxError: invalid syntax\n')
    d = explain(text)
    assert d.kind == "import_failed" and d.evidence["package"] == "fancylib"
    # the user's own file with a syntax error stays the user's code
    own = 'Traceback (most recent call last):\n  File "train.py", line 12\n    match cmd:\n          ^\nSyntaxError: invalid syntax\n'
    assert explain(own).kind == "user_code_error"


def test_a_librarys_top_level_code_failing_is_its_import_not_a_value_of_the_users():
    text = _tb(("train.py", 3, "<module>", "from fancylib import run"),
               (f"{_SITE}/fancylib/core.py", 12, "<module>", "def run(items: list[int]) -> dict[str, int]:"),
               error="TypeError: 'type' object is not subscriptable")
    assert explain(text).kind == "import_failed"


def test_the_python_named_as_unsupported_is_a_version_requirement():
    assert explain("RuntimeError: Python 3.13 is not supported by this release of fastkernels").kind == (
        "version_required")


@pytest.mark.parametrize("text", [
    "allennlp.common.checks.ConfigurationError: srl_bert is not a registered name for Model. You probably need to use "
    "the --include-package flag to load your custom code.",
    "tango.common.exceptions.RegistrationError: 'fancy_step' is not a registered name for 'Step'.",
    "KeyError: 'SwinUNetPlus is not in the models registry'",
    "RuntimeError: Unknown model (vit_giant_patch99_224)",
    # mmengine's own wording names the scope and the registry ("mmdet::model")
    "KeyError: 'MyDetector is not in the mmdet::model registry. Please check whether the value of `MyDetector` is "
    "correct or it was registered as expected.'",
    "KeyError: \"No object named 'MyRCNN' found in 'META_ARCH' registry!\"",
])
def test_a_name_no_registry_holds_is_a_release_or_a_companion_package(text):
    d = explain(text)
    assert d.kind == "registry_name_missing"
    assert "registers" in d.first_step


@pytest.mark.parametrize(("text", "name", "listing"), [
    ("RuntimeError: Unknown model (vit_base_patch16_224_in21k)", "vit_base_patch16_224_in21k",
     "timm.list_models('*vit*')"),
    ("KeyError: 'DetLocalVisualizer is not in the mmengine::visualizer registry. Please check whether the value of "
     "`DetLocalVisualizer` is correct or it was registered as expected.'", "DetLocalVisualizer", "module_dict"),
    ("KeyError: \"No object named 'MyRCNN' found in 'META_ARCH' registry!\"", "MyRCNN", "print(META_ARCH_REGISTRY)"),
    ("allennlp.common.checks.ConfigurationError: srl_bert is not a registered name for Model.", "srl_bert",
     "Model.list_available()"),
])
def test_the_registry_answer_names_the_name_and_the_listing_of_the_library_that_raised(text, name, listing):
    d = explain(text)
    assert f"names '{name}'" in d.summary
    assert listing in d.fixes[0].code
    assert not any("list_models" in f.code for f in d.fixes if "timm" not in text and "Unknown model" not in text)


def test_a_pickled_class_missing_from_an_installed_package_is_its_release():
    text = ("AttributeError: Can't get attribute 'GraphBatchV2' on <module 'graphkit.data.batch' from "
            "'/opt/conda/lib/python3.10/site-packages/graphkit/data/batch.py'>")
    assert explain(text).kind == "api_missing"


def test_a_program_saying_its_checkpoint_is_missing_is_the_checkpoint_file():
    d = explain("FileNotFoundError: pretrained weights file ./weights/sam_vit_b.pth does not exist, download it first")
    assert d.kind == "checkpoint_load_failed" and "[[" not in d.summary and "?" not in d.summary
    # the same notice logged before an unrelated error: the error is the question
    text = ("No checkpoint found at runs/last.ckpt, training from scratch\n"
            + _tb(("train.py", 80, "<module>", "loss = crit(out, y)"),
                  error="ZeroDivisionError: division by zero"))
    assert explain(text).kind != "checkpoint_load_failed"


@pytest.mark.parametrize("text", [
    "x86_64-linux-gnu-gcc: error: unrecognized command-line option '-std=c++20'",
    "cl : Command line error D8021 : invalid numeric argument '/Wno-deprecated'",
    "LINK : fatal error LNK1181: cannot open input file 'cusparse.lib'",
    "RuntimeError: Ninja is required to load C++ extensions",
])
def test_compiler_drivers_and_linkers_are_an_extension_build(text):
    assert explain(text).kind == "extension_build_failed"


def test_torchs_jit_loader_without_ninja_is_told_to_install_ninja_not_to_read_a_build_log(monkeypatch):
    from torch.utils import cpp_extension

    monkeypatch.setenv("PATH", "")  # no ninja on PATH: torch's own check raises, as in a fresh environment
    try:
        cpp_extension.verify_ninja_availability()
    except RuntimeError as error:
        d = explain(error)
    assert d.kind == "extension_build_failed"
    assert "pip install ninja" in d.first_step and "build log" not in d.first_step
    assert "pip had to compile" not in d.summary and "JIT loader" in d.summary
    assert d.fixes[0].code == "%pip install ninja"


@pytest.mark.parametrize(("text", "kind"), [
    ("WARNING: Retrying ...\nCould not fetch URL https://pypi.org/simple/torchvision/: connection refused", "install_failed"),
    ("Collecting package metadata (repodata.json): done\nSolving environment: failed", "conda_not_found"),
    ("RuntimeError: fastops version 0.9.2 is newer than and incompatible with fastcore version 0.7.0.", "version_required"),
])
def test_installers_and_version_pairs(text, kind):
    assert explain(text).kind == kind


def test_a_requirement_in_prose_before_an_unrelated_traceback_is_not_the_answer():
    text = ("I need transformers==4.41.2 for this repo, and training stops with:\n"
            + _tb(("train.py", 80, "<module>", "loss = crit(out, y)"), error="ZeroDivisionError: division by zero"))
    assert explain(text).kind != "version_required"


def test_a_package_module_run_as_a_script_is_the_users_launch():
    text = _tb(("/home/me/proj/tools/train.py", 3, "<module>", "from .config import cfg"),
               error="ImportError: attempted relative import with no known parent package")
    d = explain(text)
    assert d.kind == "relative_import_script" and "python -m" in d.first_step
    assert "run as a script (python path/to/file.py)" in d.summary


_CELL_RELATIVE = ("---------------------------------------------------------------------------\n"
                  "ImportError                               Traceback (most recent call last)\n"
                  "Cell In[3], line 1\n----> 1 from .utils import load_data\n\n"
                  "ImportError: attempted relative import with no known parent package")


def test_a_relative_import_in_a_notebook_cell_is_told_to_import_absolutely_not_to_run_a_script():
    d = explain(_CELL_RELATIVE)
    assert d.kind == "relative_import_script"
    assert "notebook cell belongs to no package" in d.first_step and "python -m" not in d.first_step
    assert "notebook cell" in d.summary and "python path/to/file.py" not in d.summary
    assert "runner" not in d.evidence


def test_a_live_relative_import_at_the_prompt_is_the_cell_case():
    try:
        exec(compile("from .utils import load_data", "<ipython-input-3-0123abcd>", "exec"), {"__name__": "__main__"})
    except ImportError as error:
        d = explain(error)
    assert d.kind == "relative_import_script" and "sys.path.insert" in d.first_step


def test_a_loader_checking_its_arguments_is_not_the_files():
    text = _tb(("run.py", 3, "<module>", "m = AutoModelForCausalLM.from_pretrained(name, load_in_4bit=True, "
                "quantization_config=q)"),
               (f"{_SITE}/transformers/modeling_utils.py", 2900, "from_pretrained", "raise ValueError("),
               error="ValueError: You can't pass `load_in_4bit` or `load_in_8bit` as a kwarg when passing "
                     "`quantization_config` argument at the same time.")
    assert explain(text).kind != "checkpoint_load_failed"


def test_a_live_truncated_checkpoint_is_still_named_by_the_file_check(tmp_path):
    import torch

    path = tmp_path / "ckpt.pt"
    torch.save({"w": torch.randn(32, 32)}, path)
    path.write_bytes(path.read_bytes()[:300])  # cut: the loader's frames place it, the file check names it
    try:
        torch.load(str(path), weights_only=True)
    except Exception as error:  # noqa: BLE001 - whatever this release raises for a cut archive
        d = explain(error)
    assert d.kind in ("checkpoint_corrupt", "checkpoint_load_failed")
    assert "File size" in dict(d.live.facts)


@pytest.mark.parametrize("text", [
    "[data] scanned 5000 images: found 0 images with corrupt EXIF\n[train] epoch 1 loss 2.31",
    "checked 812 files, found 0 files that are missing labels",
])
def test_a_count_of_a_subset_of_the_samples_is_not_an_empty_dataset(text):
    assert explain(text).kind != "dataset_empty"


def test_a_sample_count_logged_before_an_unrelated_traceback_is_not_the_answer():
    text = ("Found 0 images in ./extra (skipped)\n"
            + _tb(("train.py", 80, "<module>", "loss = crit(out, y)"), error="ZeroDivisionError: division by zero"))
    assert explain(text).kind != "dataset_empty"
