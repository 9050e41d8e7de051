"""predict_memory: the user's objects untouched, kinds and phases, what-ifs, custom loops, Lightning, bad input, the
OOM panel's prediction and the renderers."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from nbdebug.core.memory._predict import predict_memory  # noqa: E402
from nbdebug.core.memory._predict_alloc import round_size  # noqa: E402
from nbdebug.core.memory._predict_trace import StepError  # noqa: E402

CORPUS = Path(__file__).parent / "data" / "errors"


class Deep(nn.Module):
    def __init__(self, width: int = 256, depth: int = 6) -> None:
        super().__init__()
        self.inp = nn.Linear(64, width)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(depth))
        self.out = nn.Linear(width, 10)

    def forward(self, x: Any) -> Any:
        x = self.inp(x)
        for b in self.blocks:
            x = b(x)
        return self.out(x)


def _setup(batch: int = 128) -> tuple[Any, Any, Any, Any]:
    torch.manual_seed(0)
    model = Deep()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, (torch.randn(batch, 64), torch.randint(0, 10, (batch,))), nn.CrossEntropyLoss(), opt


def test_the_users_model_optimizer_batch_and_rng_are_untouched() -> None:
    model, batch, loss_fn, opt = _setup()
    loss_fn(model(batch[0]), batch[1]).backward()
    opt.step()  # the optimizer has state; the model has gradients
    params = [p.detach().clone() for p in model.parameters()]
    grads = [p.grad.clone() for p in model.parameters()]
    state = copy.deepcopy(opt.state_dict())
    x0, y0 = batch[0].clone(), batch[1].clone()
    rng = torch.get_rng_state()
    model.blocks[0][0].register_forward_hook(lambda *a: None)
    pred = predict_memory(model, batch, loss_fn, opt, device="cpu")
    assert pred.peak_bytes > 0
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(a, b) for a, b in zip(params, model.parameters()))
    assert all(torch.equal(g, p.grad) for g, p in zip(grads, model.parameters()))
    after = opt.state_dict()
    assert after["param_groups"] == state["param_groups"]
    for k, s in state["state"].items():
        assert all(torch.equal(v, after["state"][k][n]) for n, v in s.items())
    assert torch.equal(batch[0], x0) and torch.equal(batch[1], y0)
    assert not any(type(p).__name__ == "FakeTensor" for p in model.parameters())


def test_kinds_add_up_and_name_the_step() -> None:
    model, batch, loss_fn, opt = _setup()
    pred = predict_memory(model, batch, loss_fn, opt, device="cpu")
    assert sum(k.bytes for k in pred.by_kind) == pred.peak_bytes
    params = sum(p.numel() * 4 for p in model.parameters())
    assert pred.kind_bytes("parameters") == params
    assert pred.kind_bytes("optimizer state") >= 2 * params  # AdamW: exp_avg, exp_avg_sq (+ step counters)
    assert pred.state_bytes == params + pred.kind_bytes("optimizer state") + pred.kind_bytes("batch")
    assert pred.peak_phase in ("forward", "backward", "optimizer")
    assert not pred.partial and pred.notes == ()
    # a forward-heavy step: activations kept for backward, by module
    big = predict_memory(model, (torch.randn(8192, 64), torch.randint(0, 10, (8192,))), loss_fn, None,
                         device="cpu")
    assert big.activations_by_module and big.activations_by_module[0].module.startswith(("blocks", "inp", "out"))
    assert "no optimizer" in big.notes[0]


def test_what_ifs_move_the_peak_the_right_way() -> None:
    model, batch, loss_fn, opt = _setup(batch=2048)
    pred = predict_memory(model, batch, loss_fn, opt, device="cpu")
    assert pred.what_if(batch_size=4096).peak_bytes > pred.peak_bytes
    assert pred.what_if(checkpointing=True).kind_bytes("activations") < pred.kind_bytes("activations")
    sgd = pred.what_if(optimizer="sgd")
    assert sgd.kind_bytes("optimizer state") < pred.kind_bytes("optimizer state")
    accum = pred.what_if(batch_size=1024, accumulation_steps=2)
    assert accum.settings["accumulation_steps"] == 2 and accum.peak_bytes < pred.peak_bytes
    with pytest.raises(TypeError, match="what_if got lr"):
        pred.what_if(lr=1)
    with pytest.raises(ValueError, match="not an autocast dtype"):
        pred.what_if(dtype="int8")
    fixes = pred.fixes
    assert [f.peak_bytes for f in fixes] == sorted(f.peak_bytes for f in fixes)
    assert all(f.saving_bytes == pred.total_bytes - f.peak_bytes for f in fixes)


def test_largest_batch_fits_and_one_more_does_not() -> None:
    model, batch, loss_fn, opt = _setup()
    pred = predict_memory(model, batch, loss_fn, opt, device="cuda", context_bytes=0)
    budget = pred.what_if(batch_size=3000).total_bytes
    best = pred.largest_batch(budget)
    assert best >= 3000
    assert pred.what_if(batch_size=best).total_bytes <= budget < pred.what_if(batch_size=best + 1).total_bytes
    assert pred.largest_batch(1000) == 0


def test_cuda_rounds_blocks_and_adds_the_context() -> None:
    model, batch, loss_fn, opt = _setup()
    cpu = predict_memory(model, batch, loss_fn, opt, device="cpu")
    cuda = predict_memory(model, batch, loss_fn, opt, device="cuda", capacity="8 GiB")
    assert cuda.reserved_bytes >= cuda.peak_bytes and cuda.reserved_bytes % (2 << 20) == 0
    assert cuda.context_bytes > 0 and cuda.total_bytes == cuda.reserved_bytes + cuda.context_bytes
    assert cuda.kind_bytes("parameters") == sum(round_size(p.numel() * 4) for p in model.parameters())
    assert cuda.fits is True and cpu.fits is None
    assert any("estimate" in n for n in cuda.notes)


def test_gradient_accumulation_and_a_step_callable_agree() -> None:
    model, batch, loss_fn, opt = _setup()

    def step(m: Any, b: Any, o: Any) -> None:
        for _ in range(2):  # as the built-in loop: a micro-batch's output lives until the next one replaces it
            out = m(b[0])
            loss = loss_fn(out, b[1]) / 2
            loss.backward()
        o.step()
        o.zero_grad(set_to_none=True)

    by_loop = predict_memory(model, batch, loss_fn, opt, device="cpu", accumulation_steps=2)
    by_step = predict_memory(model, batch, optimizer=opt, step=step, device="cpu")
    assert by_step.peak_bytes == by_loop.peak_bytes
    assert by_step.kind_bytes("gradients") == by_loop.kind_bytes("gradients") > 0


def test_a_huggingface_model_with_a_dict_batch() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=500, n_embd=64, n_layer=2, n_head=2, n_positions=64)
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 500, (4, 32))
    pred = predict_memory(model, {"input_ids": ids, "labels": ids}, optimizer=torch.optim.AdamW(model.parameters()),
                          device="cpu")
    assert pred.kind_bytes("activations") > 0 and not pred.partial
    assert pred.what_if(checkpointing=True).kind_bytes("activations") < pred.kind_bytes("activations")


def test_a_lightning_module() -> None:
    pl = pytest.importorskip("lightning.pytorch")

    class Lit(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = Deep()

        def training_step(self, batch: Any, idx: int) -> Any:
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.Adam(self.parameters())

    lit = Lit()
    pred = predict_memory(lit, (torch.randn(64, 64), torch.randint(0, 10, (64,))), device="cpu")
    assert pred.settings["optimizer"] == "Adam" and pred.kind_bytes("optimizer state") > 0


def test_item_in_the_step_marks_the_prediction_partial() -> None:
    model, batch, loss_fn, opt = _setup()
    seen: list[float] = []

    def step(m: Any, b: Any, o: Any) -> None:
        loss = loss_fn(m(b[0]), b[1])
        seen.append(loss.item())
        loss.backward()
        o.step()

    pred = predict_memory(model, batch, optimizer=opt, step=step, device="cpu")
    assert pred.partial and "stand-in" in pred.notes[0] and "loss.item()" in pred.notes[0]
    assert seen == [1.0, 1.0]  # the warm-up run and the predicted one


def test_a_data_dependent_shape_is_one_clear_error_naming_op_and_line() -> None:
    model, batch, loss_fn, opt = _setup()

    def step(m: Any, b: Any, o: Any) -> None:
        out = m(b[0])
        keep = out[out.sum(1) > 0]  # boolean indexing: a shape that depends on the values
        keep.sum().backward()

    with pytest.raises(StepError, match=r"depends on the data \(aten\.nonzero.*test_predict\.py:\d+"):
        predict_memory(model, batch, optimizer=opt, step=step, device="cpu")


def test_a_step_that_reaches_for_the_real_model_is_refused() -> None:
    model, batch, loss_fn, opt = _setup()

    def step(m: Any, b: Any, o: Any) -> None:
        loss_fn(model(b[0]), b[1]).backward()  # the real model, not the copy it was given

    with pytest.raises(StepError, match="not one of the model, batch or optimizer"):
        predict_memory(model, batch, optimizer=opt, step=step, device="cpu")
    assert all(p.grad is None for p in model.parameters())


def test_bad_arguments() -> None:
    model, batch, loss_fn, opt = _setup()
    with pytest.raises(ValueError, match="device='tpu'"):
        predict_memory(model, batch, loss_fn, opt, device="tpu")
    with pytest.raises(ValueError, match="needs a batch"):
        predict_memory(model)
    with pytest.raises(ValueError, match="not known"):
        predict_memory(model, batch, loss_fn, "lion", device="cpu")
    other = torch.optim.SGD(nn.Linear(2, 2).parameters())
    with pytest.raises(ValueError, match="not the model's"):
        predict_memory(model, batch, loss_fn, other, device="cpu")


def test_renderers_show_the_bar_the_fixes_and_a_picture() -> None:
    model, batch, loss_fn, opt = _setup()
    pred = predict_memory(model, batch, loss_fn, opt, device="cuda", capacity="64 MiB")
    text = str(pred)
    assert "optimizer state" in text and "fixes, predicted" in text and "does not fit 64.00 MiB" in text
    bundle = pred._repr_mimebundle_()
    assert {"text/plain", "text/html", "image/png"} <= set(bundle)
    html = bundle["text/html"]
    assert "<svg" in html and "--jp-content-font-color1" in html and "predicted peak" in html
    assert "Will it fit?" in html and "<script" not in html
    assert pred.to_dict()["fits"] is False and pred.to_pandas().shape[0] == len(pred.by_kind)


def test_the_oom_panel_adds_the_prediction_with_a_model_in_scope() -> None:
    from nbdebug.core.explain import explain
    from nbdebug.ipython._memory import OomCapture

    text = (CORPUS / "cuda_oom__v23_expandable_16417.txt").read_text()
    message = text.strip().splitlines()[-1].split(": ", 1)[1]
    exc = torch.OutOfMemoryError(message)
    diagnosis = explain(exc)
    model, batch, loss_fn, opt = _setup()

    class Shell:
        user_ns = {"model": model, "optimizer": opt, "criterion": loss_fn, "x": batch[0], "y": batch[1]}

    enriched = OomCapture(Shell()).enrich(exc, diagnosis)
    (section,) = [s for s in enriched.sections if "predict" in s.title]
    facts = dict(section.facts)
    assert facts["GPU capacity"] == "23.65 GiB" and "predicted need" in facts
    assert "model model" in section.text and "batch (x, y)" in section.text
    assert section.rows[0][0].startswith("batch ") and "largest that fits" in section.rows[0][0]
    # no model in scope: the panel is unchanged
    Shell.user_ns = {"x": batch[0]}
    assert OomCapture(Shell()).enrich(exc, diagnosis).sections == diagnosis.sections


def test_memtrace_predict_shows_predicted_against_measured_by_kind(ip: Any) -> None:
    from IPython.utils.capture import capture_output

    ip.run_cell("import torch, torch.nn as nn\n"
                "torch.manual_seed(0)\n"
                "pm = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 10))\n"
                "popt = torch.optim.Adam(pm.parameters())\n"
                "px, py = torch.randn(512, 256), torch.randint(0, 10, (512,))\n"
                "plosses = []\n"
                "nn.functional.cross_entropy(pm(px), py).backward(); popt.step(); popt.zero_grad()\n")
    before = [p.detach().clone() for p in ip.user_ns["pm"].parameters()]
    with capture_output() as out:
        ip.run_cell("%%memtrace --predict -o pchk\n"
                    "loss = nn.functional.cross_entropy(pm(px), py)\n"
                    "loss.backward()\n"
                    "popt.step()\n"
                    "popt.zero_grad()\n"
                    "plosses.append(loss.item())\n"
                    "print('step done')\n")
    chk = ip.user_ns["pchk"]
    assert out.stdout.count("step done") == 1  # the predicting run prints nothing
    assert len(ip.user_ns["plosses"]) == 1 and ip.user_ns["plosses"][0] != 1.0  # the real run's value, once
    assert abs(chk.error_pct) <= 5, chk
    rows = {k.kind: k for k in chk.kinds}
    acts = rows["activations"]
    assert acts.measured_bytes and abs(acts.predicted_bytes - acts.measured_bytes) <= 0.01 * acts.measured_bytes
    assert chk.prediction.partial and "plosses.append(loss.item())" in chk.prediction.notes[0]
    # the real step ran once: the parameters moved, as one optimizer step moves them
    assert any(not torch.equal(a, b) for a, b in zip(before, ip.user_ns["pm"].parameters()))
    shown = ip.display_formatter.format(chk)[0]
    assert "predicted" in shown["text/plain"] and "<table" in shown["text/html"]


def test_memtrace_predict_refuses_a_cell_it_cannot_run_before_running_it(ip: Any) -> None:
    from IPython.utils.capture import capture_output

    ip.run_cell("import torch\npv = torch.randn(64)\nran = []\n")
    with capture_output() as out:
        result = ip.run_cell("%%memtrace --predict\nran.append(1)\nkept = pv[pv > 0]\n")
    assert result.error_in_exec is not None or "UsageError" in out.stderr + out.stdout
    assert "depends on the data" in out.stderr + out.stdout and "line 2" in out.stderr + out.stdout
    assert ip.user_ns["ran"] == []


def test_ddp_buckets_are_counted_against_a_measured_step(tmp_path: Path) -> None:
    """DDP on CPU (gloo, one process): the prediction of the wrapped model's step against memtrace's measurement."""
    import socket

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from nbdebug.core.memory._trace import memtrace

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        model, batch, loss_fn, _ = _setup(batch=256)
        ddp = DDP(model, bucket_cap_mb=1)
        opt = torch.optim.AdamW(ddp.parameters())
        pred = predict_memory(ddp, batch, loss_fn, opt, device="cpu")
        plain = predict_memory(model, batch, loss_fn, opt, device="cpu")
        params = sum(p.numel() * 4 for p in model.parameters())
        assert pred.state_bytes - plain.state_bytes == params  # the buckets: one flat copy of the gradients
        assert "buckets" in pred.notes[0]

        def step() -> None:
            loss_fn(ddp(batch[0]), batch[1]).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        step()
        step()
        with memtrace("cpu") as rec:
            step()
        predicted_rise = pred.peak_bytes - pred.state_bytes
        assert abs(predicted_rise - rec.peak_bytes) <= 0.05 * rec.peak_bytes, (predicted_rise, rec.peak_bytes)
    finally:
        dist.destroy_process_group()
