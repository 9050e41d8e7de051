"""The OOM panel reads cleanly: no doubled period after a size, no distributed section for one process."""

from __future__ import annotations

import re

import pytest
import torch

import nbdebug
from nbdebug.core.memory._oom import enrich_oom

MESSAGES = [
    "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total capacity; 13.01 GiB already allocated; "
    "1.28 GiB free; 13.30 GiB reserved in total by PyTorch)",
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.02 GiB is "
    "free. Including non-PyTorch memory, this process has 78.07 GiB memory in use. Of the allocated memory 75.00 GiB "
    "is allocated by PyTorch, and 2.00 GiB is reserved by PyTorch but unallocated.",
]


@pytest.mark.parametrize("message", MESSAGES)
def test_oom_panel_wording(message):
    snap = nbdebug.load_snapshot(nbdebug.examples.path("snapshots/flexgen_oom.pickle"))
    exc = torch.cuda.OutOfMemoryError(message)
    d = enrich_oom(exc, nbdebug.explain(exc), snap)
    for text in (str(d), d._repr_html_()):
        assert not re.search(r"[^.]\.\.(?!\.)", text), re.search(r".{40}[^.]\.\.(?!\.).{10}", text)
        assert "Distributed" not in text
    assert d.kind == "cuda_oom" and any("OOM" in s.title or "Memory" in s.title for s in d.sections)


def test_a_single_process_oom_gets_no_distributed_section(ip):
    from IPython.utils.capture import capture_output

    ip.user_ns["_oom_message"] = MESSAGES[1]
    with capture_output() as out:
        ip.run_cell("import torch\nraise torch.cuda.OutOfMemoryError(_oom_message)")
    panels = [o.data["text/plain"] for o in out.outputs if "nbdebug" in o.data.get("text/plain", "")]
    assert len(panels) == 1 and "cuda_oom" in panels[0]
    assert "Distributed" not in panels[0] and not re.search(r"[^.]\.\.(?!\.)", panels[0])
