"""memtrace's walk of the profiler's event tree, checked against a plain reference walk on real recordings.

``walk_allocations`` is written for speed (a stack of iterators, chain links shared and read once, a fast path
that skips the reordering).  The reference below is the obvious recursion over the same tree, with the same rules
for frames (``_caller_frame`` for each Python call above an allocation, innermost first, and ``_operator_frame``
for an allocation made by an operator inside a Python function): both must give the same allocations, in the same
order, with the same stacks, on recordings of the shapes users trace (an MLP, a Transformer, a Hugging Face model,
operators recorded, two threads, files and functions with odd names, nothing at all).
"""

from __future__ import annotations

import threading

import pytest
import torch

from nbdebug.core.memory import _cpu_record
from nbdebug.core.memory._cpu_record import CpuRecording, _caller_frame, _operator_frame, walk_allocations


def _record(fn, *, ops=False):
    rec = CpuRecording(ops=ops)
    rec.start()
    try:
        fn()
    finally:
        rec.stop()
    return rec.results


def reference_walk(results):
    """(t_ns, ptr, size, frames innermost first or None for a free) of every CPU allocation, in time order."""
    from torch._C._profiler import _ExtraFields_Allocation, _ExtraFields_PyCall, _ExtraFields_PyCCall

    rows = []

    def visit(node, chain):
        if node.children:
            for child in node.children:
                visit(child, [*chain, node])
            return
        try:
            if node.name != "[memory]":
                return
        except UnicodeDecodeError:
            return
        fields = node.extra_fields
        if type(fields) is not _ExtraFields_Allocation or fields.alloc_size == 0 or fields.device.type != "cpu":
            return
        frames = None
        if fields.alloc_size > 0:
            calls = [c for c in chain if type(c.extra_fields) in (_ExtraFields_PyCall, _ExtraFields_PyCCall)]
            frames = tuple(_caller_frame(c.extra_fields.caller) for c in reversed(calls))
            if calls and type(calls[-1].extra_fields) is _ExtraFields_PyCall:
                callee = _operator_frame(calls[-1])
                if callee is not None:
                    frames = (callee, *frames)
        rows.append((node.start_time_ns, fields.ptr, fields.alloc_size, frames))

    for root in results.experimental_event_tree():
        visit(root, [])
    order = sorted(range(len(rows)), key=lambda i: rows[i][0])  # stable: ties keep the tree's order
    return [rows[i] for i in order]


def walked(results):
    a = walk_allocations(results)
    return [(t, p, s, None if sid < 0 else tuple(a.frames[f] for f in a.stacks[sid]))
            for t, p, s, sid in zip(a.t_ns.tolist(), a.ptr.tolist(), a.size.tolist(), a.stack.tolist())]


def _mlp_steps(n):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
    opt = torch.optim.Adam(model.parameters())
    x, y = torch.randn(32, 64), torch.randn(32, 1)

    def run():
        for _ in range(n):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    return run


def _transformer_steps():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 2, 64, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(4, 16, 32)

    def run():
        for _ in range(2):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
    return run


def _bert_step():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(cfg)
    ids, labels = torch.randint(0, 200, (4, 16)), torch.tensor([0, 1, 0, 1])

    def run():
        model(input_ids=ids, labels=labels).loss.backward()
    return run


def _two_threads():
    def other():
        for _ in range(20):
            torch.randn(128, 128) @ torch.randn(128, 128)

    def run():
        t = threading.Thread(target=other)
        t.start()
        for _ in range(20):
            torch.ones(300, 300).sum()
        t.join()
    return run


def _odd_names():
    # a function whose file name is not ASCII, a lambda, a generator and recursion, each allocating
    ns: dict = {}
    exec(compile("import torch\ndef made_in_cafe(n):\n    return torch.zeros(n) + 1\n", "café_ñ.py", "exec"), ns)

    def deep(k):
        return torch.ones(64) if k == 0 else deep(k - 1) * 2

    def run():
        kept = [ns["made_in_cafe"](100), (lambda: torch.empty(7))(), deep(30)]
        kept += list(torch.full((3,), float(i)) for i in range(3))
        return kept
    return run


WORKLOADS = {
    "mlp step": (lambda: _mlp_steps(1), False),
    "mlp, 3 steps, with operators recorded": (lambda: _mlp_steps(3), True),
    "transformer": (_transformer_steps, False),
    "hugging face bert": (_bert_step, False),
    "two threads": (_two_threads, False),
    "odd names": (_odd_names, False),
    "nothing": (lambda: (lambda: None), False),
}


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_the_walk_gives_what_the_plain_recursion_gives(name):
    make, ops = WORKLOADS[name]
    fn = make()
    fn()  # warm: optimizer state, lazy modules
    results = _record(fn, ops=ops)
    got, want = walked(results), reference_walk(results)
    assert len(got) == len(want)
    assert got == want
    if name == "nothing":
        return
    assert any(s > 0 for _, _, s, _ in got) and any(s < 0 for _, _, s, _ in got), "allocations and frees seen"
    frames = {f for *_, fs in got if fs for f in fs}
    if name == "odd names":
        assert any(f[0] == "café_ñ.py" and f[2] == "made_in_cafe" for f in frames)
        assert any(f[2] == "<lambda>" for f in frames) and any(f[2] == "deep" for f in frames)
    if name == "hugging face bert":
        assert any("transformers" in f[0] for f in frames), "the library's own frames are there"


def test_the_walk_reads_devices_the_same_where_an_accelerator_could_be(monkeypatch):
    # with an accelerator the walk reads each allocation's device; here every one is the CPU's: the same result
    fn = _mlp_steps(1)
    fn()
    results = _record(fn)
    plain = walked(results)
    monkeypatch.setattr(_cpu_record, "_other_devices_possible", lambda: True)
    assert walked(results) == plain and plain

