"""``%%memtrace`` on loops people wrote: does it warn of kept memory (``memory_retained``) exactly where a loop keeps
its graphs alive?

The sample: every self-contained PyTorch loop (a loop over batches that runs a model) among the results of three
searches of public code, in the order returned, duplicates dropped (searches: "training loop losses.append(loss)
loss.backward() optimizer.step() pytorch"; "for batch in loader: outputs = model(x) predictions.append(outputs)
torch.cat(predictions)"; "pytorch epoch loop record loss history list append each batch"; 2026-11-27).  Each loop
keeps its statements and their order; its model, loss and data are a small stand-in (SETUP).  Each was labelled
before nbdebug ran on it: "leak" where what the loop keeps holds autograd graphs (outputs made with grad on, kept
after the loop), "no leak" otherwise (numbers, no_grad, detached, graphs freed by backward()).  The items numbered
2, 4, ... are held out: frozen with their labels before the tool was run on them, never tuned on.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from IPython.utils.capture import capture_output  # noqa: E402

SETUP = """
import numpy as np
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
criterion = loss_fn = torch.nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.07)
loader = [(torch.randn(256, 64), torch.randint(0, 10, (256,))) for _ in range(6)]
"""

# (number, source, label, cell)
SAMPLE = [
    (1, "VedangAsgaonkar/Machine-Learning-Notes PyTorch_Basic_Loop.md", "no leak",
     "n_epochs = 6\ntrain_losses = np.zeros(n_epochs)\ntest_losses = np.zeros(n_epochs)\ninputs, targets = loader[0]\n"
     "for it in range(n_epochs):\n    optimizer.zero_grad()\n    outputs = model(inputs)\n"
     "    loss = criterion(outputs, targets)\n    loss.backward()\n    optimizer.step()\n"
     "    test_outputs = model(inputs)\n    test_loss = criterion(test_outputs, targets)\n"
     "    train_losses[it] = loss.item()\n    test_losses[it] = test_loss.item()\n"),
    (2, "search 1 rank 5, deeplearn train loop", "no leak",
     "for batch, (X, y) in enumerate(loader):\n    pred = model(X)\n    loss = loss_fn(pred, y)\n    loss.backward()\n"
     "    optimizer.step()\n    optimizer.zero_grad()\n    if batch % 20 == 0:\n"
     "        loss_float, current = loss.item(), (batch + 1)\n"),
    (3, "search 1 rank 6, train_loop (PyTorch tutorial shape)", "no leak",
     "model.train()\nfor batch, (X, y) in enumerate(loader):\n    pred = model(X)\n    loss = loss_fn(pred, y)\n"
     "    loss.backward()\n    optimizer.step()\n    optimizer.zero_grad()\n    if batch % 100 == 0:\n"
     "        loss, current = loss.item(), batch * 256 + len(X)\n"),
    (4, "search 1 rank 7, train_loop with agg_loss", "no leak",
     "agg_loss = 0.0\nfor batch, (u, s) in enumerate(loader):\n    out = model(u)\n    loss = loss_fn(out, s)\n"
     "    optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\n    agg_loss += loss.item()\n"),
    (5, "search 1 rank 9, train with running_loss", "no leak",
     "running_loss = None\nfor inputs, labels in loader:\n    y_pred = model(inputs)\n    optimizer.zero_grad()\n"
     "    loss = criterion(y_pred, labels)\n    loss.backward()\n    optimizer.step()\n"
     "    detached_loss = loss.detach().cpu().item()\n    if running_loss is None:\n        running_loss = detached_loss\n"
     "    else:\n        running_loss = 0.95 * running_loss + 0.05 * detached_loss\n"),
    (6, "linyao1999/ML_MJO_Hovmoller script/model/src/inference/predict.py", "no leak",
     "def predict(model, data_loader):\n    model.eval()\n    predictions = []\n    with torch.no_grad():\n"
     "        for batch in data_loader:\n            inputs, targets = batch\n            outputs = model(inputs)\n"
     "            predictions.append(outputs)\n    return predictions\n\npreds = predict(model, loader)\n"),
    (7, "TeTo16/Image_Prediction_Project src/predict/predict.py", "no leak",
     "def predict(model, loader):\n    all_preds = []\n    all_labels = []\n    model.eval()\n    with torch.no_grad():\n"
     "        for inputs, labels in loader:\n            outputs = model(inputs)\n            preds = outputs.argmax(dim=1)\n"
     "            all_preds.append(preds)\n            all_labels.append(labels)\n"
     "    all_preds = torch.cat(all_preds)\n    all_labels = torch.cat(all_labels)\n"
     "    return all_preds.cpu(), all_labels.cpu()\n\npreds, labels = predict(model, loader)\n"),
    (8, "gimme1dollar/dacon_artist_classification inference.py", "no leak",
     "def inference(model, test_loader):\n    model.eval()\n    model_preds = []\n    with torch.no_grad():\n"
     "        for img, _ in iter(test_loader):\n            model_pred = model(img.float())\n"
     "            model_preds += model_pred.argmax(1).detach().cpu().numpy().tolist()\n    return model_preds\n\n"
     "preds = inference(model, loader)\n"),
    (9, "dispink/xpt src/inference/inference.py", "no leak",
     "def inference(model, dataloader):\n    model.eval()\n    predictions = torch.empty((0, 10))\n"
     "    with torch.no_grad():\n        for samples, _ in dataloader:\n            outputs = model(samples.float())\n"
     "            predictions = torch.cat((predictions, outputs), 0)\n    return predictions\n\n"
     "preds = inference(model, loader)\n"),
    (10, "search 2 rank 5, predict with torch.cat of a comprehension", "leak",
     "def predict(model, dataloader):\n    return torch.cat([model(batch) for batch, _ in dataloader], 0)\n\n"
     "preds = predict(model, loader)\n"),
    (11, "search 2 rank 8, get_all_preds under @torch.no_grad()", "no leak",
     "@torch.no_grad()\ndef get_all_preds(model, loader):\n    all_preds = torch.tensor([])\n    for batch in loader:\n"
     "        images, labels = batch\n        preds = model(images)\n"
     "        all_preds = torch.cat((all_preds, preds), dim=0)\n    return all_preds\n\n"
     "preds = get_all_preds(model, loader)\n"),
    (12, "search 2 rank 10, batch_model_predict", "leak",
     "def batch_model_predict(model_predict, inputs, batch_size=256):\n    outputs = []\n    i = 0\n"
     "    while i < len(inputs):\n        batch = inputs[i : i + batch_size]\n        batch_preds = model_predict(batch)\n"
     "        if not isinstance(batch_preds, torch.Tensor):\n            batch_preds = torch.Tensor(batch_preds)\n"
     "        outputs.append(batch_preds)\n        i += batch_size\n    return torch.cat(outputs, dim=0)\n\n"
     "preds = batch_model_predict(model, torch.cat([x for x, _ in loader]))\n"),
    (13, "search 2 rank 11, predict under no_grad", "no leak",
     "def predict(model, data_loader):\n    model.eval()\n    outputs = []\n    with torch.no_grad():\n"
     "        for inputs, _ in data_loader:\n            output = model(inputs)\n            outputs.append(output)\n"
     "    outputs = torch.cat(outputs, dim=0)\n    return outputs\n\npreds = predict(model, loader)\n"),
    (14, "SeungminHwang/CS492-MLCV coursework2/src/LENet/train.py", "no leak",
     "model.train()\nloss_list, batch_list = [], []\nfor i, (images, labels) in enumerate(loader):\n"
     "    optimizer.zero_grad()\n    output = model(images)\n    loss = criterion(output, labels)\n"
     "    loss_list.append(loss.detach().cpu().item())\n    batch_list.append(i+1)\n    loss.backward()\n"
     "    optimizer.step()\n"),
]

HELD_OUT = [s for s in SAMPLE if s[0] % 2 == 0]
TUNING = [s for s in SAMPLE if s[0] % 2 == 1]


def verdict(ip, cell: str) -> str:
    """"leak" where %%memtrace warns that the block kept memory (memory_retained), else "no leak"."""
    ip.run_cell(SETUP, store_history=True)
    with capture_output():
        ip.run_cell("%%memtrace --device cpu -o _r\n" + cell, store_history=True)
    result = ip.user_ns["_r"]
    return "leak" if any(f.kind == "memory_retained" for f in result.findings) else "no leak"


@pytest.mark.parametrize("number, source, label, cell", SAMPLE, ids=[f"loop{s[0]}" for s in SAMPLE])
def test_memtrace_warns_where_a_real_loop_keeps_its_graphs(ip, number, source, label, cell):
    assert verdict(ip, cell) == label, source
