"""Answers read from counts and wrappers rather than one library's wording: texts written by hand, none from a wild sample.

A progress bar that counted no item before a local read unset is an empty dataset; a lazy module's "Failed to import X
because of the following error" is X's import; triton counting 0 drivers is a machine without a usable GPU; torch 1.x
writing a Float result into a Byte tensor is a dtype answer; an allocator's abort and a debugger's native call stack are
native crashes; TorchScript's compile chain is TorchScript's.  Each has neighbours it must leave alone.
"""

from __future__ import annotations

import pytest

from nbdebug.core.explain import explain


def _tb(*frames: tuple[str, int, str, str], error: str) -> str:
    body = "".join(f'  File "{p}", line {n}, in {f}\n    {src}\n' for p, n, f, src in frames)
    return f"Traceback (most recent call last):\n{body}{error}\n"


_UNSET = _tb(("/home/me/seg/train.py", 210, "<module>", "main()"),
             ("/home/me/seg/train.py", 190, "main", "torch.save(model.state_dict(), f'ckpt_{avg_loss:.3f}.pt')"),
             error="UnboundLocalError: cannot access local variable 'avg_loss' where it is not associated with a value")


@pytest.mark.parametrize("bar", ["0it [00:00, ?it/s]\n", "Epoch 1:   0%|          | 0/0 [00:00<?, ?it/s]\n"])
def test_a_local_never_set_after_a_loop_of_no_items_is_an_empty_dataset(bar):
    d = explain("Loading images from ./data/train\n" + bar + _UNSET)
    assert d.kind == "dataset_empty", d.kind
    assert "'avg_loss'" in d.summary and "0 items" in d.summary


@pytest.mark.parametrize("bar", ["", "100%|##########| 50/50 [00:03<00:00, 14.2it/s]\n", "10it [00:01, 9.8it/s]\n"])
def test_a_local_never_set_without_an_empty_loop_is_not_the_data(bar):
    assert explain(bar + _UNSET).kind != "dataset_empty"


def test_a_lazy_modules_failed_import_is_that_packages_import():
    text = ("RuntimeError: Failed to import transformers.models.llama.modeling_llama because of the following error "
            "(look up to see its traceback):\ncannot import name 'is_torch_greater_or_equal' from 'transformers.utils'")
    d = explain(text)
    assert d.kind in ("import_failed", "api_missing"), d.kind  # a name missing from a module is api_missing's own
    text = ("RuntimeError: Failed to import peft.tuners.lora because of the following error (look up to see its "
            "traceback):\nmetaclass conflict: the metaclass of a derived class must be a (non-strict) subclass")
    d = explain(text)
    assert d.kind == "import_failed" and d.evidence["package"] == "peft"


def test_a_lazy_import_failing_on_the_gpu_is_not_its_versions():
    text = ("RuntimeError: Failed to import diffusers.models.unet because of the following error (look up to see its "
            "traceback):\nCUDA call failed lazily at initialization with error: device >= 0 && device < num_gpus")
    assert explain(text).kind != "import_failed"


def test_triton_finding_no_gpu_driver_is_cuda_unavailable():
    text = _tb(("/usr/lib/python3/dist-packages/triton/runtime/driver.py", 8, "_create_driver",
                'raise RuntimeError(f"{len(actives)} active drivers ({actives}). There should only be one.")'),
               error="RuntimeError: 0 active drivers ([]). There should only be one.")
    assert explain(text).kind == "cuda_unavailable"
    assert explain("RuntimeError: 2 active drivers ([a, b]). There should only be one.").kind != "cuda_unavailable"


def test_torch_1x_refusing_a_float_result_in_a_byte_tensor_is_a_dtype_answer():
    text = "RuntimeError: output with backend CPU and dtype Byte doesn't match the desired backend CPU and dtype Float"
    assert explain(text).kind == "dtype_mismatch"
    same = "RuntimeError: output with backend CPU and dtype Float doesn't match the desired backend CUDA and dtype Float"
    assert explain(same).kind != "dtype_mismatch"  # a device, not a dtype


@pytest.mark.parametrize("text", [
    "src/tcmalloc.cc:332] Attempt to free invalid pointer 0x7ffdb8479460",
    "The demo stops in the debugger:\n"
    " \tc10.dll!c10::intrusive_ptr<c10::TensorImpl>::reset_() 行 291\tC++\n"
    ">\ttorch_cpu.dll!at::native::empty_cpu(c10::ArrayRef<__int64> size) 行 88\tC++\n"
    " \tmyapp.exe!main() 行 12\tC++\n",
])
def test_an_allocators_abort_and_a_native_call_stack_are_native_crashes(text):
    assert explain(text).kind == "native_crash"


def test_torchscripts_compile_chain_is_torchscript():
    text = ("RuntimeError: \nbuiltin cannot be used as a value:\n  at mylib/ops.py:14:56\n"
            "'pad_to' is being compiled since it was called from '__torch__.mylib.heads.Head.forward'\n")
    assert explain(text).kind == "torchscript_error"


def test_cmd_exe_in_a_translated_wording_is_a_missing_command():
    text = '"accelerate" is not an internal or external command, an executable program, or a batch file.'
    assert explain(text).kind == "package_missing"


# ------------------------------------------------------------------ cuBLAS's status read from its number or old words

def test_cublas_execution_failed_on_an_old_torch_is_a_build_without_kernels_for_the_gpu():
    d = explain("RuntimeError: cublas runtime error : the GPU program failed to execute at "
                "/pytorch/aten/src/THC/THCBlas.cu:258\npytorch version: 0.3.1")
    assert d.kind == "cublas_error"
    assert d.evidence["status"] == "CUBLAS_STATUS_EXECUTION_FAILED"
    assert "get_arch_list" in d.first_step


@pytest.mark.parametrize("text", [
    "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb, m, n, k)`",
    "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm(...)`\ntorch==2.1.0",
])
def test_cublas_execution_failed_on_a_recent_torch_keeps_the_late_error_step(text):
    d = explain(text)
    assert d.kind == "cublas_error" and "CUDA_LAUNCH_BLOCKING" in d.first_step


def test_cublas_alloc_failed_starts_with_memory():
    d = explain("RuntimeError: cublas runtime error : resource allocation failed at /pytorch/aten/src/THC/THCGeneral.cpp:250")
    assert d.evidence["status"] == "CUBLAS_STATUS_ALLOC_FAILED"
    assert "memory" in d.first_step


@pytest.mark.parametrize("text, package", [
    ("RuntimeError: Failed to import diffusers.pipelines.kandinsky\nsome inner message that names no category",
     "diffusers"),
    ("ImportError: Failed to import `build_model` and `load_weights` from `segkit.api`. These functions are required "
     "by this demo!", "segkit"),
])
def test_a_failed_import_named_alone_is_that_packages_import(text, package):
    d = explain(text)
    assert d.kind == "import_failed", d.kind
    assert d.evidence["package"] == package


def test_failed_to_import_in_a_sentence_names_no_module():
    assert explain("ValueError: Failed to import the dataset module for this split, see above").kind != "import_failed"


def test_a_shared_objects_undefined_symbol_with_its_name_cut_is_still_undefined_symbol():
    text = ("ImportError: /opt/env/lib/python3.11/site-packages/fused_ops_cuda.cpython-311-x86_64-linux-gnu.so: "
            "undefined symbol:")
    assert explain(text).kind == "undefined_symbol"
