"""Live evidence for every exception in a cell, and the checks each family makes in the live session (issue 23)."""

from __future__ import annotations

import os

import pytest
import torch
from IPython.utils.capture import capture_output

from nbdebug.core.explain import explain
from nbdebug.core.explain._evidence import MAX_TENSORS, live_evidence
from nbdebug.core.explain._live import check_checkpoint_file, version_conflicts
from nbdebug.render.diagnosis import diagnosis_html, diagnosis_text


def _raise(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except Exception as e:  # the real exception, with its traceback and frames
        return e
    raise AssertionError("expected an exception")


def _panels(out):
    return [o.data for o in out.outputs if "nbdebug" in o.data.get("text/plain", "")]


def test_an_unknown_error_in_a_cell_shows_what_the_session_knows_and_no_cause(ip):
    with capture_output() as out:
        result = ip.run_cell("import torch\nm = -torch.eye(3)\ntorch.linalg.cholesky(m)", store_history=True)
    assert result.error_in_exec is not None
    (panel,) = _panels(out)
    text = panel["text/plain"]
    assert f"In [{result.execution_count}], line 3: torch.linalg.cholesky(m)" in text
    assert "m: [3, 3] float32 cpu, min -1 max 0" in text
    assert "names no cause" in text and "Likely causes" not in text
    assert "What the live session shows" in panel["text/html"] and "<details open>" in panel["text/html"]


def test_an_error_with_nothing_live_to_show_stays_quiet(ip):
    with capture_output() as out:
        ip.run_cell("undefined_name_xyz")
    assert _panels(out) == []


def test_tensors_are_summarised_with_nan_and_inf_counts():
    x = torch.tensor([[1.0, float("nan")], [float("inf"), -2.0]], requires_grad=True)
    w = torch.ones(3, 3)
    e = _raise(lambda: x @ w)
    rows = dict(live_evidence(e).rows())
    assert "[2, 2] float32 cpu, requires grad, min -2 max 1 mean -0.5, 1 NaN and 1 Inf" in rows["Tensor on the line"]
    assert live_evidence(e).site.endswith("e = _raise(lambda: x @ w)") or "lambda" in live_evidence(e).function


def test_the_module_that_raised_is_named_by_its_place_in_the_model():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(6, 2)))
    model[1][1].double()
    e = _raise(model, torch.randn(5, 4))
    ev = live_evidence(e, {"model": model})
    assert ev.module == "model.1.1" and ev.module_type.startswith("Linear(in_features=6")
    assert ev.parameters == "2 float64 on cpu"
    assert ev.op == "torch.nn.modules.linear.Linear.forward"
    assert any(t.name == "input" and t.shape == (5, 8) for t in ev.tensors)


def test_the_evidence_is_bounded_and_never_calls_a_users_repr():
    class Hostile:
        def __repr__(self):
            raise AssertionError("__repr__ called")

        __str__ = __repr__

    def step():
        hostile = Hostile()  # noqa: F841 - in the frame on purpose
        tensors = [torch.full((2,), float(i)) for i in range(40)]  # noqa: F841
        big = torch.randn(300_000)
        return big[1_000_000]

    e = _raise(step)
    ev = live_evidence(e)
    assert len(ev.tensors) == MAX_TENSORS and ev.more_tensors == 41 - MAX_TENSORS
    big = next(t for t in ev.tensors if t.name == "big")
    assert "of 300,000 elements" in big.note and big.min is not None


def test_a_poisoned_gpu_is_not_asked_for_values():
    class FakeCudaError(RuntimeError):
        pass

    def step():
        x = torch.ones(3)  # noqa: F841 - on the CPU: summarised even after a CUDA error
        raise FakeCudaError("CUDA error: device-side assert triggered")

    e = _raise(step)
    assert live_evidence(e).tensors[0].min == 1.0


def test_a_call_that_misses_forward_shows_its_signature():
    class Net(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None):
            return input_ids

    net = Net()
    d = explain(_raise(net, torch.ones(2), labels=torch.ones(2)))
    assert d.kind == "call_signature"
    assert "Net.forward(input_ids, attention_mask=None)" in d.first_step


def test_a_missing_batch_key_lists_the_keys_it_has():
    batch = {"input_ids": torch.ones(2), "labels": torch.zeros(2)}
    d = explain(_raise(lambda: batch["label"]))
    assert d.kind == "missing_key"
    assert "'input_ids', 'labels'" in d.first_step and "Did you mean 'labels'?" in d.first_step


def test_an_attribute_on_a_tuple_output_says_what_the_output_is():
    out = (torch.ones(2), torch.ones(3))
    d = explain(_raise(lambda: out.logits))
    assert d.kind == "wrong_object_attribute"
    assert "a tuple of 2: Tensor, Tensor" in d.first_step and "out[0]" in d.first_step


def test_a_state_dict_saved_from_ddp_is_diffed_against_the_live_model():
    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 1))
    sd = {f"module.{k}": v for k, v in model.state_dict().items()}
    d = explain(_raise(model.load_state_dict, sd))
    assert d.kind == "state_dict_keys"
    live = dict(d.live.facts)
    assert live["Keys in the model / the checkpoint"] == "4 / 4"
    assert "'module.' prefix" in d.first_step
    assert d.fixes[0].code == "model.load_state_dict({k.removeprefix('module.'): v for k, v in sd.items()})"


def test_a_truncated_checkpoint_is_named_as_truncated(tmp_path):
    path = tmp_path / "ckpt.pt"
    torch.save({"w": torch.randn(64, 64)}, path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    d = explain(_raise(torch.load, str(path), weights_only=True))
    assert d.kind == "checkpoint_corrupt"
    facts = dict(d.live.facts)
    assert "truncated" in facts["File format"] and facts["File size"].endswith(f"({len(data) // 2} bytes)")
    assert "an HTML page" in dict(check_checkpoint_file(_write(tmp_path / "x.pt", b"<!DOCTYPE html>")))["File format"]
    assert "Git LFS pointer" in dict(check_checkpoint_file(_write(tmp_path / "y.pt",
                                                                  b"version https://git-lfs.github.com/spec/v1\n")))[
        "File format"]


def _write(path, data):
    path.write_bytes(data)
    return str(path)


@pytest.mark.skipif(torch.version.cuda is not None, reason="the CPU-only build's first step needs a CPU-only torch")
def test_cuda_on_a_cpu_only_build_names_the_build_and_the_install_command():
    d = explain(_raise(lambda: torch.zeros(2).cuda()))
    assert d.kind == "cuda_unavailable"
    base = torch.__version__.split("+")[0]
    assert d.first_step.startswith(f"This torch ({torch.__version__}) is a CPU-only build")
    assert f"torch=={base}" in d.fixes[0].code and "cu124" not in d.fixes[0].code


def test_versions_that_do_not_fit_are_named():
    from nbdebug.core.explain._live import installed_versions

    real = installed_versions()
    assert "torch" in real and not any("torch " in c and "numpy" in c for c in version_conflicts(real))
    conflicts = version_conflicts({**real, "torch": "2.1.0", "numpy": "2.1.0"})
    assert any("NumPy 2 needs torch >= 2.3" in c for c in conflicts)
    if "accelerate" in real:  # accelerate's metadata requires torch>=2.0: a 1.13 torch does not fit
        assert any(c.startswith("accelerate") and "torch" in c for c in version_conflicts({**real, "torch": "1.13.1"}))


def test_a_missing_torch_attribute_is_named_with_the_release_that_added_it():
    from nbdebug.core.explain._live import _api_missing

    out = _api_missing({"owner": "torch", "attr": "compiler"}, {"torch": "1.13.1"})
    assert out.first_step.startswith("torch.compiler was added in torch 2.1; torch 1.13.1 is installed")
    removed = _api_missing({"owner": "torchvision.transforms", "attr": "functional_tensor"}, {"torchvision": "0.17.0"})
    assert "was removed in torchvision 0.17" in removed.first_step


def test_the_panel_reads_as_words_and_renders_markdown():
    e = _raise(torch.nn.Linear(10, 2), torch.randn(3, 4))
    d = explain(e, roots={})
    text = diagnosis_text(d)
    assert "module_input_shapes" not in text and "Shapes the module received: input: [3, 4]" in text
    html = diagnosis_html(explain("Missing key(s) in state_dict: \"fc.weight\". Unexpected key(s) in state_dict: "
                                  "\"module.fc.weight\"."))
    assert "<code>module.</code>" in html and "`module.`" not in html


def test_no_double_full_stop_after_a_size():
    d = explain("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
                "of 7.79 GiB of which 1.2 GiB is free.")
    assert ".." not in d.summary and d.summary.endswith("1.20 GiB was free.")


def test_live_evidence_never_breaks_on_a_frame_it_cannot_read():
    class Weird(torch.Tensor):
        @property
        def shape(self):
            raise RuntimeError("no shape")

    def step():
        w = torch.ones(2).as_subclass(Weird)  # noqa: F841
        raise ValueError("boom")

    ev = live_evidence(_raise(step))
    assert ev.site  # the rest of the evidence is still there
    assert os.getpid()


def test_host_memory_counts_the_child_processes_and_their_memory():
    import subprocess
    import sys

    from nbdebug.core.explain._live import children_memory, host_memory

    before, _ = children_memory()
    child = subprocess.Popen([sys.executable, "-c", "import time; block = b'x' * (64 << 20); time.sleep(30)"])
    try:
        import time

        for _ in range(100):  # until the child has filled its block
            count, held = children_memory()
            if held >= 64 << 20:
                break
            time.sleep(0.1)
        assert count == before + 1 and held >= 64 << 20
    finally:
        child.kill()
        child.wait()
    mem = host_memory()
    assert mem["rss"] > 0 and mem["machine"] >= mem["rss"]
    d = explain(_raise(lambda: (_ for _ in ()).throw(MemoryError())))
    assert "Memory in use (this process)" in dict(d.live.facts)


def test_lora_target_modules_are_named_from_the_live_model():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.query_key_value = torch.nn.Linear(4, 12)
            self.dense = torch.nn.Linear(4, 4)

    def get_peft_model(model, target_modules):  # what PEFT raises when no name matches, with the model in its frame
        raise ValueError(f"Target modules {target_modules} not found in the base model. Please check the target "
                         "modules and try again.")

    model = torch.nn.Sequential(Block(), Block())
    d = explain(_raise(get_peft_model, model, ["q_proj", "v_proj"]))
    assert d.kind == "peft_target_modules"
    assert d.first_step == "Set target_modules to names the model has: dense, query_key_value."


def test_a_family_level_answer_labels_its_facts_in_words():
    # a pasted traceback whose last frame is the user's own file raising NameError: the family-level answer
    text = ("Traceback (most recent call last):\n  File \"/home/u/train.py\", line 12, in <module>\n"
            "    loss = criterion(out, target)\nNameError: name 'criterion' is not defined\n")
    d = explain(text)
    assert d.kind == "user_code_error"
    panel = diagnosis_text(d)
    assert "Exception: NameError" in panel
    assert "Raised at" in panel and "train.py, line 12" in panel
    assert "Exc type" not in panel
