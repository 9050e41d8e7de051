"""Held-out cases of the batch inspector: batches built by public training code, labelled before any run.

How they were chosen: three generic queries to the project's code search ("collate_fn batch input_ids labels
pad_sequence padding_value -100 causal language model fine-tune"; "cv2.imread dataset __getitem__
transforms.Normalize mean std torch Dataset images"; "pandas read_csv train_test_split features target
torch.tensor DataLoader tabular classification"), results taken in rank order, skipping only excerpts cut off
before their batch is built.  Each function below re-states (in our words, not copied) what that code does to a
batch, applied to data a package ships (sklearn's sentences tokenized by ``corpus.py``'s tokenizers, sklearn's
datasets and sample photos).  ``LABEL`` is the finding kind a careful reader expects (None: a clean batch, no
warning), written down before ``inspect_batch`` ever ran on these cases; the file was committed before the
results were looked at.  Figures: see the batch inspector's section of the README.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.data.batch.corpus import bpe_tokenizer, sentences, word_tokenizer


def _ids(tok: Any, texts: list[str], eos: bool = False) -> list[list[int]]:
    return [tok(t + (tok.eos_token if eos else ""))["input_ids"] for t in texts]


def _pad(rows: list[Any], value: int, left: bool = False) -> Any:
    import torch

    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for i, r in enumerate(rows):
        r = torch.as_tensor(r, dtype=torch.long)
        if left:
            out[i, width - len(r):] = r
        else:
            out[i, : len(r)] = r
    return out


TEXTS = list(sentences()[60:76])


# -- collate_fn query --------------------------------------------------------------------------------------
def wqretre_collate_fn() -> dict[str, Any]:
    """wqretre/DSA4213_Final_Project src/data/collators.py collate_fn: input_ids padded with the pad id, labels
    (a copy of input_ids) padded with -100, no attention mask."""
    tok = word_tokenizer()
    ids = _ids(tok, TEXTS)
    return {"batch": {"input_ids": _pad(ids, tok.pad_token_id), "labels": _pad(ids, -100)}, "tokenizer": tok}


def wqretre_collate_fn_leftpad() -> dict[str, Any]:
    """wqretre/DSA4213_Final_Project collate_fn_leftpad: left padding with the pad id, attention_mask =
    (ids != pad id); returned as a tuple.  With a GPT-2-style tokenizer (pad == eos) and EOS-terminated rows the
    mask hides each row's own EOS."""
    tok = bpe_tokenizer()
    padded = _pad(_ids(tok, TEXTS, eos=True), tok.pad_token_id, left=True)
    return {"batch": (padded, (padded != tok.pad_token_id).long()), "tokenizer": tok}


def hyramxie_collate_fn() -> dict[str, Any]:
    """HyramXie/dmirxyh train_llm/data/data_collator.py: pixel_values stacked, input_ids padded with the pad id,
    labels with -100, attention_mask = input_ids.ne(pad id).  pad == eos tokenizer, EOS-terminated rows."""
    import torch
    from sklearn.datasets import load_digits

    tok = bpe_tokenizer()
    ids = _ids(tok, TEXTS[:8], eos=True)
    input_ids = _pad(ids, tok.pad_token_id)
    pixels = torch.tensor(load_digits().images[:8], dtype=torch.float32)[:, None] / 16.0
    return {"batch": {"input_ids": input_ids, "attention_mask": input_ids.ne(tok.pad_token_id).long(),
                      "labels": _pad(ids, -100), "pixel_values": pixels}, "tokenizer": tok}


def litgpt_sft_collate() -> dict[str, Any]:
    """litgpt data/base.py _sft_collate_fn: input_ids padded with pad_id=0, labels (prompt already masked with
    -100 by the dataset) padded with ignore_index -100.  The word tokenizer's pad id is 0."""
    tok = word_tokenizer()
    rows, labels = [], []
    for i in range(0, 16, 2):
        prompt = tok(TEXTS[i], add_special_tokens=False)["input_ids"]
        answer = tok(TEXTS[i + 1])["input_ids"][1:]  # the answer and its EOS
        rows.append([tok.bos_token_id] + prompt + answer)
        labels.append([-100] * (1 + len(prompt)) + answer)
    return {"batch": {"input_ids": _pad(rows, 0), "labels": _pad(labels, -100)}, "tokenizer": tok}


def dinosaurmauricio_collate() -> dict[str, Any]:
    """DinosaurMauricio/code_intelligence utils/collate.py: inputs and their mask padded, the target sequence
    (its own length) padded with pad_id, returned as (inputs, labels)."""
    tok = word_tokenizer()
    src = _ids(tok, TEXTS[:8])
    tgt = _ids(tok, TEXTS[8:16])
    inputs = {"input_ids": _pad(src, tok.pad_token_id), "attention_mask": _pad([[1] * len(r) for r in src], 0)}
    return {"batch": (inputs, _pad(tgt, tok.pad_token_id)), "tokenizer": tok}


def pretrain_collator_fixed_length() -> dict[str, Any]:
    """PretrainCollator (collate query, rank 8): every sequence is exactly max_sequence_length (packed text),
    input_ids stacked, labels = input_ids."""
    import torch

    tok = bpe_tokenizer()
    stream = [i for t in TEXTS for i in tok(t + tok.eos_token)["input_ids"]]
    n = len(stream) // 32
    ids = torch.tensor(stream[: n * 32]).view(n, 32)
    return {"batch": {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()},
            "tokenizer": tok}


def build_causal_lm_collator() -> dict[str, Any]:
    """build_causal_lm_collator (collate query, rank 12): tokenizer.pad, then labels[labels == pad id] = -100.
    With pad == eos (GPT-2 style) this masks each row's EOS too."""
    tok = bpe_tokenizer()
    feats = [{"input_ids": r, "labels": r} for r in _ids(tok, TEXTS, eos=True)]
    batch = tok.pad([{"input_ids": f["input_ids"]} for f in feats], padding=True, return_tensors="pt")
    labels = batch["input_ids"].clone()
    labels[labels == tok.pad_token_id] = -100
    batch["labels"] = labels
    return {"batch": batch, "tokenizer": tok}


# -- image query -------------------------------------------------------------------------------------------
def _bgr_photos() -> np.ndarray:
    from sklearn.datasets import load_sample_images

    rng = np.random.default_rng(7)
    out = []
    for img in load_sample_images().images:
        bgr = img[..., ::-1]  # what cv2.imread returns
        for _ in range(8):
            r, c = rng.integers(0, img.shape[0] - 64), rng.integers(0, img.shape[1] - 64)
            out.append(bgr[r : r + 64, c : c + 64])
    return np.stack(out).astype(np.float32)


def hdn_normalize_bgr() -> dict[str, Any]:
    """zhanxinrui/HDN hdn/datasets/custom_transforms.py: (image / 255 - ImageNet mean) / std on cv2-read (BGR)
    images, then HWC -> CHW tensors."""
    import torch

    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    x = (_bgr_photos() / 255.0 - mean) / std
    return {"batch": (torch.tensor(x.transpose(0, 3, 1, 2).copy(), dtype=torch.float32), torch.arange(16) % 2),
            "mean": mean.tolist(), "std": std.tolist()}


def zhcv_load_normalize() -> dict[str, Any]:
    """zhcv/summary torch-ml/load_data/LoadNormalize.py: ToTensor then Normalize(mean 0.4, std 0.2), RGB."""
    import torch

    rgb = _bgr_photos()[..., ::-1] / 255.0
    x = (rgb - 0.4) / 0.2
    return {"batch": (torch.tensor(x.transpose(0, 3, 1, 2).copy(), dtype=torch.float32), torch.arange(16) % 2),
            "mean": [0.4, 0.4, 0.4], "std": [0.2, 0.2, 0.2]}


# -- table query -------------------------------------------------------------------------------------------
def nachatz_generics() -> dict[str, Any]:
    """nachatz/my-ai-maker app/internal/gen/python/generics.py: X = df without the label column, as float
    tensors, train_test_split, DataLoader(batch_size=2, shuffle=True); the StandardScaler is imported, not used."""
    import torch
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split
    from torch.utils.data import DataLoader, TensorDataset

    df = load_breast_cancer(as_frame=True).frame.rename(columns={"target": "label"})
    x = torch.tensor(df.drop("label", axis=1).values, dtype=torch.float32)
    y = torch.tensor(df["label"].values, dtype=torch.float32).view(-1, 1)
    xt, _, yt, _ = train_test_split(x, y, test_size=0.2, random_state=42)
    torch.manual_seed(0)
    return {"batch": DataLoader(TensorDataset(xt, yt), batch_size=2, shuffle=True)}


def roshan_tensor_dataset() -> dict[str, Any]:
    """roshan5619/Deep_Learning_With_PyTorch Creating_Tesnor_Dataset.py: X = columns 1..-1, y = the last column,
    TensorDataset, DataLoader(batch_size=2, shuffle=True).  On iris (no id column to drop)."""
    import torch
    from sklearn.datasets import load_iris
    from torch.utils.data import DataLoader, TensorDataset

    df = load_iris(as_frame=True).frame
    x, y = df.iloc[:, 1:-1].to_numpy(), df.iloc[:, -1].to_numpy()
    torch.manual_seed(0)
    return {"batch": DataLoader(TensorDataset(torch.tensor(x), torch.tensor(y)), batch_size=2, shuffle=True)}


def tbakely_loader() -> dict[str, Any]:
    """tbakely/intro-to-stat-learning chapters/10-NeuralNetworks/data_preparation/v1.py: float tensors,
    TensorDataset, DataLoader(batch_size=16, shuffle=True).  On diabetes (sklearn scales its features)."""
    import torch
    from sklearn.datasets import load_diabetes
    from torch.utils.data import DataLoader, TensorDataset

    d = load_diabetes()
    torch.manual_seed(0)
    return {"batch": DataLoader(TensorDataset(torch.as_tensor(d.data).float(), torch.as_tensor(d.target).float()),
                                batch_size=16, shuffle=True)}


def tabular_ds_features() -> dict[str, Any]:
    """TabularDS (table query, rank 6): a fixed FEATURES list as float32, label as long, batch_size=64.  On
    breast_cancer's first seven columns, unscaled."""
    import torch
    from sklearn.datasets import load_breast_cancer
    from torch.utils.data import DataLoader, TensorDataset

    df = load_breast_cancer(as_frame=True).frame
    features = list(df.columns[:7])
    ds = TensorDataset(torch.tensor(df[features].values, dtype=torch.float32), torch.tensor(df["target"].values))
    torch.manual_seed(0)
    return {"batch": DataLoader(ds, batch_size=64, shuffle=True), "batches": 2}


def csvdataset_iris() -> dict[str, Any]:
    """CSVDataset (table query, rank 9): x = every column but the last (float32), y = the last column through
    LabelEncoder.  On the whole iris table (inspected as the dataset's arrays)."""
    from sklearn.datasets import load_iris
    from sklearn.preprocessing import LabelEncoder

    df = load_iris(as_frame=True).frame
    x = df.values[:, :-1].astype("float32")
    y = LabelEncoder().fit_transform(df.values[:, -1]).astype("float32")
    return {"batch": (x, y)}


#: case -> (expected kind, None for clean), written before the first run
LABEL: dict[str, str | None] = {
    "wqretre_collate_fn": None,
    "wqretre_collate_fn_leftpad": "attention_mask_mismatch",
    "hyramxie_collate_fn": "attention_mask_mismatch",
    "litgpt_sft_collate": None,
    "dinosaurmauricio_collate": "labels_padded_with_pad_id",
    "pretrain_collator_fixed_length": None,
    "build_causal_lm_collator": "eos_masked_as_pad",
    "hdn_normalize_bgr": "channel_order",
    "zhcv_load_normalize": None,
    "nachatz_generics": "unscaled_features",
    "roshan_tensor_dataset": None,
    "tbakely_loader": None,
    "tabular_ds_features": "unscaled_features",
    "csvdataset_iris": "duplicate_rows",
}

CASES = {name: globals()[name] for name in LABEL}
