"""No panel, text report or JSON names a file the user does not have: no playbook ('seed'), no research notes, no
path from the machine where example data was recorded.

One result of each capability is built on CPU from real inputs and rendered through the registry (text, HTML) and
``to_dict()``; the explainer's corpora are checked in tests/test_explain.py.
"""

from __future__ import annotations

import json
import re

import pytest
import torch
from torch import nn

import nbdebug
import nbdebug.examples as ex
import nbdebug.xla as nx
from nbdebug.core.memory._oom import enrich_oom
from nbdebug.dist import parse_nccl_log
from nbdebug.render import to_html, to_text

INTERNAL = re.compile(r"seed:|seeds/|\bseed playbook|shared/notes|debugging-recipes|gpu-tpu-common-errors|"
                      r"training-failures-troubleshooting|pytorch-troubleshooting|debug-distributed|/work/wt", re.I)


def _doctor():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3), nn.Softmax(dim=1))
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    return nbdebug.doctor(model, (x, y), nn.CrossEntropyLoss(), steps=10)


def _history():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    with nbdebug.GradMonitor(model, num_classes=3, live=False) as mon:
        for _ in range(30):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            mon.log_loss(loss)
            opt.step()
    return mon.history


def _xla():
    return nx.diagnose(ex.path("xla/xla29_constant_hyperparameter.txt").read_text(),
                       debug_log=ex.path("xla/xla29_constant_hyperparameter.debug.txt").read_text())


def _compile():
    def f(a):
        if a.sum().item() > 0:
            return a * 2
        return a - 1

    return nbdebug.compile_check(f, torch.randn(4))


def _oom():
    snap = nbdebug.load_snapshot(ex.path("snapshots/flexgen_oom.pickle"))
    exc = torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total "
                                      "capacity; 13.01 GiB already allocated; 1.28 GiB free; 13.30 GiB reserved)")
    return enrich_oom(exc, nbdebug.explain(exc), snap)


def _snapshot():
    return nbdebug.load_snapshot(ex.path("snapshots/forward_fp32_128.pickle")).summary()


def _nccl():
    return parse_nccl_log(ex.path("dist/watchdog_timeout.log").read_text())


BUILDERS = {"doctor": _doctor, "grad history": _history, "xla": _xla, "compile": _compile, "oom": _oom,
            "snapshot summary": _snapshot, "nccl log": _nccl}


@pytest.mark.parametrize("name", BUILDERS)
def test_no_internal_names_in_what_the_user_sees(name):
    result = BUILDERS[name]()
    outputs = {"text": to_text(result), "html": to_html(result), "json": json.dumps(result.to_dict())}
    for kind, text in outputs.items():
        m = INTERNAL.search(text)
        assert m is None, f"{name} {kind}: {text[max(0, m.start() - 80):m.end() + 40]!r}"


def _memtrace():
    with nbdebug.memtrace("cpu") as rec:
        losses = []
        net = nn.Linear(16, 16)
        for _ in range(3):
            losses.append(net(torch.randn(8, 16)).sum())
    return rec.result


# a program's dump: an identifier with a number (``retained_bytes=3217456``), or pairs in a row (``compiles=6,
# cache_hits=0``); a setting quoted in prose (``lr=0.1``, ``capture_scalar_outputs=False``) is words
_DUMP = re.compile(r"\b[a-z]+(?:_[a-z]+)+=[0-9]|\b\w+=[^\s,;]+[,;]? \w+=[^\s,;]+")


def _visible_words(html: str) -> str:
    """The text a reader sees in a panel, less code blocks and the data-URI pictures (which may hold anything)."""
    html = re.sub(r"<pre\b.*?</pre>|<code\b.*?</code>|<script\b.*?</script>|<style\b.*?</style>", " ", html,
                  flags=re.S)
    return re.sub(r"<[^>]+>", " ", html)


# (the NCCL log's panel quotes NCCL's own lines, "WorkNCCL(SeqNum=808, OpType=ALLREDUCE, ...)", to grep for)
@pytest.mark.parametrize("name", [*(b for b in BUILDERS if b != "nccl log"), "memtrace"])
def test_panels_say_numbers_in_words_not_key_value_dumps(name):
    # issue 26, item 12: "compiles=6, cache_hits=0", "retained_bytes=3217456" in panels
    result = _memtrace() if name == "memtrace" else BUILDERS[name]()
    words = _visible_words(to_html(result))
    dumps = _DUMP.findall(words)
    assert not dumps, f"{name}: {dumps[:5]}"
