"""Predicted peak (``device="cpu"``) against the measured peak of the same step, on real architectures.

The measured peak is what ``%%memtrace`` records on CPU (the profiler's allocator events: the rise above the level
at the start of the step) plus what is alive when the step starts (the parameters, buffers, optimizer state and
batch, their storages counted once).  Each architecture runs four settings: a base batch in fp32, twice the batch,
bf16 autocast, activation checkpointing of every repeated block.

Run as a script to rebuild the whole table (``tests/data/predict/accuracy.csv``, a few minutes on two cores)::

    .venv/bin/python tests/test_predict_accuracy.py

The test runs a handful of architectures live and checks the stored table's summary.
"""

from __future__ import annotations

import copy
import csv
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

TABLE = Path(__file__).parent / "data" / "predict" / "accuracy.csv"
COLUMNS = ("architecture", "setting", "params", "measured_bytes", "predicted_bytes", "error_pct",
           "measured_rise_bytes", "predicted_rise_bytes", "partial", "accelerate_bytes")


# -- hand-written CNNs and an LSTM (torchvision does not install with the CPU torch) -------------------------------

class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, c: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, c, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.down = None if stride == 1 and cin == c else nn.Sequential(nn.Conv2d(cin, c, 1, stride, bias=False),
                                                                        nn.BatchNorm2d(c))

    def forward(self, x: Any) -> Any:
        idt = x if self.down is None else self.down(x)
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + idt)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, c: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, c, 1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, stride, 1, bias=False), nn.BatchNorm2d(c)
        self.conv3, self.bn3 = nn.Conv2d(c, c * 4, 1, bias=False), nn.BatchNorm2d(c * 4)
        self.down = None if stride == 1 and cin == c * 4 else nn.Sequential(
            nn.Conv2d(cin, c * 4, 1, stride, bias=False), nn.BatchNorm2d(c * 4))

    def forward(self, x: Any) -> Any:
        idt = x if self.down is None else self.down(x)
        out = torch.relu(self.bn1(self.conv1(x)))
        out = torch.relu(self.bn2(self.conv2(out)))
        return torch.relu(self.bn3(self.conv3(out)) + idt)


class ResNet(nn.Module):
    def __init__(self, block: Any, layers: list[int], classes: int = 10, width: int = 64) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        stages, cin = [], width
        for i, n in enumerate(layers):
            c = width * 2 ** i
            blocks = []
            for j in range(n):
                blocks.append(block(cin, c, 2 if j == 0 and i > 0 else 1))
                cin = c * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: Any) -> Any:
        return self.fc(self.stages(self.stem(x)).mean((2, 3)))


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim)
        self.pw1, self.pw2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x: Any) -> Any:
        y = self.dw(x).permute(0, 2, 3, 1)  # (B, H, W, C)
        y = self.pw2(nn.functional.gelu(self.pw1(self.norm(y))))
        return x + (self.gamma * y).permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    """ConvNeXt-T: depths 3-3-9-3, dims 96-192-384-768."""

    def __init__(self, depths: tuple[int, ...] = (3, 3, 9, 3), dims: tuple[int, ...] = (96, 192, 384, 768)) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, dims[0], 4, 4)
        self.stages = nn.ModuleList()
        self.downs = nn.ModuleList()
        for i, (d, n) in enumerate(zip(depths, dims)):
            self.downs.append(nn.Identity() if i == 0 else nn.Conv2d(dims[i - 1], n, 2, 2))
            self.stages.append(nn.Sequential(*[ConvNeXtBlock(n) for _ in range(d)]))
        self.head = nn.Linear(dims[-1], 10)

    def forward(self, x: Any) -> Any:
        x = self.stem(x)
        for down, stage in zip(self.downs, self.stages):
            x = stage(down(x))
        return self.head(x.mean((2, 3)))


class LSTMTagger(nn.Module):
    def __init__(self, vocab: int = 1000, dim: int = 256, layers: int = 2) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, dim, layers, batch_first=True)
        self.out = nn.Linear(dim, vocab)

    def forward(self, x: Any) -> Any:
        return self.out(self.lstm(self.emb(x))[0])


class MLP(nn.Sequential):
    def __init__(self) -> None:
        super().__init__(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 2048), nn.GELU(), nn.Linear(2048, 2048),
                         nn.GELU(), nn.Linear(2048, 10))


def _ce(out: Any, y: Any) -> Any:
    return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


# -- Hugging Face models from small configs (no download) -----------------------------------------------------------

def _hf(config_name: str, model_name: str, **kw: Any) -> Callable[[], Any]:
    def build() -> Any:
        import transformers

        config = getattr(transformers, config_name)(**kw)
        return getattr(transformers, model_name)(config)
    return build


_TXT = dict(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512)


def _tokens(b: int, t: int = 64, labels: bool = True, vocab: int = 1000) -> dict[str, Any]:
    ids = torch.randint(0, vocab, (b, t))
    batch = {"input_ids": ids, "attention_mask": torch.ones(b, t, dtype=torch.long)}
    if labels:
        batch["labels"] = ids.clone()
    return batch


def _cls_tokens(b: int) -> dict[str, Any]:
    batch = _tokens(b, labels=False)
    batch["labels"] = torch.randint(0, 2, (b,))
    return batch


def _images(b: int, size: int = 64, classes: int = 10) -> tuple[Any, Any]:
    return torch.randn(b, 3, size, size), torch.randint(0, classes, (b,))


# name -> (build model, make batch of size b, loss_fn, base batch size)
ZOO: dict[str, tuple[Callable[[], Any], Callable[[int], Any], Any, int]] = {
    "mlp": (MLP, lambda b: (torch.randn(b, 512), torch.randint(0, 10, (b,))), _ce, 1024),
    "resnet18": (lambda: ResNet(BasicBlock, [2, 2, 2, 2]), _images, _ce, 16),
    "resnet50": (lambda: ResNet(Bottleneck, [3, 4, 6, 3]), _images, _ce, 4),
    "convnext_t": (ConvNeXt, _images, _ce, 4),
    "lstm": (LSTMTagger, lambda b: (torch.randint(0, 1000, (b, 32)), torch.randint(0, 1000, (b, 32))), _ce, 8),
    "bert": (_hf("BertConfig", "BertForSequenceClassification", **_TXT), _cls_tokens, None, 8),
    "gpt2": (_hf("GPT2Config", "GPT2LMHeadModel", vocab_size=1000, n_embd=128, n_layer=2, n_head=4), _tokens,
             None, 8),
    "llama": (_hf("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2, **_TXT), _tokens, None, 8),
    "t5": (_hf("T5Config", "T5ForConditionalGeneration", vocab_size=1000, d_model=128, d_kv=32, d_ff=512,
               num_layers=2, num_heads=4, decoder_start_token_id=0, pad_token_id=0), _tokens, None, 8),
    "vit": (_hf("ViTConfig", "ViTForImageClassification", hidden_size=128, num_hidden_layers=2,
                num_attention_heads=4, intermediate_size=512, image_size=64, patch_size=8, num_labels=10),
            lambda b: {"pixel_values": torch.randn(b, 3, 64, 64), "labels": torch.randint(0, 10, (b,))}, None, 8),
}
_DEC = dict(num_key_value_heads=2, **_TXT)
_SEQ2SEQ: dict[str, Any] = dict(vocab_size=1000, d_model=128, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=512, decoder_ffn_dim=512)
ZOO.update({
    "roberta": (_hf("RobertaConfig", "RobertaForMaskedLM", max_position_embeddings=130, **_TXT), _tokens, None, 8),
    "distilbert": (_hf("DistilBertConfig", "DistilBertForSequenceClassification", vocab_size=1000, dim=128, n_layers=2,
                       n_heads=4, hidden_dim=512), _cls_tokens, None, 8),
    "albert": (_hf("AlbertConfig", "AlbertForMaskedLM", embedding_size=64, **_TXT), _tokens, None, 8),
    "electra": (_hf("ElectraConfig", "ElectraForMaskedLM", embedding_size=64, **_TXT), _tokens, None, 8),
    "bart": (_hf("BartConfig", "BartForConditionalGeneration", **_SEQ2SEQ), _tokens, None, 8),
    "mistral": (_hf("MistralConfig", "MistralForCausalLM", **_DEC), _tokens, None, 8),
    "qwen2": (_hf("Qwen2Config", "Qwen2ForCausalLM", **_DEC), _tokens, None, 8),
    "opt": (_hf("OPTConfig", "OPTForCausalLM", vocab_size=1000, hidden_size=128, num_hidden_layers=2,
                num_attention_heads=4, ffn_dim=512, word_embed_proj_dim=128), _tokens, None, 8),
    "gpt_neo": (_hf("GPTNeoConfig", "GPTNeoForCausalLM", vocab_size=1000, hidden_size=128, num_layers=2,
                    attention_types=[[["global", "local"], 1]], num_heads=4, window_size=32,
                    attn_implementation="eager"), _tokens, None, 8),
    "phi": (_hf("PhiConfig", "PhiForCausalLM", **_DEC), _tokens, None, 8),
    "gemma": (_hf("GemmaConfig", "GemmaForCausalLM", head_dim=32, **_DEC), _tokens, None, 8),
    "bloom": (_hf("BloomConfig", "BloomForCausalLM", vocab_size=1000, hidden_size=128, n_layer=2, n_head=4,
                  attn_implementation="eager"),
              _tokens, None, 8),
    "whisper": (_hf("WhisperConfig", "WhisperForConditionalGeneration", num_mel_bins=16, max_source_positions=32,
                    max_target_positions=64, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                    decoder_start_token_id=1, **_SEQ2SEQ),
                lambda b: {"input_features": torch.randn(b, 16, 64), "labels": torch.randint(0, 1000, (b, 16))},
                None, 8),
    "deberta_v2": (_hf("DebertaV2Config", "DebertaV2ForSequenceClassification", attn_implementation="eager",
                       **_TXT), _cls_tokens, None, 8),
})
HANDFUL = ("mlp", "resnet18", "lstm", "gpt2", "llama")


def settings_of(base: int) -> dict[str, dict[str, Any]]:
    return {"base": {"batch": base}, "batch_x2": {"batch": 2 * base}, "bf16": {"batch": base, "dtype": "bfloat16"},
            "checkpointing": {"batch": base, "checkpointing": True}}


def _unique_bytes(tensors: list[Any]) -> int:
    seen: dict[int, int] = {}
    for t in tensors:
        st = t.untyped_storage()
        seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


def measure(name: str, setting: str) -> dict[str, Any]:
    """One row: the real step measured with memtrace, and the prediction."""
    build, make, loss_fn, base = ZOO[name]
    conf = settings_of(base)[setting]
    torch.manual_seed(0)
    model = build().train()
    batch = make(conf["batch"])
    return {"architecture": name, "setting": setting, **compare(model, batch, loss_fn, conf)}


def compare(model: Any, batch: Any, loss_fn: Any, conf: dict[str, Any]) -> dict[str, Any]:
    """The measured step of ``model`` on ``batch`` (AdamW, the settings in ``conf``) and its prediction."""
    from nbdebug.core.memory._predict import predict_memory
    from nbdebug.core.memory._predict_step import autocast, call_model, checkpoint_blocks, loss_of
    from nbdebug.core.memory._trace import memtrace

    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    pred = predict_memory(model, batch, loss_fn, opt, device="cpu", dtype=conf.get("dtype"),
                          checkpointing=conf.get("checkpointing", False))
    real = copy.deepcopy(model)
    ropt = torch.optim.AdamW(real.parameters(), lr=1e-4)
    if conf.get("checkpointing"):
        checkpoint_blocks(real)
    amp = conf.get("dtype")

    def step() -> None:
        with autocast("cpu", amp):
            out = call_model(real, batch)
            loss = loss_of(out, batch, loss_fn, [])
        loss.backward()
        ropt.step()
        ropt.zero_grad(set_to_none=True)

    step()  # creates the optimizer's state
    state = _unique_bytes([*real.parameters(), *real.buffers(),
                           *(v for s in ropt.state.values() for v in s.values() if torch.is_tensor(v)),
                           *(t for t in (batch.values() if isinstance(batch, dict) else batch))])
    with memtrace("cpu") as rec:
        step()
    measured = state + rec.peak_bytes
    try:
        from accelerate.commands.estimate import estimate_training_usage
        from accelerate.utils import calculate_maximum_sizes

        total, _ = calculate_maximum_sizes(model)
        acc = estimate_training_usage(total, "float32" if amp is None else amp)
        accelerate_bytes = max(v for v in acc.values())  # the "peak vRAM" column accelerate prints
    except Exception:
        accelerate_bytes = ""
    return {"params": sum(p.numel() for p in model.parameters()),
            "measured_bytes": measured, "predicted_bytes": pred.peak_bytes,
            "error_pct": round(100 * (pred.peak_bytes - measured) / measured, 2),
            "measured_rise_bytes": rec.peak_bytes, "predicted_rise_bytes": pred.peak_bytes - pred.state_bytes,
            "partial": int(pred.partial), "accelerate_bytes": accelerate_bytes}


def read_table() -> list[dict[str, str]]:
    with TABLE.open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("name", HANDFUL)
def test_prediction_agrees_with_the_measured_step(name: str) -> None:
    rows = {s: measure(name, s) for s in ("base", "checkpointing")}
    stored = {r["setting"]: r for r in read_table() if r["architecture"] == name}
    for setting, row in rows.items():
        # oneDNN's LSTM kernel keeps a workspace fake tensors give no size: that prediction says it is partial
        assert row["partial"] == (name == "lstm"), row
        # on CPU both sides count the allocator's bytes, which agree to the byte on most rows (resnet18's
        # convolutions leave the widest gap, under 0.7 %): 1 % catches a dropped gradient or optimizer state
        assert row["partial"] or abs(row["error_pct"]) <= 1, row
        # the stored table is what this code gives today: a change in the prediction or the measurement shows here
        old = stored[setting]
        for column in ("measured_bytes", "predicted_bytes"):
            assert row[column] == pytest.approx(int(old[column]), rel=1e-3), (column, row, old)
    if name in ("gpt2", "llama"):
        # checkpointing must really lower the measured step, or both sides could share a no-op checkpoint_blocks.
        # (In the stored table mlp, resnet50, convnext_t, lstm and albert show the same rise with and without it:
        # their peak comes where checkpointing does not reach, e.g. the optimizer step, or no repeated block is found.)
        assert rows["checkpointing"]["measured_rise_bytes"] < 0.8 * rows["base"]["measured_rise_bytes"], rows


def test_the_stored_table_meets_its_targets() -> None:
    if not TABLE.exists():
        pytest.fail(f"{TABLE} is missing: run python tests/test_predict_accuracy.py to build it")
    rows = read_table()
    assert len({r["architecture"] for r in rows}) == len(ZOO)
    # a prediction that did not count something says so (partial); the targets hold for all the others
    complete = [abs(float(r["error_pct"])) for r in rows if r["partial"] == "0"]
    assert len(complete) >= 0.9 * len(rows)
    assert statistics.median(complete) <= 5 and max(complete) <= 10, (statistics.median(complete), max(complete))
    assert all(r["partial"] == "1" for r in rows if abs(float(r["error_pct"])) > 10)


def main() -> None:
    rows = []
    names = sys.argv[1:] or list(ZOO)
    for name in names:
        for setting in settings_of(ZOO[name][3]):
            try:
                row = measure(name, setting)
            except Exception as e:  # a row that fails is reported, not hidden
                print(f"{name} {setting}: FAILED {type(e).__name__}: {e}", flush=True)
                continue
            rows.append(row)
            print(f"{name:12s} {setting:14s} measured {row['measured_bytes']:>12,d} predicted "
                  f"{row['predicted_bytes']:>12,d} error {row['error_pct']:+.2f}%", flush=True)
    TABLE.parent.mkdir(parents=True, exist_ok=True)
    with TABLE.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    for label, chosen in (("all", rows), ("complete (not partial)", [r for r in rows if not r["partial"]])):
        errors = [abs(r["error_pct"]) for r in chosen]
        print(f"{label}: {len(chosen)} rows, median |error| {statistics.median(errors):.2f}%, "
              f"worst {max(errors):.2f}%")


if __name__ == "__main__":
    main()
