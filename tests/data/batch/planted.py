"""The planted-bug set of the batch inspector: clean batches and batches with one known bug each.

Every case is built from real material: sentences scikit-learn ships, tokenized by the real tokenizers of
``corpus.py``; sklearn's digits, breast_cancer, iris and diabetes; the RGB sample pictures sklearn and matplotlib
ship; tiny Hugging Face models built from a config (no download).  ``CASES`` maps a case name to
``(expected kind or None for clean, builder)``; a builder returns the keyword arguments of ``inspect_batch``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.data.batch.corpus import bpe_tokenizer, sentences, word_tokenizer


def _texts(n: int = 16, start: int = 0) -> list[str]:
    return list(sentences()[start : start + n])


def _lm(tok: Any, texts: list[str], **kw: Any) -> dict[str, Any]:
    enc = tok(texts, padding=True, return_tensors="pt", **kw)
    labels = enc["input_ids"].clone()
    labels[enc["attention_mask"] == 0] = -100
    enc["labels"] = labels
    return enc


def tiny_gpt2(vocab: int) -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=256, n_embd=16, n_layer=1, n_head=2,
                                      bos_token_id=0, eos_token_id=0))


def _chat(n: int = 8, answer_words: int = 6) -> list[str]:
    s = _texts(2 * n, 40)
    return [f"<|im_start|>user {s[2 * i]} <|im_end|> <|im_start|>assistant "
            f"{' '.join(s[2 * i + 1].split()[:answer_words])} <|im_end|>" for i in range(n)]


def _chat_batch(prompt_loss: bool, max_length: int | None = None) -> dict[str, Any]:
    tok = word_tokenizer()
    kw = {"truncation": True, "max_length": max_length} if max_length else {}
    enc = _lm(tok, _chat(), **kw)
    if not prompt_loss:
        marker = tok("<|im_start|>assistant", add_special_tokens=False)["input_ids"]
        for row in range(len(enc["input_ids"])):
            ids = enc["input_ids"][row].tolist()
            end = next((i + len(marker) for i in range(len(ids)) if ids[i : i + len(marker)] == marker), len(ids))
            enc["labels"][row, :end] = -100
    return {"batch": enc, "tokenizer": tok}


class _TinyLM:
    """A custom language model (no Hugging Face config): it does not shift labels."""

    def __new__(cls, vocab: int) -> Any:
        import torch

        return torch.nn.Sequential(torch.nn.Embedding(vocab, 8), torch.nn.Linear(8, vocab))


def _digits(n: int = 64, *, shuffle: bool = True) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    order = np.random.default_rng(0).permutation(len(d.target)) if shuffle else np.argsort(d.target, kind="stable")
    return d.images[order[:n]].astype(np.float32), d.target[order[:n]]


def _normalized_digits(n: int = 64) -> dict[str, Any]:
    import torch

    x, y = _digits(n)
    x = x / 16.0
    return {"batch": (torch.tensor((x - 0.3) / 0.4)[:, None], torch.tensor(y)), "mean": [0.3], "std": [0.4]}


def _crops(path_rgb: np.ndarray, n: int = 16, size: int = 32) -> np.ndarray:
    rng = np.random.default_rng(1)
    h, w = path_rgb.shape[:2]
    out = []
    for _ in range(n):
        r, c = rng.integers(0, h - size), rng.integers(0, w - size)
        out.append(path_rgb[r : r + size, c : c + size])
    return np.stack(out).astype(np.float32) / 255.0  # (N, H, W, 3) RGB in [0, 1]


def blue_pack() -> np.ndarray:
    from matplotlib import cbook
    from PIL import Image

    return np.asarray(Image.open(cbook.get_sample_data("Minduka_Present_Blue_Pack.png")).convert("RGB"))


def sklearn_photos() -> np.ndarray:
    from sklearn.datasets import load_sample_images

    return np.concatenate([_crops(img, 8) for img in load_sample_images().images])


IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])


def _photos_normalized(bgr: bool, source: str) -> dict[str, Any]:
    import torch

    x = sklearn_photos() if source == "sklearn" else _crops(blue_pack())
    mean, std = (IMAGENET if source == "sklearn" else (x.reshape(-1, 3).mean(0).tolist(), x.reshape(-1, 3).std(0).tolist()))
    if bgr:
        x = x[..., ::-1]
    t = torch.tensor(((x - np.array(mean)) / np.array(std)).transpose(0, 3, 1, 2).copy(), dtype=torch.float32)
    return {"batch": (t, torch.zeros(len(t), dtype=torch.long) + torch.arange(len(t)) % 2), "mean": mean, "std": std}


def _cancer(scaled: bool = True) -> tuple[np.ndarray, np.ndarray, list[str]]:
    from sklearn.datasets import load_breast_cancer

    d = load_breast_cancer()
    x = d.data
    if scaled:
        x = (x - x.mean(0)) / x.std(0)
    return x, d.target, list(d.feature_names)


def _frame(x: np.ndarray, y: np.ndarray, names: list[str]) -> Any:
    import pandas as pd

    df = pd.DataFrame(x, columns=names)
    df["target"] = y
    return df


def _with(**changes: Any):
    def build() -> dict[str, Any]:
        tok = word_tokenizer()
        enc = _lm(tok, _texts())
        for k, v in changes.items():
            enc[k] = v(enc, tok) if callable(v) else v
        return {"batch": enc, "tokenizer": tok}
    return build


def _bpe(eos: bool, mask_pad_labels: bool = False, max_length: int | None = None) -> dict[str, Any]:
    tok = bpe_tokenizer()
    texts = [t + tok.eos_token if eos else t for t in _texts(16, 100)]
    kw = {"truncation": True, "max_length": max_length} if max_length else {}
    enc = tok(texts, padding=True, return_tensors="pt", **kw)
    labels = enc["input_ids"].clone()
    if mask_pad_labels:  # a public collator's way: every pad id (and so every EOS) to -100
        labels[labels == tok.pad_token_id] = -100
    else:
        labels[enc["attention_mask"] == 0] = -100
    enc["labels"] = labels
    return {"batch": enc, "tokenizer": tok}


def _split(kind: str) -> dict[str, Any]:
    import pandas as pd

    if kind == "exact":
        x, y, names = _cancer()
        df = _frame(x, y, names)
        train, val = df.iloc[:400], pd.concat([df.iloc[400:], df.iloc[:20]])
        return {"batch": train, "other": val}
    tok = bpe_tokenizer()
    train = _texts(40, 0)
    val = _texts(10, 200) + ["  " + s.upper() + " " for s in train[:5]]
    return {"batch": tok(train, padding=True, return_tensors="pt"), "other": tok(val, padding=True, return_tensors="pt"),
            "tokenizer": tok}


def _loader_sorted() -> dict[str, Any]:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    x, y = _digits(1797, shuffle=False)
    ds = TensorDataset(torch.tensor(x / 16.0)[:, None].float(), torch.tensor(y))
    return {"batch": DataLoader(ds, batch_size=32, shuffle=False), "batches": 2}


def _images(fn) -> Any:
    def build() -> dict[str, Any]:
        import torch

        x, y = _digits(64)
        x, y = fn(x / 16.0, y)
        return {"batch": (torch.tensor(x)[:, None] if x.dtype != np.uint8 else torch.tensor(x), torch.tensor(y))}
    return build


def _repeat(x: np.ndarray, y: np.ndarray, other_label: bool) -> tuple[np.ndarray, np.ndarray]:
    x, y = x.copy(), y.copy()
    x[5] = x[0]
    y[5] = (y[0] + 1) % 10 if other_label else y[0]
    return x, y


def _blank(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = x.copy()
    x[3] = 0.0
    return x, y


def _table(fn) -> Any:
    def build() -> dict[str, Any]:
        x, y, names = _cancer()
        return {"batch": fn(_frame(x, y, names))}
    return build


def _set(df: Any, col: str, values: Any) -> Any:
    df = df.copy()
    df[col] = values
    return df


def _nans(df: Any) -> Any:
    df = df.copy()
    df.iloc[::50, 3] = np.nan
    return df


def _diabetes_leak() -> dict[str, Any]:
    from sklearn.datasets import load_diabetes

    df = load_diabetes(as_frame=True).frame
    df["log_progression"] = np.log(df["target"])
    return {"batch": df, "label": "target"}


def _dropped() -> dict[str, Any]:
    from transformers import GPT2Config, GPT2ForSequenceClassification

    model = GPT2ForSequenceClassification(GPT2Config(vocab_size=100, n_positions=64, n_embd=16, n_layer=1, n_head=2,
                                                                   bos_token_id=0, eos_token_id=0, pad_token_id=0))
    return {"batch": {"text": _texts(8), "label": list(range(8))}, "model": model}


CASES: dict[str, tuple[str | None, Any]] = {
    # clean batches: no warning
    "clean_text_wordlevel": (None, lambda: {"batch": _lm(word_tokenizer(), _texts()), "tokenizer": word_tokenizer(),
                                            "model": tiny_gpt2(len(word_tokenizer()))}),
    "clean_text_bpe_pad_is_eos": (None, lambda: _bpe(eos=True)),
    "clean_chat_answer_only": (None, lambda: _chat_batch(prompt_loss=False)),
    "clean_digits_normalized": (None, _normalized_digits),
    "clean_photos_imagenet": (None, lambda: _photos_normalized(bgr=False, source="sklearn")),
    "clean_blue_pack_rgb": (None, lambda: _photos_normalized(bgr=False, source="blue")),
    "clean_cancer_standardized": (None, _table(lambda df: df)),
    "clean_diabetes": (None, lambda: {"batch": __import__("sklearn.datasets", fromlist=["x"]).load_diabetes(
        as_frame=True).frame}),
    # text
    "labels_padded_with_pad_id": ("labels_padded_with_pad_id", _with(labels=lambda e, t: e["input_ids"].clone())),
    "labels_shifted_twice": ("labels_shifted_twice", lambda: {
        **_with(labels=lambda e, t: __import__("torch").cat(
            [e["labels"][:, 1:], __import__("torch").full((len(e["labels"]), 1), -100)], 1))(),
        "model": tiny_gpt2(len(word_tokenizer()))}),
    "labels_not_shifted": ("labels_not_shifted", lambda: {**_with()(), "model": _TinyLM(len(word_tokenizer()))}),
    "row_fully_masked": ("row_fully_masked", lambda: _chat_batch(prompt_loss=False, max_length=14)),
    "missing_eos": ("missing_eos", lambda: _bpe(eos=False)),
    "double_bos": ("double_bos", lambda: {"batch": _lm(word_tokenizer(), ["<s> " + t for t in _texts()]),
                                          "tokenizer": word_tokenizer()}),
    "rows_truncated": ("rows_truncated", lambda: _bpe(eos=True, max_length=24)),
    "attention_mask_mismatch": ("attention_mask_mismatch",
                                _with(attention_mask=lambda e, t: __import__("torch").ones_like(e["input_ids"]))),
    "token_id_beyond_vocab": ("token_id_beyond_vocab", lambda: {**_with()(), "model": tiny_gpt2(300)}),
    "loss_on_prompt": ("loss_on_prompt", lambda: _chat_batch(prompt_loss=True)),
    "eos_masked_as_pad": ("eos_masked_as_pad", lambda: _bpe(eos=True, mask_pad_labels=True)),
    "duplicate_rows_text": ("duplicate_rows", lambda: {"batch": _lm(word_tokenizer(), _texts(8) + _texts(2)),
                                                       "tokenizer": word_tokenizer()}),
    "empty_rows": ("empty_rows", lambda: {"batch": _lm(word_tokenizer(), _texts(8) + ["", "   "]),
                                          "tokenizer": word_tokenizer()}),
    "columns_dropped": ("columns_dropped", _dropped),
    # images
    "raw_pixels": ("raw_pixels", _images(lambda x, y: (np.round(x * 255).astype(np.uint8), y))),
    "pixels_scaled_twice": ("pixels_scaled_twice", _images(lambda x, y: (x / 255.0, y))),
    "channel_order_bgr": ("channel_order", lambda: _photos_normalized(bgr=True, source="blue")),
    "identical_images": ("identical_images", _images(lambda x, y: _repeat(x, y, other_label=False))),
    "conflicting_labels": ("conflicting_labels", _images(lambda x, y: _repeat(x, y, other_label=True))),
    "blank_images": ("blank_images", _images(_blank)),
    "single_class_batch": ("single_class_batch", _loader_sorted),
    # tables
    "unscaled_features": ("unscaled_features", lambda: {"batch": _frame(*_cancer(scaled=False))}),
    "constant_columns": ("constant_columns", _table(lambda df: _set(df, "mean radius", 1.0))),
    "nan_values": ("nan_values", _table(_nans)),
    "feature_is_label": ("feature_is_label", _table(lambda df: _set(df, "mean area", df["target"] * 3 + 1))),
    "feature_monotone_in_target": ("feature_is_label", _diabetes_leak),
    "conflicting_labels_table": ("conflicting_labels", _table(
        lambda df: __import__("pandas").concat([df, _set(df.iloc[:3], "target", 1 - df["target"].iloc[:3])]))),
    # across splits
    "split_overlap": ("split_overlap", lambda: _split("exact")),
    "split_near_duplicates": ("split_near_duplicates", lambda: _split("near")),
}
