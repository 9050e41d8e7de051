"""``memtrace()`` and ``%%memtrace`` on CPU: the seed's classic leaks show up as retained memory at the right line."""

from __future__ import annotations

import pickle
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from IPython.utils.capture import capture_output  # noqa: E402

from nbdebug.core.memory import MemTrace, load_snapshot, memtrace  # noqa: E402

SETUP = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
criterion = torch.nn.MSELoss()
batches = [(torch.randn(256, 64), torch.randn(256, 1)) for _ in range(8)]
losses = preds = out = loss = None
"""

LEAK = """losses = []
for xb, yb in batches:
    out = model(xb)
    loss = criterion(out, yb)
    losses.append(loss)
"""

FIXED = LEAK.replace("losses.append(loss)", "losses.append(loss.item())")

GRAD_INFERENCE = """preds = []
for xb, _ in batches:
    preds.append(model(xb))
"""

NO_GRAD_INFERENCE = """preds = []
with torch.no_grad():
    for xb, _ in batches:
        preds.append(model(xb))
"""


def _profiler_active() -> bool:
    return bool(torch.autograd.profiler._is_profiler_enabled) or torch._C._autograd._profiler_enabled()


def _trace(ip, cell: str, line: str = "--device cpu") -> MemTrace:
    ip.run_cell(SETUP)
    result = ip.run_cell_magic("memtrace", line, cell)
    assert isinstance(result, MemTrace)
    return result


def test_losses_append_leak_points_at_the_forward_line(ip):
    leak = _trace(ip, LEAK)
    fixed = _trace(ip, FIXED)
    activation = 256 * 512 * 4  # one (B, 512) float32 activation per batch
    # the leak keeps every iteration's graph; the fix keeps only the last one (still bound to `out`/`loss`)
    assert leak.retained_bytes >= 8 * activation
    assert fixed.retained_bytes <= activation + 64 * 1024
    top = leak.retained_sites[0]
    assert top.line == 3 and top.function == "<module>"  # `out = model(xb)`, the line that made the graph
    assert top.bytes >= 8 * activation
    assert leak.peak_bytes >= leak.retained_bytes


def test_inference_without_no_grad_retains_activations(ip):
    grad = _trace(ip, GRAD_INFERENCE)
    nograd = _trace(ip, NO_GRAD_INFERENCE)
    outputs = 8 * 256 * 1 * 4
    assert nograd.retained_bytes <= 4 * outputs
    assert grad.retained_bytes >= 8 * 256 * 512 * 4
    assert grad.retained_sites[0].line == 3


def test_report_and_binding(ip, tmp_path):
    path = tmp_path / "cell.pickle"
    ip.run_cell(SETUP)
    result = ip.run_cell_magic("memtrace", f"--device cpu -o tr --save {path}", LEAK)
    assert ip.user_ns["tr"] is result
    data = ip.display_formatter.format(result)[0]
    assert "retained" in data["text/plain"] and "memtrace" in data["text/html"]
    assert "<svg" in data["text/html"]
    saved = load_snapshot(path)
    assert saved.summary().final_allocated_bytes - saved.state().initial_allocated == result.delta_bytes
    with open(path, "rb") as fh:
        assert isinstance(pickle.load(fh), dict)
    assert "peak" in repr(result)
    assert len(result.to_pandas()) == len(result.retained_sites) + len(result.top_sites)


@pytest.mark.parametrize("error", ["ValueError('boom')", "KeyboardInterrupt()"])
def test_recording_stops_when_the_cell_fails(ip, error):
    ip.run_cell(SETUP)
    cell = f"big = torch.ones(1_000_000)\nraise {error}\n"
    with capture_output() as cap:
        res = ip.run_cell(f"%%memtrace --device cpu -o failed\n{cell}")
    assert type(res.error_in_exec).__name__ == error.split("(")[0]  # re-raised unchanged
    assert not _profiler_active()
    assert ip.user_ns["failed"].retained_bytes >= 4_000_000  # the report of the failed cell still came
    assert any("memtrace" in str(o.data.get("text/plain", "")) for o in cap.outputs)
    # and a fresh trace works afterwards
    again = _trace(ip, "x = torch.zeros(1000)\n")
    assert again.retained_bytes >= 4000


def test_context_manager_peak_and_retained():
    import inspect

    keep = []
    line = inspect.currentframe().f_lineno + 4
    with memtrace("cpu") as rec:
        t = torch.empty(2_500_000)  # 10 MB, freed
        del t
        keep.append(torch.empty(500_000))  # 2 MB, kept
    r = rec.result
    assert r.peak_bytes >= 10_000_000
    assert 2_000_000 <= r.retained_bytes < 3_000_000
    assert r.delta_bytes == r.retained_bytes
    assert rec.retained_bytes == r.retained_bytes and rec.top_sites == r.top_sites  # the recorder reads like it
    assert "retained" in rec._repr_mimebundle_()["text/plain"]
    assert not _profiler_active()
    site = r.retained_sites[0]
    assert site.filename.endswith("test_memory_trace.py") and site.line == line


def test_context_manager_stops_on_error():
    with pytest.raises(RuntimeError, match="inside"):
        with memtrace("cpu"):
            torch.ones(10)
            raise RuntimeError("inside")
    assert not _profiler_active()


def test_categories_from_the_memory_profile(ip):
    ip.run_cell(SETUP + "opt = torch.optim.Adam(model.parameters())\n")
    step = ("xb, yb = batches[0]\nopt.zero_grad()\nloss = criterion(model(xb), yb)\nloss.backward()\n"
            "opt.step()\n")
    r = ip.run_cell_magic("memtrace", "--device cpu --categories", step)
    cats = dict(r.by_category())
    assert r._memory_profile and len(r._memory_profile) == 1  # built once
    r.by_category()
    assert len(r._memory_profile) == 1
    assert set(cats) & {"gradient", "optimizer_state", "activation", "temporary", "parameter"}


def test_bad_arguments(ip):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError):
        ip.run_cell_magic("memtrace", "--max-entries 0", "x = 1")
    with pytest.raises(UsageError, match="CUDA is not available|expected"):
        ip.run_cell_magic("memtrace", "--device tpu", "x = 1")


def test_leak_is_a_retained_memory_finding_and_the_fix_is_not(ip):
    leak = _trace(ip, LEAK)
    fixed = _trace(ip, FIXED)
    (found,) = leak.findings
    assert found.kind == "memory_retained" and found.severity == "warning"
    # the line that fills the list first (it allocates nothing itself: the list was looked at after the cell), then
    # the lines whose memory it keeps
    assert "line 5: losses.append(loss)" in found.where[0] and found.where[1] == leak.retained_sites[0].site
    assert found.evidence["retained_bytes"] == leak.retained_bytes
    assert "the list losses" in found.message and found.fixes[0].code == "losses.append(loss.item())"
    assert any("loss.item()" in f.code for f in found.fixes)
    assert fixed.findings == ()
    data = ip.display_formatter.format(leak)[0]
    assert 'data-kind="memory_retained"' in data["text/html"] and "memory_retained" in data["text/plain"]
    assert "memory_retained" not in ip.display_formatter.format(fixed)[0]["text/html"]
    assert "kept as" not in data["text/html"]  # nothing of it is training state: no such column


def test_shell_escapes_and_line_magics_work_inside_the_cell(ip, tmp_path):
    ip.run_cell(SETUP)
    marker = tmp_path / "ran.txt"
    cell = f"x = torch.ones(1000)\n!echo hi > {marker}\nfiles = !ls {tmp_path}\n%time y = torch.zeros(10)\n"
    with capture_output() as cap:
        res = ip.run_cell(f"%%memtrace --device cpu -o tr\n{cell}")
    assert res.error_in_exec is None, res.error_in_exec
    assert marker.read_text().strip() == "hi"
    assert ip.user_ns["files"] == ["ran.txt"] and ip.user_ns["y"].shape == (10,)
    assert "Wall time" in cap.stdout  # %time ran inside the traced cell
    assert isinstance(ip.user_ns["tr"], MemTrace) and ip.user_ns["tr"].retained_bytes >= 4000


def test_a_failing_cell_shows_the_report_then_reraises(ip):
    ip.run_cell(SETUP)
    with capture_output() as cap:
        res = ip.run_cell("%%memtrace --device cpu\nkept = torch.ones(1_000_000)\n1 / 0\n")
    assert isinstance(res.error_in_exec, ZeroDivisionError)  # the user's own error, unchanged
    reports = [o for o in cap.outputs if "memtrace" in str(o.data.get("text/plain", ""))]
    assert len(reports) == 1 and "text/html" in reports[0].data
    assert not _profiler_active()


def test_line_magic_name_gives_the_help(ip):
    from IPython.core.error import UsageError

    with capture_output() as cap:
        ip.run_cell("%memtrace?")
    help_text = cap.stdout + "".join(str(o.data.get("text/plain", "")) for o in cap.outputs)
    assert "Record what the cell allocates" in help_text
    with pytest.raises(UsageError, match="cell magic"):
        ip.run_line_magic("memtrace", "")


def test_sites_name_cells_as_the_user_knows_them(ip):
    ip.run_cell("import torch\ndef make():\n    return torch.ones(250_000)\n", store_history=True)
    def_cell = ip.execution_count - 1
    with capture_output():
        res = ip.run_cell("%%memtrace --device cpu -o named\nkept = make()\nsmall = torch.ones(1000)\n",
                          store_history=True)
    assert res.error_in_exec is None
    sites = [s.site for s in ip.user_ns["named"].retained_sites]
    # a function defined in an earlier cell: that cell's number, the line in it and its source text
    assert sites[0] == f"In [{def_cell}], line 3 in make: return torch.ones(250_000)"
    # the traced cell itself: the number its prompt shows (lines counted in the body, as IPython's traceback does)
    assert f"In [{def_cell + 1}], line 2: small = torch.ones(1000)" in sites
    # never a temporary file name of the kernel, never nbdebug's own frames
    assert not any("ipython-input" in s or "ipykernel" in s or "nbdebug" in s for s in sites)
    html = ip.display_formatter.format(ip.user_ns["named"])[0]["text/html"]
    assert f"In [{def_cell}], line 3 in make" in html


def test_nbdebug_frames_are_never_a_site():
    import os

    import nbdebug
    from nbdebug.core.memory._sites import pick_site

    own = (os.path.join(os.path.dirname(nbdebug.__file__), "ipython", "_cell.py"), 70, "run_body")
    user = ("/home/me/train.py", 12, "step")
    assert pick_site([("??", 0, "c10::alloc"), own, user]) == user
    assert pick_site([own]) != own
    # as PyTorch's tracer writes paths under sys.path (an installed nbdebug, IPython, torch)
    relative = ("nbdebug/ipython/_cell.py", 67, "run_body")
    ipython = ("IPython/core/interactiveshell.py", 2644, "run_cell_magic")
    library = ("torch/nn/modules/module.py", 1789, "_call_impl")
    assert pick_site([("??", 0, "c10::alloc"), relative]) is not relative
    assert pick_site([relative, ipython]) == ipython  # the notebook's machinery, only when nothing else is there
    assert pick_site([ipython, library]) == library


def test_an_operator_in_the_cell_itself_is_the_cell_not_nbdebug_or_ipython(ip):
    """``b = a @ a`` in a traced cell: the profiler records calls with their lines, and an operator is no call.
    The allocation is the cell's own (its line not recorded), never the magic's machinery that ran the cell."""
    ip.run_cell("import torch\na = torch.randn(500, 500)")
    t = ip.run_cell_magic("memtrace", "--device cpu", "b = a @ a\nc = a + 1\nd = torch.relu(a)\n")
    block = 500 * 500 * 4
    (op,) = [s for s in t.retained_sites if "operator" in s.site]
    assert op.bytes == 2 * block and op.site.startswith("In [") and "line is not recorded" in op.site
    (relu,) = [s for s in t.retained_sites if s.line == 3]
    assert relu.bytes == block and "d = torch.relu(a)" in relu.site
    html = ip.display_formatter.format(t)[0]["text/html"]
    for internal in ("_cell.py", "run_body", "nbdebug/", "interactiveshell", "run_cell_magic"):
        assert internal not in html and all(internal not in s.site for s in t.retained_sites + t.top_sites)


def test_an_operator_inside_a_function_keeps_the_calling_line_and_names_the_function_in_its_stack(ip):
    ip.run_cell("import torch\nw = torch.randn(300, 300)\ndef project(x):\n    return x @ w\n")
    t = ip.run_cell_magic("memtrace", "--device cpu", "x = torch.randn(300, 300)\ny = project(x)\n")
    (site,) = [s for s in t.retained_sites if s.line == 2]
    assert site.bytes == 300 * 300 * 4 and "y = project(x)" in site.site
    snap = t.snapshot
    m = snap.model
    (i,) = [i for i in range(m.action.size) if m.size[i] == 300 * 300 * 4 and m.stack[i] >= 0
            and "project" in " ".join(snap.stack_text(int(m.stack[i])))]
    inner = snap.stack_text(int(m.stack[i]))[0]
    assert "in project" in inner and "operator" in inner


def test_the_classic_leak_is_named_and_the_fixed_loop_is_clean(ip):
    """A list that keeps the loss tensors: a warning that names the line and says why; the fixed loop: no warning,
    and a real peak even though the cell first frees what the previous one kept."""
    from IPython.utils.capture import capture_output

    ip.run_cell("import torch\nfrom torch import nn\n_m = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))\n"
                "_crit = nn.CrossEntropyLoss()\n"
                "_batches = [(torch.randn(64, 256), torch.randint(0, 10, (64,))) for _ in range(5)]", store_history=True)
    with capture_output():
        ip.run_cell("%%memtrace --device cpu -o _leak\n_losses = []\nfor xb, yb in _batches:\n    out = _m(xb)\n"
                    "    _losses.append(_crit(out, yb))", store_history=True)
        ip.run_cell("%%memtrace --device cpu -o _fixed\n_losses = []\nfor xb, yb in _batches:\n    out = _m(xb)\n"
                    "    _losses.append(_crit(out, yb).item())", store_history=True)
    leak, fixed = ip.user_ns["_leak"], ip.user_ns["_fixed"]
    (f,) = leak.findings
    assert f.kind == "memory_retained" and "_losses.append(_crit(out, yb))" in f.where[0]
    # the fix in the user's own names: the list holds single numbers' tensors, so keep the numbers
    assert "_crit(out, yb).item()" in f.message and "autograd graph" in f.message
    assert f.fixes[0].code == "_losses.append(_crit(out, yb).item())"
    assert 'class="nbdebug warning' in leak._repr_html_()
    assert fixed.findings == () and fixed.delta_bytes < 0  # it freed the previous cell's list first
    assert fixed.peak_bytes > 0 and 'class="nbdebug warning' not in fixed._repr_html_()


def test_memtrace_takes_back_the_kineto_setting_it_made(ip, monkeypatch):
    import os

    from IPython.utils.capture import capture_output

    monkeypatch.delenv("KINETO_LOG_LEVEL", raising=False)
    with capture_output():
        ip.run_cell("%%memtrace --device cpu\nimport torch\n_k = torch.ones(100)")
    assert "KINETO_LOG_LEVEL" not in os.environ
    monkeypatch.setenv("KINETO_LOG_LEVEL", "3")  # the user's own setting is left alone
    with capture_output():
        ip.run_cell("%%memtrace --device cpu\nimport torch\n_k = torch.ones(100)")
    assert os.environ["KINETO_LOG_LEVEL"] == "3"


def test_save_to_a_missing_folder_never_replaces_the_users_error(ip, tmp_path):
    import warnings

    from IPython.core.error import UsageError
    from IPython.utils.capture import capture_output

    from nbdebug.core.memory import memtrace

    missing = tmp_path / "nope" / "trace.pickle"
    with pytest.raises(UsageError, match="does not exist"):  # the magic says so before running the cell
        ip.run_cell_magic("memtrace", f"--device cpu --save {missing}", "x = 1")
    rec = memtrace("cpu", save=missing).start()  # the function: a failed save is a warning beside the result
    try:
        import torch

        torch.ones(10)
    finally:
        rec.stop()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = rec.finish()
    assert result is not None and any("was not saved" in str(w.message) for w in caught)
    with capture_output():  # in a failing cell the user's own error is what the cell raises
        r = ip.run_cell("%%memtrace --device cpu\nimport torch\n_t = torch.ones(10)\nraise ValueError('mine')")
    assert isinstance(r.error_in_exec, ValueError)


def test_categories_without_the_flag_say_how_to_get_them():
    """Shapes (which the memory profile needs) are recorded only for categories=True: the default recording is
    cheaper, and asking it for categories is one clear error."""
    from nbdebug.errors import NbdebugError

    with memtrace("cpu") as rec:
        kept = torch.ones(1000)
    assert rec.result.retained_bytes >= kept.numel() * 4
    with pytest.raises(NbdebugError, match=r"categories=True"):
        rec.result.by_category()


# ---- what a training step keeps on purpose (gradients, optimizer state) is told apart from a leak ----

TRAIN_SETUP = """
import torch
torch.manual_seed(0)
_tm = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
_topt = torch.optim.Adam(_tm.parameters())
_tb = [(torch.randn(64, 512), torch.randint(0, 10, (64,))) for _ in range(3)]
"""

TRAIN = """for xb, yb in _tb:
    _topt.zero_grad()
    loss = torch.nn.functional.cross_entropy(_tm(xb), yb)
    loss.backward()
    _topt.step()
"""


def _run(ip, cell: str) -> MemTrace:
    with capture_output():
        ip.run_cell("%%memtrace --device cpu -o _tr\n" + cell, store_history=True)
    return ip.user_ns["_tr"]


def test_a_first_training_step_keeps_gradients_and_adam_state_which_is_no_leak(ip):
    """The first steps of a training loop keep a gradient per parameter and Adam's two buffers per parameter: a
    remark that says so, never the leak warning (whose fixes, loss.item() and no_grad, would be wrong here)."""
    ip.run_cell(TRAIN_SETUP)
    params = sum(p.numel() * p.element_size() for p in ip.user_ns["_tm"].parameters())
    first = _run(ip, TRAIN)
    parts = {p.kind: p for p in first.retained_parts}
    assert parts["gradients"].bytes == params  # one .grad per parameter, exactly
    assert 2 * params <= parts["optimizer state"].bytes < 2 * params + 64 * 4  # exp_avg, exp_avg_sq (+ step)
    assert "loss.backward()" in parts["gradients"].sites[0].site and "_topt.step()" in parts["optimizer state"].sites[0].site
    assert "other" not in parts or parts["other"].bytes < 1024**2
    import json

    as_json = json.loads(json.dumps(first.to_dict()))
    assert {p["kind"]: p["bytes"] for p in as_json["retained_parts"]}["gradients"] == params
    (f,) = first.findings
    assert f.kind == "training_state" and f.severity == "info"
    assert "not a leak" in f.message and "first step" in f.message and "zero_grad" in f.message
    assert not any("loss.item()" in x.code or "no_grad" in x.code for x in f.fixes)
    assert [x.title.split(":")[0] for x in f.fixes] == ["Gradients", "Optimizer state"]  # the parts it saw
    html = first._repr_html_()
    assert 'class="nbdebug ok' in html and 'data-kind="training_state"' in html and "memory_retained" not in html
    # each retained line says what its memory is
    # cells carry inline alignment for untrusted notebooks: match the words, not the bare tags
    assert re.search(r"<th[^>]*>kept as</th>", html) and re.search(r"<td[^>]*>optimizer state</td>", html)
    assert re.search(r"<td[^>]*>gradients</td>", html)
    text = ip.display_formatter.format(first)[0]["text/plain"]
    assert "_topt.step()  [optimizer state]" in text and "loss.backward()  [gradients]" in text

    # run again: the gradients of the last step are kept, the previous ones were freed, Adam's state is reused
    again = _run(ip, TRAIN)
    assert abs(again.delta_bytes) < 1024**2 and again.retained_bytes >= params
    (f,) = again.findings
    assert f.kind == "training_state" and "did not grow" in f.message
    assert [p.kind for p in again.retained_parts][0] == "gradients"


def test_a_leak_beside_the_training_state_is_still_the_warning(ip):
    ip.run_cell(TRAIN_SETUP + "_seen = {}\n")
    # outputs kept in a dict, each with its graph (the activations of a batch of 512)
    keep = "    _seen[len(_seen)] = _tm(xb.repeat(8, 1))\n"
    leak = _run(ip, TRAIN.replace("    loss.backward()\n", "    loss.backward()\n" + keep))
    (f,) = leak.findings
    assert f.kind == "memory_retained" and f.severity == "warning"
    assert "_seen[len(_seen)] = _tm(xb.repeat(8, 1))" in f.where[0]
    assert "besides the" in f.message and "gradients" in f.message
    other = {p.kind: p for p in leak.retained_parts}["other"]
    assert other.bytes >= 3 * 2 * 512 * 512 * 4  # each step's hidden activations, kept through the graph
    assert 'class="nbdebug warning' in leak._repr_html_()


def test_stack_roles():
    from nbdebug.core.memory._sites import GRADIENTS, OPTIMIZER_STATE, OTHER, PARAMETERS, stack_role

    engine = ("/v/site-packages/torch/autograd/graph.py", 829, "_engine_run_backward")
    assert stack_role([engine, ("/v/site-packages/torch/_tensor.py", 625, "backward"), ("train.py", 4, "f")]) == GRADIENTS
    assert stack_role([("torch/autograd/__init__.py", 266, "backward"), ("<cell>", 3, "<module>")]) == GRADIENTS  # torch < 2.3
    assert stack_role([("??", 0, "torch::autograd::Engine::evaluate_function(...)")]) == GRADIENTS  # C++ frames
    assert stack_role([("C:\\py\\Lib\\site-packages\\torch\\optim\\adamw.py", 1, "_init_group")]) == OPTIMIZER_STATE
    assert stack_role([("/v/transformers/optimization.py", 1, "step")]) == OPTIMIZER_STATE  # Adafactor
    # the user's own optimizer, a torch.optim.Optimizer subclass (its step is wrapped by torch, C++ frames between)
    own = [("opt.py", 30, "_update"), ("opt.py", 12, "step"), ("??", 0, "_PyEval_EvalFrameDefault"),
           ("/v/torch/optim/optimizer.py", 533, "wrapper"), ("train.py", 9, "<module>")]
    assert stack_role(own) == OPTIMIZER_STATE
    # a forward pass that a Lightning closure runs inside optimizer.step is the user's memory
    closure = [("/v/torch/nn/modules/linear.py", 134, "forward"), ("model.py", 20, "training_step"),
               ("/v/lightning/pytorch/loops/optimization/automatic.py", 1, "closure"),
               ("/v/torch/optim/optimizer.py", 533, "wrapper")]
    assert stack_role(closure) == OTHER
    assert stack_role([("train.py", 3, "<module>"), engine]) == OTHER  # the user's line comes first
    # building a model, and moving it (model.to: Module._apply)
    assert stack_role([("/v/torch/nn/modules/linear.py", 106, "__init__"), ("<cell>", 1, "<module>")]) == PARAMETERS
    assert stack_role([("/v/torch/nn/modules/module.py", 1355, "_apply"), ("/v/torch/nn/modules/module.py", 1371, "to"),
                       ("<cell>", 1, "<module>")]) == PARAMETERS
    assert stack_role([("/v/torch/nn/modules/linear.py", 134, "forward"), ("<cell>", 1, "<module>")]) == OTHER
    assert stack_role([]) == OTHER


def test_a_real_training_trace_tells_adamw_state_and_gradients_apart(snapshots_dir):
    """A real CUDA trace of a training step (a course's own AdamW, C++ and Python stacks): read as if it were one
    traced cell, what stays alive is AdamW's state, exactly twice the gradients, and the gradients."""
    from nbdebug.core.memory._trace_result import build

    snap = load_snapshot(snapshots_dir / "torch2.10plus_cs336_wedsonlin_medium_512_training.pickle")
    parts = {p.kind: p for p in build(snap, "cuda:0", 0.0).retained_parts}
    assert parts["optimizer state"].bytes == 2 * parts["gradients"].bytes > 1024**3
    assert "optimizer.py" in parts["optimizer state"].sites[0].filename
    assert parts["other"].bytes < parts["gradients"].bytes / 10


def test_hugging_face_bert_first_step_is_training_state():
    transformers = pytest.importorskip("transformers", reason="transformers is in the dev dependency group")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=256, num_labels=3)
    model = transformers.BertForSequenceClassification(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids, labels = torch.randint(0, 1000, (8, 16)), torch.randint(0, 3, (8,))
    with memtrace("cpu") as rec:
        out = model(input_ids=ids, labels=labels)
        out.loss.backward()
        opt.step()
    del out
    r = rec.result
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    parts = {p.kind: p for p in r.retained_parts}
    assert parts["gradients"].bytes == params and parts["optimizer state"].bytes >= 2 * params
    assert [f.kind for f in r.findings] == ["training_state"]
    # each part has its own way to hold less
    from nbdebug.core.knowledge import entry
    from nbdebug.core.memory._sites import ROLE_NAMES

    titles = [x.title.lower() for x in entry("training_state").fixes]
    assert all(any(t.startswith(kind) for t in titles) for kind in ROLE_NAMES if kind != "other")


def test_on_cuda_what_the_backward_thread_allocates_is_gradients(snapshots_dir):
    """A real CUDA trace with Python-only stacks, cut in the middle of the backward pass: autograd's device thread
    has no Python frame, so its allocations have no stack; in a block that called backward they are the backward
    pass's, not unexplained memory.  The same trace read as CPU (no such thread) leaves them unexplained."""
    from nbdebug.core.memory._trace_result import build

    with open(snapshots_dir / "torch2.10plus_cs336_magma27_memory_snapshot.pickle", "rb") as fh:
        raw = pickle.load(fh)  # a file of the shared test data
    trace = raw["device_traces"][0][:3000]
    no_stack = sum(e["size"] for e in trace if e["action"] == "alloc" and not e.get("frames"))
    assert no_stack > 0
    cut = {"segments": [], "device_traces": [trace]}
    on_cuda = {p.kind: p.bytes for p in build(load_snapshot(cut), "cuda:0", 0.0).retained_parts}
    as_cpu = {p.kind: p.bytes for p in build(load_snapshot(cut), "cpu", 0.0).retained_parts}
    assert on_cuda["gradients"] > as_cpu.get("gradients", 0) and on_cuda["gradients"] >= 1024**2
    assert on_cuda["other"] < as_cpu["other"] and on_cuda["other"] > on_cuda["gradients"]  # the saved activations


def test_predictions_kept_with_their_graphs_say_no_grad_and_under_no_grad_are_no_leak(ip):
    """A list of predictions made with grad on keeps each batch's graph: the first fix is no_grad, in the user's
    names.  The same list made under no_grad keeps only the predictions: no warning at all (it used to say that
    each kept its autograd graph, on the very code that fixed it)."""
    grad = _trace(ip, GRAD_INFERENCE)
    (f,) = grad.findings
    assert f.kind == "memory_retained" and "the list preds" in f.message and "torch.no_grad()" in f.message
    assert "with torch.no_grad()" in f.fixes[0].code and f.fixes[1].code == "preds.append(model(xb).detach())"
    assert "loss" not in f.message
    nograd = _trace(ip, NO_GRAD_INFERENCE)
    assert nograd.retained_bytes > 0 and nograd.findings == ()
    assert 'class="nbdebug warning' not in nograd._repr_html_()


def test_a_list_comprehension_of_predictions_puts_no_grad_first(ip):
    r = _trace(ip, "preds = [model(xb) for xb, _ in batches]\n")
    (f,) = r.findings
    assert f.kind == "memory_retained" and "no_grad" in f.fixes[0].code  # no backward ran: inference


def test_the_context_manager_looks_at_the_callers_lists():
    """``with memtrace():`` inside a function: the list is the function's local, looked at after the block."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
    xs = [torch.randn(256, 64) for _ in range(4)]

    def kept(no_grad: bool) -> MemTrace:
        outs = []
        with memtrace("cpu") as rec, torch.set_grad_enabled(not no_grad):
            for x in xs:
                outs.append(model(x))
        return rec.result

    assert [f.kind for f in kept(no_grad=False).findings] == ["memory_retained"]
    assert kept(no_grad=True).findings == ()


def test_a_list_of_losses_filled_in_a_function_is_found_by_looking_at_it():
    """The line that appends allocates nothing (the loss was made a line before): the list is found in the lines
    of the block, looked up where the block ran, and tied to the block by its tensors' storage."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
    batches = [(torch.randn(256, 64), torch.randn(256, 1)) for _ in range(4)]

    def evaluate(keep_graphs: bool) -> MemTrace:
        history = []
        with memtrace("cpu") as rec, torch.set_grad_enabled(keep_graphs):
            for x, y in batches:
                out = model(x)
                err = torch.nn.functional.mse_loss(out, y)
                history.append(err)
        return rec.result

    (f,) = evaluate(keep_graphs=True).findings
    assert f.kind == "memory_retained" and "history.append(err)" in f.where[0] and "the list history" in f.message
    assert f.fixes[0].code == "history.append(err.item())"  # its tensors are single numbers
    assert evaluate(keep_graphs=False).findings == ()


def test_losses_kept_under_no_grad_are_no_leak(ip):
    r = _trace(ip, "losses = []\nwith torch.no_grad():\n    for xb, yb in batches:\n        out = model(xb)\n"
                   "        loss = criterion(out, yb)\n        losses.append(loss)\n")
    assert r.retained_bytes > 0 and r.findings == ()


def test_the_appended_value_runs_to_its_own_parenthesis():
    from nbdebug.core.memory._kept_lists import _appended

    assert _appended("losses.append(loss)   # keeps every graph (and its activations) alive") == ("losses", "loss")
    assert _appended("    _losses.append(_crit(out, yb))") == ("_losses", "_crit(out, yb)")
    assert _appended('x.append(f("a)", y[0]))  # c') == ("x", 'f("a)", y[0])')
    assert _appended("foo(x)") is None and _appended("z.append(") is None and _appended("h.append()") is None


def test_a_folder_named_nbdebug_is_the_users():
    """The profiler writes paths relative to sys.path: nbdebug's own files are never a site, but a user's script
    in a folder that is merely named nbdebug (a clone of this repository) is."""
    from nbdebug.core.memory._sites import is_user_frame

    assert not is_user_frame(("nbdebug/ipython/_cell.py", 40, "run_body"))
    assert not is_user_frame(("nbdebug/core/memory/_trace.py", 10, "finish"))
    assert is_user_frame(("nbdebug/notebooks/train.py", 3, "<module>"))
    assert is_user_frame(("nbdebug/tests/xla/scenarios.py", 85, "item_and_print"))


def test_the_kinds_agree_with_the_profilers_own_categories():
    """PyTorch's memory profile labels tensors by what it sees them used as (parameter, gradient, optimizer state);
    memtrace's kinds come from the stacks alone.  On a cell that builds a model and trains it, every byte kept
    falls in the same kind both ways."""
    from nbdebug.core.memory._model import ALLOC
    from nbdebug.core.memory._sites import ROLE_NAMES, stack_role

    torch.manual_seed(0)
    with memtrace("cpu", categories=True) as rec:
        net = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
        opt = torch.optim.Adam(net.parameters())
        for _ in range(2):
            x, y = torch.randn(32, 256), torch.randint(0, 10, (32,))
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
    r = rec.result
    r.by_category()
    m, st = r.snapshot.model, r.snapshot.state(0)
    same = {"parameters": "parameter", "gradients": "gradient", "optimizer state": "optimizer_state"}
    both: dict[tuple[str, str], int] = {}
    for i in np.flatnonzero((m.action == ALLOC) & (st.free_of < 0)).tolist():
        kind = ROLE_NAMES[stack_role([m.frames[f] for f in m.stacks[m.stack[i]]])] if m.stack[i] >= 0 else "other"
        category = m.categories[m.category[i]] if m.category[i] >= 0 else "none"
        both[kind, category] = both.get((kind, category), 0) + int(m.size[i])
    weights = sum(p.numel() * 4 for p in net.parameters())
    assert both[("parameters", "parameter")] == both[("gradients", "gradient")] == weights
    assert both[("optimizer state", "optimizer_state")] >= 2 * weights
    disagree = {k: v for k, v in both.items() if k[0] in same and same[k[0]] != k[1]}
    disagree.update({k: v for k, v in both.items() if k[1] in same.values() and same.get(k[0]) != k[1]})
    assert not disagree, disagree
    assert {p.kind: p.bytes for p in r.retained_parts}["gradients"] == weights


def test_a_list_of_tensors_with_no_storage_is_looked_at_without_error():
    """Sparse tensors have no storage to tie to the block: the report is made, and the graph they keep is named."""
    w = torch.randn(3, requires_grad=True)
    kept = []
    with memtrace("cpu") as rec:
        for _ in range(3):
            dense = torch.randn(512, 512) * w.sum()
            kept.append(dense.to_sparse())
    assert rec.result.retained_bytes > 0 and rec.result.findings  # the list keeps graphs: the classic leak
    assert rec.result.findings[0].kind == "memory_retained"


def _tiny_bert():
    transformers = pytest.importorskip("transformers", reason="transformers is in the dev dependency group")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=256, num_labels=3)
    return transformers.BertForSequenceClassification(cfg).eval()


def test_hugging_face_inference_that_keeps_logits_names_the_list_in_the_block():
    """The memory a Hugging Face model keeps is allocated in the library's files (the sites), but the list that keeps
    it is filled in the block: the block's own lines are read too."""
    model, batches = _tiny_bert(), [torch.randint(0, 1000, (8, 32)) for _ in range(3)]

    def predict(grad: bool) -> MemTrace:
        logits = []
        with memtrace("cpu") as rec, torch.set_grad_enabled(grad):
            for ids in batches:
                out = model(input_ids=ids)
                logits.append(out.logits)
        return rec.result

    kept = predict(grad=True)
    assert all("test_memory_trace.py" not in s.filename for s in kept.retained_sites)  # the sites: the library's
    (f,) = kept.findings
    assert "logits.append(out.logits)" in f.where[0] and "the list logits" in f.message
    assert "no_grad" in f.fixes[0].code and f.fixes[1].code == "logits.append(out.logits.detach())"
    assert predict(grad=False).findings == ()


def test_the_magic_reads_its_own_cell_when_the_sites_are_in_a_library(ip):
    ip.user_ns["hf_model"] = _tiny_bert()
    ip.user_ns["id_batches"] = [torch.randint(0, 1000, (8, 32)) for _ in range(3)]
    r = _run(ip, "kept = []\nfor ids in id_batches:\n    kept.append(hf_model(input_ids=ids).logits)\n")
    assert not any(s.site.startswith("In [") for s in r.retained_sites)  # all made in the library's files
    (f,) = r.findings
    assert "line 3: kept.append(hf_model(input_ids=ids).logits)" in f.where[0], f.where
    assert f.fixes[1].code == "kept.append(hf_model(input_ids=ids).logits.detach())"


def test_a_dict_filled_with_outputs_is_named_like_a_list():
    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
    xs = [torch.randn(256, 64) for _ in range(4)]

    def cache_outputs(grad: bool, detach: bool = False) -> MemTrace:
        cache = {}
        with memtrace("cpu") as rec, torch.set_grad_enabled(grad):
            for i, x in enumerate(xs):
                out = model(x)
                if detach:
                    cache[i] = out.detach()
                else:
                    cache[i] = out  # kept with its graph
        return rec.result

    (f,) = cache_outputs(grad=True).findings
    assert "the dict cache" in f.message and "cache[i] = out" in f.where[0] and "#" not in f.where[0]
    assert "no_grad" in f.fixes[0].code and f.fixes[1].code == "cache[i] = out.detach()"
    assert cache_outputs(grad=False).findings == ()
    assert not any("the dict" in x.message for x in cache_outputs(grad=True, detach=True).findings)


def test_stored_lines():
    from nbdebug.core.memory._kept_lists import _stored

    assert _stored("    cache[i] = out  # kept") == ("cache", "i", "out")
    assert _stored("d[x[0]] = model(x)") == ("d", "x[0]", "model(x)")
    assert _stored("cache[i] = out.detach()") is None and _stored("acc[k] = loss.item()") is None
    assert _stored("if a[0] == b:") is None and _stored("x = y[0]") is None


def test_nbdebugs_own_files_are_listed_from_the_package_itself():
    """The patterns that tell nbdebug's files from a folder merely named nbdebug list its subpackages and modules:
    a new one must be added there, or its frames would read as the user's."""
    from pathlib import Path

    import nbdebug
    from nbdebug.core._own import MODULES, SUBPACKAGES

    root = Path(nbdebug.__file__).parent
    assert set(SUBPACKAGES) == {p.name for p in root.iterdir() if (p / "__init__.py").is_file()}
    assert set(MODULES) == {p.stem for p in root.glob("*.py")}


def test_a_tensor_subclass_that_raises_leaves_the_list_unseen_and_the_report_whole():
    class Touchy(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") in ("numel", "grad_fn", "__get__"):
                raise ValueError("not today")
            return super().__torch_function__(func, types, args, kwargs or {})

    kept = []
    with memtrace("cpu") as rec:
        for _ in range(3):
            kept.append(torch.randn(256, 256).as_subclass(Touchy))
    assert rec.result.retained_bytes >= 3 * 256 * 256 * 4
    rec.result._repr_mimebundle_()  # the report is made
