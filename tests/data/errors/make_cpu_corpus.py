"""Trigger real PyTorch errors on CPU and write each full traceback to ``<slug>__<short>.txt``.

Run from the repository root: ``python tests/data/errors/make_cpu_corpus.py``.  The files it writes are
committed: they are the exact texts PyTorch produced on this machine (the first line records the versions).
Nothing here is hand-written error text; every file comes from ``traceback.format_exc()`` of a real raise,
or from the stderr of a real subprocess.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
CASES: dict[str, Callable[[], None]] = {}


def case(name: str) -> Callable[[Callable[[], None]], Callable[[], None]]:
    def deco(fn: Callable[[], None]) -> Callable[[], None]:
        CASES[name] = fn
        return fn

    return deco


# ---------------------------------------------------------------- shapes
@case("shape_mismatch__matmul_linear")
def _():
    model = nn.Sequential(nn.Linear(8, 10), nn.ReLU(), nn.Linear(20, 5))
    model(torch.randn(4, 8))


@case("shape_mismatch__matmul")
def _():
    torch.randn(4, 10) @ torch.randn(20, 5)


@case("shape_mismatch__mm_sizes")
def _():
    torch.mm(torch.randn(3, 4), torch.randn(5, 6))


@case("shape_mismatch__broadcast")
def _():
    torch.randn(2, 3) + torch.randn(2, 4)


@case("shape_mismatch__conv_channels")
def _():
    nn.Conv2d(3, 16, 3)(torch.randn(1, 1, 28, 28))


@case("shape_mismatch__conv_dims")
def _():
    nn.Conv2d(3, 16, 3)(torch.randn(28, 28))


@case("shape_mismatch__cat")
def _():
    torch.cat([torch.randn(2, 3), torch.randn(3, 4)], dim=1)


@case("shape_mismatch__stack")
def _():
    torch.stack([torch.randn(3, 32, 32), torch.randn(1, 32, 32)])


@case("shape_mismatch__view_invalid")
def _():
    torch.arange(12).view(5, -1)


@case("shape_mismatch__batch_size_target")
def _():
    F.cross_entropy(torch.randn(4, 3), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1]))


@case("shape_mismatch__bce_target_size")
def _():
    F.binary_cross_entropy_with_logits(torch.randn(4, 1), torch.rand(4))


@case("shape_mismatch__expand")
def _():
    torch.randn(3, 4).expand(3, 5)


@case("shape_mismatch__inplace_broadcast")
def _():
    x = torch.zeros(1, 28, 28)
    x += torch.ones(3, 28, 28)


@case("shape_mismatch__dim_out_of_range")
def _():
    torch.randn(4).softmax(dim=1)


@case("shape_mismatch__lstm_input")
def _():
    nn.LSTM(10, 20, batch_first=True)(torch.randn(4, 7, 12))


@case("shape_mismatch__layernorm")
def _():
    nn.LayerNorm(64)(torch.randn(2, 10, 32))


@case("shape_mismatch__attention_mask")
def _():
    F.scaled_dot_product_attention(torch.randn(2, 4, 8, 16), torch.randn(2, 4, 8, 16), torch.randn(2, 4, 8, 16),
                                   attn_mask=torch.ones(3, 5, dtype=torch.bool))


@case("shape_mismatch__meta_broadcast")
def _():
    torch.randn(2, device="meta") + torch.randn(3)


@case("device_mismatch__meta_linear")
def _():
    nn.Linear(3, 2, device="meta")(torch.randn(4, 3))


@case("version_mismatch__cpu_only_build")
def _():
    if torch.cuda.is_available():  # this case needs a CPU-only build
        raise RuntimeError("skip: CUDA is available")
    torch.randn(2).to("cuda")


# ---------------------------------------------------------------- views
@case("view_non_contiguous__transpose_view")
def _():
    torch.randn(4, 6).t().view(24)


@case("view_non_contiguous__permute_view")
def _():
    x = torch.randn(2, 3, 4, 5).permute(0, 2, 1, 3)
    x.view(2, 4, 15)


# ---------------------------------------------------------------- dtypes
@case("dtype_mismatch__linear_double")
def _():
    nn.Linear(3, 2)(torch.randn(5, 3, dtype=torch.float64))


@case("dtype_mismatch__matmul_double_float")
def _():
    torch.randn(2, 3, dtype=torch.float64) @ torch.randn(3, 2)


@case("dtype_mismatch__long_input_linear")
def _():
    nn.Linear(3, 2)(torch.arange(6).view(2, 3))


@case("dtype_mismatch__nll_float_target")
def _():
    F.nll_loss(F.log_softmax(torch.randn(4, 3), 1), torch.tensor([0.0, 1.0, 2.0, 1.0]))


@case("shape_mismatch__nll_multi_target")
def _():
    F.nll_loss(F.log_softmax(torch.randn(4, 3), 1), torch.tensor([0, 1, 2, 1]).view(4, 1))


@case("dtype_mismatch__scatter_src")
def _():
    torch.zeros(3).scatter_(0, torch.tensor([0]), torch.tensor([1]))


@case("dtype_mismatch__conv_double")
def _():
    nn.Conv2d(3, 4, 3)(torch.randn(1, 3, 8, 8, dtype=torch.float64))


@case("dtype_mismatch__embedding_float_index")
def _():
    nn.Embedding(10, 4)(torch.tensor([1.0, 2.0]))


@case("dtype_mismatch__index_put_long")
def _():
    x = torch.zeros(4, dtype=torch.long)
    x[torch.tensor([0, 1])] = torch.tensor([0.5, 1.5])


@case("dtype_mismatch__bmm_half")
def _():
    torch.bmm(torch.randn(2, 3, 4, dtype=torch.float16), torch.randn(2, 4, 5))


@case("dtype_mismatch__out_cast")
def _():
    torch.add(torch.ones(2), torch.ones(2), out=torch.zeros(2, dtype=torch.long))


# ---------------------------------------------------------------- autograd
@case("inplace_autograd__relu_inplace")
def _():
    x = torch.randn(3, 4, requires_grad=True)
    y = torch.sigmoid(x)
    y.mul_(2)
    y.sum().backward()


@case("inplace_autograd__plus_equals")
def _():
    w = torch.randn(4, 4, requires_grad=True)
    h = torch.tanh(w @ torch.randn(4, 2))
    h += 1
    h.sum().backward()


@case("inplace_autograd__param_update_between")
def _():
    lin = nn.Linear(3, 3)
    out = lin(torch.randn(2, 3, requires_grad=True))
    loss = (out ** 2).sum()
    with torch.no_grad():
        lin.weight.add_(1.0)
    loss.backward()


@case("leaf_inplace__add_")
def _():
    w = torch.randn(3, requires_grad=True)
    w.add_(1)


@case("leaf_inplace__index_assign")
def _():
    w = torch.zeros(3, requires_grad=True)
    w[0] = 1.0


@case("leaf_inplace__param_mul")
def _():
    lin = nn.Linear(2, 2)
    lin.weight.mul_(0.5)


@case("backward_twice__loss")
def _():
    x = torch.randn(3, requires_grad=True)
    loss = (x.exp() ** 2).sum()
    loss.backward()
    loss.backward()


@case("backward_twice__shared_hidden")
def _():
    rnn = nn.RNN(3, 4)
    h = torch.zeros(1, 1, 4)
    for _ in range(2):
        out, h = rnn(torch.randn(2, 1, 3), h)
        out.sum().backward()


@case("no_grad_fn__detached")
def _():
    x = torch.randn(3)
    (x * 2).sum().backward()


@case("no_grad_fn__no_grad_block")
def _():
    lin = nn.Linear(3, 1)
    with torch.no_grad():
        loss = lin(torch.randn(2, 3)).sum()
    loss.backward()


@case("no_grad_fn__autograd_grad")
def _():
    x = torch.randn(3, requires_grad=True)
    y = (x * 2).detach().sum()
    torch.autograd.grad(y, x)


# ---------------------------------------------------------------- targets and indices
@case("target_out_of_bounds__cross_entropy")
def _():
    F.cross_entropy(torch.randn(4, 5), torch.tensor([0, 1, 5, 2]))


@case("target_out_of_bounds__nll_loss")
def _():
    F.nll_loss(F.log_softmax(torch.randn(3, 4), 1), torch.tensor([1, 7, 2]))


@case("target_out_of_bounds__negative_target")
def _():
    nn.CrossEntropyLoss()(torch.randn(2, 3), torch.tensor([-2, 1]))


@case("target_out_of_bounds__embedding")
def _():
    nn.Embedding(10, 4)(torch.tensor([[1, 2, 12]]))


@case("target_out_of_bounds__one_hot")
def _():
    F.one_hot(torch.tensor([0, 3, 5]), num_classes=4)


@case("target_out_of_bounds__gather")
def _():
    torch.randn(2, 3).gather(1, torch.tensor([[0], [4]]))


# ---------------------------------------------------------------- NaN
@case("nan_loss__anomaly_log")
def _():
    with torch.autograd.detect_anomaly():
        x = torch.tensor([0.0, 1.0], requires_grad=True)
        torch.log(x).mul(0).sum().backward()


@case("nan_loss__anomaly_sqrt")
def _():
    with torch.autograd.detect_anomaly():
        x = torch.tensor([-1.0, 4.0], requires_grad=True)
        torch.sqrt(x).sum().backward()


@case("nan_loss__anomaly_div")
def _():
    with torch.autograd.detect_anomaly():
        x = torch.tensor([0.0, 1.0], requires_grad=True)
        (x / x).sum().backward()


@case("nan_loss__clip_nonfinite")
def _():
    p = nn.Parameter(torch.ones(3))
    p.grad = torch.tensor([1.0, float("nan"), 0.0])
    torch.nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)


# ---------------------------------------------------------------- checkpoints
class Net(nn.Module):
    def __init__(self, hidden: int = 8) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, hidden)
        self.fc2 = nn.Linear(hidden, 2)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())


@case("state_dict_keys__module_prefix")
def _():
    ddp_like = nn.DataParallel(Net())
    Net().load_state_dict(ddp_like.state_dict())


@case("state_dict_keys__compile_prefix")
def _():
    sd = {f"_orig_mod.{k}": v for k, v in Net().state_dict().items()}
    Net().load_state_dict(sd)


@case("state_dict_keys__missing_unexpected")
def _():
    sd = Net().state_dict()
    sd["head.weight"] = sd.pop("fc2.weight")
    Net().load_state_dict(sd)


@case("state_dict_keys__missing_only")
def _():
    sd = Net().state_dict()
    del sd["fc2.bias"]
    Net().load_state_dict(sd)


@case("state_dict_keys__load_into_ddp")
def _():
    nn.DataParallel(Net()).load_state_dict(Net().state_dict())


@case("size_mismatch_state_dict__hidden")
def _():
    Net(hidden=16).load_state_dict(Net(hidden=8).state_dict())


@case("size_mismatch_state_dict__classifier")
def _():
    src = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 10))
    dst = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 3))
    dst.load_state_dict(src.state_dict())


class Custom:  # a custom class pickled into a checkpoint
    def __init__(self) -> None:
        self.lr = 0.1


@case("weights_only_unpickling__custom_class")
def _():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ckpt.pt")
        torch.save({"model": Net().state_dict(), "cfg": Custom()}, path)
        torch.load(path)


@case("weights_only_unpickling__whole_model")
def _():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.pt")
        torch.save(Net(), path)
        torch.load(path, weights_only=True)


@case("weights_only_unpickling__argparse_namespace")
def _():
    import argparse

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ckpt.pt")
        torch.save({"args": argparse.Namespace(lr=0.1), "step": 3}, path)
        torch.load(path)


def _save_as_if_on_cuda(obj: object, path: str) -> None:
    # Tag every storage with location "cuda:0" through torch.serialization's own tagger registry: the file
    # is then exactly what torch.save writes for CUDA tensors, and loading it without CUDA fails for real.
    import torch.serialization as ser

    def tagger(storage: object) -> str | None:
        return "cuda:0"

    ser.register_package(-1, tagger, lambda obj, loc: None)
    try:
        torch.save(obj, path)
    finally:
        ser._package_registry[:] = [p for p in ser._package_registry if p[1] is not tagger]


@case("deserialize_cuda__state_dict")
def _():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "gpu_ckpt.pt")
        _save_as_if_on_cuda(Net().state_dict(), path)
        torch.load(path, weights_only=True)


@case("deserialize_cuda__weights_only_false")
def _():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "gpu_tensor.pt")
        _save_as_if_on_cuda(torch.randn(3), path)
        torch.load(path, weights_only=False)


# ---------------------------------------------------------------- real errors outside every category
@case("unknown__grad_non_scalar")
def _():
    (torch.randn(3, requires_grad=True) * 2).backward()


@case("unknown__tensor_bool_ambiguous")
def _():
    if torch.tensor([1.0, 2.0]) > 0:
        pass


@case("unknown__numpy_requires_grad")
def _():
    torch.randn(2, requires_grad=True).numpy()


@case("unknown__corrupt_checkpoint")
def _():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ckpt.pt")
        torch.save(Net().state_dict(), path)
        with open(path, "r+b") as fh:
            fh.truncate(200)
        torch.load(path)


@case("checkpoint_load_failed__missing_checkpoint_file")
def _():
    torch.load("/nonexistent/run-12/checkpoint_best.pt")


@case("process_group_missing__default_process_group")
def _():
    import torch.distributed as dist

    dist.all_reduce(torch.ones(1))


@case("user_code_error__name_error_in_loop")
def _():
    for step in range(2):
        loss = crit(torch.randn(2), torch.randn(2))  # noqa: F821
        print(step, loss)


@case("unknown__key_error_batch")
def _():
    batch = {"input_ids": torch.ones(2, 4, dtype=torch.long)}
    print(batch["labels"].shape)


@case("unknown__none_has_no_attribute")
def _():
    scheduler = None
    scheduler.step()


# ---------------------------------------------------------------- distributed, on 127.0.0.1 only
@case("address_in_use__tcpstore")
def _():
    from datetime import timedelta

    from torch.distributed import TCPStore

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    port = sock.getsockname()[1]
    try:
        TCPStore("127.0.0.1", port, 1, True, timeout=timedelta(seconds=5), wait_for_workers=False)
    finally:
        sock.close()


@case("address_in_use__socket_bind")
def _():
    a = socket.socket()
    a.bind(("127.0.0.1", 0))
    a.listen(1)
    b = socket.socket()
    try:
        b.bind(a.getsockname())
    finally:
        a.close()
        b.close()


# ---------------------------------------------------------------- data loading (run in a subprocess)
DATALOADER_SCRIPTS = {
    "dataloader_worker__valueerror": """
import torch
from torch.utils.data import DataLoader, Dataset
class DS(Dataset):
    def __len__(self): return 8
    def __getitem__(self, i):
        if i == 5: raise ValueError(f"bad record {i}: could not parse label 'cat?'")
        return torch.tensor([float(i)])
if __name__ == "__main__":
    for batch in DataLoader(DS(), batch_size=2, num_workers=1): pass
""",
    "dataloader_worker__killed": """
import os, signal, time, torch
from torch.utils.data import DataLoader, Dataset
class DS(Dataset):
    def __len__(self): return 64
    def __getitem__(self, i):
        if i == 4: os.kill(os.getpid(), signal.SIGKILL)
        return torch.tensor([float(i)])
if __name__ == "__main__":
    for batch in DataLoader(DS(), batch_size=2, num_workers=2): time.sleep(0.05)
""",
    "dataloader_worker__segfault": """
import os, signal, time, torch
from torch.utils.data import DataLoader, Dataset
class DS(Dataset):
    def __len__(self): return 64
    def __getitem__(self, i):
        if i == 4: os.kill(os.getpid(), signal.SIGSEGV)
        return torch.tensor([float(i)])
if __name__ == "__main__":
    for batch in DataLoader(DS(), batch_size=2, num_workers=2): time.sleep(0.05)
""",
    "dataloader_worker__keyerror": """
import torch
from torch.utils.data import DataLoader, Dataset
class DS(Dataset):
    def __init__(self): self.rows = [{"x": 1.0}] * 6 + [{"y": 2.0}] * 2
    def __len__(self): return len(self.rows)
    def __getitem__(self, i): return torch.tensor([self.rows[i]["x"]])
if __name__ == "__main__":
    for batch in DataLoader(DS(), batch_size=2, num_workers=2): pass
""",
    "dataloader_worker__timeout": """
import time, torch
from torch.utils.data import DataLoader, Dataset
class DS(Dataset):
    def __len__(self): return 4
    def __getitem__(self, i):
        time.sleep(3)
        return torch.tensor([float(i)])
if __name__ == "__main__":
    for batch in DataLoader(DS(), batch_size=2, num_workers=1, timeout=1): pass
""",
    "dataloader_worker__collate_resize": """
import torch
from torch.utils.data import DataLoader, Dataset
class DS(Dataset):
    def __len__(self): return 4
    def __getitem__(self, i): return torch.zeros(3 if i != 3 else 1, 8, 8)
if __name__ == "__main__":
    for batch in DataLoader(DS(), batch_size=4, num_workers=1): pass
""",
    "torch_compile__fullgraph_graph_break": """
import torch
@torch.compile(backend="eager", fullgraph=True)
def step(x):
    if x.sum() > 0:
        return x + 1
    return x - 1
step(torch.randn(3))
""",
    "torch_compile__backend_compiler_failed": """
import torch
def my_backend(gm, example_inputs):
    raise ValueError("my backend cannot lower aten.add")
torch.compile(lambda x: x * 2 + 1, backend=my_backend)(torch.randn(3))
""",
    "torch_compile__recompile_limit": """
import torch, torch._dynamo
torch._dynamo.config.recompile_limit = 2
torch._dynamo.config.fail_on_recompile_limit_hit = True
@torch.compile(backend="eager", dynamic=False)
def scale(x, n):
    return x * n
for i in range(5):
    scale(torch.randn(3), i)
""",
    "shape_mismatch__under_compile": """
import torch
model = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.ReLU(), torch.nn.Linear(10, 5))
torch.compile(model, backend="eager")(torch.randn(4, 10))
""",
}


def run_in_process(name: str, fn: Callable[[], None]) -> str | None:
    try:
        fn()
    except BaseException:
        return traceback.format_exc()
    return None


def run_script(name: str, source: str) -> str | None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "train.py"
        path.write_text(source)
        proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=60, cwd=d)
    if proc.returncode == 0:
        return None
    return proc.stderr.replace(d, "/home/user/project")


def _anonymise(text: str) -> str:
    """Keep the texts real but free of this machine's paths."""
    text = text.replace(str(HERE.parents[2]), "/home/user/nbdebug")
    text = text.replace(sys.prefix, "/home/user/.venv")
    return text.replace(str(Path.home()), "/home/user")


def main() -> int:
    header = f"# source: generated on CPU by tests/data/errors/make_cpu_corpus.py (torch {torch.__version__}, python {sys.version.split()[0]})\n"
    written, missed = 0, []
    for name, fn in CASES.items():
        text = run_in_process(name, fn)
        if text is None:
            missed.append(name)
            continue
        (HERE / f"{name}.txt").write_text(header + _anonymise(text))
        written += 1
    for name, source in DATALOADER_SCRIPTS.items():
        text = run_script(name, source)
        if text is None:
            missed.append(name)
            continue
        (HERE / f"{name}.txt").write_text(header + _anonymise(text))
        written += 1
    print(f"wrote {written} files to {HERE}")
    if missed:
        print("did not raise:", ", ".join(missed))
    return 1 if missed else 0


if __name__ == "__main__":

    raise SystemExit(main())
