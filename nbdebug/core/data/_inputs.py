"""Read whatever a user calls a batch into one of three plain shapes: text, images or a table.

Accepted: a tensor or numpy array, a dict of them (a Hugging Face ``BatchEncoding``), an ``(x, y)`` tuple, a list
of dicts (examples before collation), a pandas DataFrame, a dataset with ``column_names`` (its first rows) and a
DataLoader (its first few batches, merged).  Anything else is one ``InvalidArgumentError`` that names what was
given and what is expected.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nbdebug.errors import InvalidArgumentError

__all__ = ["Modality", "TextBatch", "ImageBatch", "TableBatch", "read_batch", "to_array", "describe"]

EXPECTED = ("a tensor or numpy array, a dict of tensors (BatchEncoding), an (x, y) tuple, a list of dicts, "
            "a pandas DataFrame, a dataset with column_names, or a DataLoader")
_TEXT_KEYS = ("input_ids", "attention_mask", "labels", "token_type_ids", "position_ids")
_IMAGE_KEYS = ("pixel_values", "image", "images", "img", "x")
_LABEL_KEYS = ("labels", "label", "target", "targets", "y")


class Modality(str, enum.Enum):
    """What a batch holds; ``inspect_batch(modality=...)`` and ``%inspect_batch --modality`` take these."""

    AUTO = "auto"
    TEXT = "text"
    IMAGE = "image"
    TABLE = "table"

    @classmethod
    def parse(cls, value: Modality | str) -> Modality:
        try:
            return cls(value)
        except ValueError:
            raise InvalidArgumentError(f"modality={value!r}; expected one of {', '.join(m.value for m in cls)}") from None


@dataclass
class TextBatch:
    """Token rows padded to one width: ``present`` marks the positions a row really has (ragged input)."""

    ids: np.ndarray  # (N, T) int64
    present: np.ndarray  # (N, T) bool
    mask: np.ndarray | None = None  # (N, T) attention_mask
    labels: np.ndarray | None = None  # (N, T) or None
    columns: dict[str, str] = field(default_factory=dict)  # every column given -> what it holds
    target: np.ndarray | None = None  # (N, L) labels of another length (a seq2seq target)


@dataclass
class ImageBatch:
    x: np.ndarray  # (N, C, H, W) float64
    dtype: str
    labels: np.ndarray | None = None
    labels_note: str = ""  # why labels given with the batch are not checked (several per row)


@dataclass
class TableBatch:
    x: np.ndarray  # (N, F) float64
    names: tuple[str, ...]
    labels: np.ndarray | None = None
    label_name: str = ""
    columns: dict[str, str] = field(default_factory=dict)  # non-numeric columns left out of x
    labels_note: str = ""  # why labels given with the batch are not checked (several per row)


def describe(value: Any) -> str:
    """A few words on what ``value`` is: its type and, for arrays, shape and dtype."""
    shape = getattr(value, "shape", None)
    name = type(value).__name__
    return f"{name} of shape {tuple(shape)} ({getattr(value, 'dtype', '?')})" if shape is not None else name


def _is_array(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and not _is_frame(value)


def _is_frame(value: Any) -> bool:
    return type(value).__name__ == "DataFrame" and hasattr(value, "columns")


def to_array(value: Any) -> np.ndarray:
    """A tensor, array or nested list as a numpy array (tensors detached and copied to the CPU)."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        t = value.detach().cpu()
        if str(t.dtype) == "torch.bfloat16":
            t = t.float()
        return np.asarray(t.numpy())
    return np.asarray(value)


def _what(value: Any) -> str:
    if _is_array(value):
        return f"{tuple(value.shape)} {str(value.dtype).replace('torch.', '')}"
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], str):
        return "strings"
    if isinstance(value, str):
        return "string"
    return type(value).__name__


def _ragged(rows: Sequence[Any], fill: int = 0) -> tuple[np.ndarray, np.ndarray]:
    arrays = [to_array(r).reshape(-1).astype(np.int64) for r in rows]
    width = max((len(a) for a in arrays), default=0)
    out = np.full((len(arrays), width), fill, dtype=np.int64)
    present = np.zeros((len(arrays), width), dtype=bool)
    for i, a in enumerate(arrays):
        out[i, : len(a)] = a
        present[i, : len(a)] = True
    return out, present


def _text_from_mapping(m: Mapping[str, Any]) -> TextBatch:
    cols = {str(k): _what(v) for k, v in m.items()}
    ids_v = m["input_ids"]
    if _is_array(ids_v):
        ids = to_array(ids_v).astype(np.int64)
        if ids.ndim == 1:
            ids = ids[None]
        if ids.ndim != 2:
            raise InvalidArgumentError(f"input_ids of shape {ids.shape}; expected (batch, sequence)")
        present = np.ones(ids.shape, dtype=bool)

        def get(key: str) -> np.ndarray | None:
            v = m.get(key)
            if v is None:
                return None
            a = to_array(v).astype(np.int64)
            return a.reshape(ids.shape) if a.size == ids.size else None
    else:  # lists of lists: rows of different lengths
        ids, present = _ragged(ids_v)

        def get(key: str) -> np.ndarray | None:
            v = m.get(key)
            if v is None or isinstance(v[0], (int, np.integer)):
                return None
            return _ragged(v, fill=-100 if key == "labels" else 0)[0]
    labels = get("labels")
    target = None
    if labels is None and m.get("labels") is not None and _is_array(m["labels"]):
        target = to_array(m["labels"]).astype(np.int64)
        target = target if target.ndim == 2 and len(target) == len(ids) else None
    return TextBatch(ids=ids, present=present, mask=get("attention_mask"), labels=labels, columns=cols, target=target)


def _image(x: np.ndarray, labels: Any) -> ImageBatch:
    dtype = str(x.dtype)
    if x.ndim == 3:  # (N, H, W): one channel
        x = x[:, None]
    if x.ndim != 4:
        raise InvalidArgumentError(f"images of shape {x.shape}; expected (N, C, H, W), (N, H, W, C) or (N, H, W)")
    if x.shape[1] not in (1, 3, 4) and x.shape[-1] in (1, 3, 4):  # channels last (numpy, PIL, TF)
        x = np.moveaxis(x, -1, 1)
    y, note = _row_labels(labels, len(x))
    return ImageBatch(x=x.astype(np.float64), dtype=dtype, labels=y, labels_note=note)


def _table_from_frame(df: Any, label: str | None) -> TableBatch:
    name = label or next((c for c in df.columns if str(c).lower() in _LABEL_KEYS), None)
    if label is not None and label not in df.columns:
        raise InvalidArgumentError(f"label={label!r} is not a column; the columns are {list(map(str, df.columns))}")
    features = df.drop(columns=[name]) if name is not None else df
    numeric = features.select_dtypes(include=["number", "bool"])
    other = {str(c): str(features[c].dtype) for c in features.columns if c not in numeric.columns}
    y = to_array(df[name]) if name is not None else None
    return TableBatch(x=numeric.to_numpy(dtype=np.float64), names=tuple(map(str, numeric.columns)), labels=y,
                      label_name=str(name or ""), columns=other)


def _table(x: np.ndarray, labels: Any) -> TableBatch:
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2:
        raise InvalidArgumentError(f"a feature table of shape {x.shape}; expected (rows, features)")
    y, note = _row_labels(labels, len(x))
    return TableBatch(x=x.astype(np.float64), names=tuple(f"x{i}" for i in range(x.shape[1])), labels=y,
                      labels_note=note)


def _row_labels(labels: Any, rows: int) -> tuple[np.ndarray | None, str]:
    """One label per row, or None with the reason (several targets a row, a mask per image, token targets)."""
    if labels is None:
        return None, ""
    y = to_array(labels)
    if y.size == rows:
        return y.reshape(rows), ""
    if rows and y.size % rows == 0:
        return None, (f"{tuple(y.shape)}: {y.size // rows} per row (several targets, a mask or token targets); "
                      "the label checks read one label per row, so they are left out")
    raise InvalidArgumentError(f"labels of shape {tuple(y.shape)} for a batch of {rows} rows; expected one label "
                               "(or one row of labels) per row")


def _from_array(x: np.ndarray, labels: Any, modality: Modality) -> TextBatch | ImageBatch | TableBatch:
    integer = np.issubdtype(x.dtype, np.integer)
    if integer and x.ndim == 2 and labels is not None and _is_array(labels) and modality is not Modality.IMAGE:
        second = to_array(labels)
        if second.shape == x.shape and np.isin(second, (0, 1)).all() and x.dtype == np.int64:
            return _text_from_mapping({"input_ids": x, "attention_mask": second})  # (input_ids, attention_mask)
    if modality is Modality.TEXT or (modality is Modality.AUTO and x.ndim == 2 and integer and x.dtype == np.int64
                                     and labels is not None and _is_array(labels) and to_array(labels).ndim == 2):
        return _text_from_mapping({"input_ids": x, **({"labels": labels} if labels is not None else {})})
    if modality is Modality.IMAGE or (modality is Modality.AUTO and x.ndim in (3, 4)):
        return _image(x, labels)
    if modality in (Modality.TABLE, Modality.AUTO) and x.ndim <= 2:
        return _table(x, labels)
    raise InvalidArgumentError(f"an array of shape {x.shape} as a {modality.value} batch; expected (N, T) token ids, "
                               "(N, C, H, W) images or (N, F) features")


def _one(batch: Any, modality: Modality, label: str | None, tokenizer: Any) -> TextBatch | ImageBatch | TableBatch:
    if _is_frame(batch):
        return _table_from_frame(batch, label)
    if isinstance(batch, Mapping) or (hasattr(batch, "keys") and hasattr(batch, "__getitem__")
                                      and not hasattr(batch, "column_names") and not _is_array(batch)):
        m = {str(k): batch[k] for k in batch.keys()}
        if "input_ids" in m and modality in (Modality.AUTO, Modality.TEXT):
            return _text_from_mapping(m)
        y = next((m[k] for k in _LABEL_KEYS if k in m), None)
        img = next((m[k] for k in _IMAGE_KEYS if k in m and _is_array(m[k])), None)
        if img is not None:
            return _from_array(to_array(img), y, Modality.IMAGE if modality is Modality.AUTO else modality)
        import pandas as pd

        return _table_from_frame(pd.DataFrame({k: list(to_array(v)) if _is_array(v) and to_array(v).ndim > 1
                                               else (to_array(v) if _is_array(v) else v) for k, v in m.items()}), label)
    if hasattr(batch, "column_names") and hasattr(batch, "__getitem__") and hasattr(batch, "__len__"):
        return _one(batch[: min(len(batch), 256)], modality, label, tokenizer)  # a datasets.Dataset: first rows
    if _is_array(batch) or (isinstance(batch, list) and batch and isinstance(batch[0], (list, int, float))):
        x = to_array(batch)
        # token ids: a torch LongTensor, or any integer matrix once a tokenizer is given
        ids = np.issubdtype(x.dtype, np.integer) and x.ndim == 2 and (
            tokenizer is not None or str(getattr(batch, "dtype", "")) == "torch.int64")
        return _from_array(x, None, Modality.TEXT if ids and modality is Modality.AUTO else modality)
    if isinstance(batch, (tuple, list)) and len(batch) == 2 and isinstance(batch[0], Mapping) \
            and "input_ids" in batch[0] and _is_array(batch[1]):  # (inputs, labels) from a collate_fn
        return _text_from_mapping({**batch[0], "labels": batch[1]})
    if isinstance(batch, (tuple, list)) and len(batch) == 2 and _is_array(batch[0]):
        x = to_array(batch[0])
        if tokenizer is not None and modality is Modality.AUTO and np.issubdtype(x.dtype, np.integer) and x.ndim == 2:
            modality = Modality.TEXT
        return _from_array(x, batch[1], modality)
    if isinstance(batch, (list, tuple)) and batch and all(isinstance(r, Mapping) for r in batch):
        keys = list(batch[0].keys())
        if "input_ids" in keys:
            return _text_from_mapping({k: [r[k] for r in batch] for k in keys if all(k in r for r in batch)})
        import pandas as pd

        return _table_from_frame(pd.DataFrame.from_records(list(batch)), label)
    raise InvalidArgumentError(f"inspect_batch was given {describe(batch)}; expected {EXPECTED}")


def _is_loader(batch: Any) -> bool:
    return type(batch).__name__ == "DataLoader" or (hasattr(batch, "dataset") and hasattr(batch, "batch_size")
                                                   and hasattr(batch, "__iter__"))


def _merge(parts: list[Any]) -> Any:
    first = parts[0]
    if any(type(p) is not type(first) for p in parts):
        raise InvalidArgumentError("the DataLoader's batches are of different kinds: "
                                   f"{sorted({type(p).__name__ for p in parts})}")
    if isinstance(first, TextBatch):
        width = max(p.ids.shape[1] for p in parts)

        def stack(arrays: list[np.ndarray | None], fill: int) -> np.ndarray | None:
            if any(a is None for a in arrays):
                return None
            return np.concatenate([np.pad(a, ((0, 0), (0, width - a.shape[1])), constant_values=fill)
                                   for a in arrays if a is not None])
        ids = stack([p.ids for p in parts], 0)
        present = stack([p.present.astype(np.int64) for p in parts], 0)
        assert ids is not None and present is not None
        return TextBatch(ids=ids, present=present.astype(bool), mask=stack([p.mask for p in parts], 0),
                         labels=stack([p.labels for p in parts], -100), columns=first.columns)
    if isinstance(first, ImageBatch):
        if len({p.x.shape[1:] for p in parts}) > 1:
            return first  # resized per batch: look at the first only
        y = None if any(p.labels is None for p in parts) else np.concatenate([p.labels for p in parts])
        return ImageBatch(x=np.concatenate([p.x for p in parts]), dtype=first.dtype, labels=y)
    y = None if any(p.labels is None for p in parts) else np.concatenate([p.labels for p in parts])
    return TableBatch(x=np.concatenate([p.x for p in parts]), names=first.names, labels=y,
                      label_name=first.label_name, columns=first.columns)


def read_batch(batch: Any, *, modality: Modality = Modality.AUTO, label: str | None = None, batches: int = 4,
               tokenizer: Any = None) -> tuple[TextBatch | ImageBatch | TableBatch, str]:
    """The batch in one plain shape, and what was given in words."""
    if _is_loader(batch):
        import torch

        from nbdebug.core._rng import RngGuard

        parts = []
        # a shuffling loader draws from the global RNGs: looking must not change the user's next epoch or dropout
        with torch.random.fork_rng(devices=[]), RngGuard():
            for i, b in enumerate(batch):
                if i >= batches:
                    break
                parts.append(_one(b, modality, label, tokenizer))
        if not parts:
            raise InvalidArgumentError("the DataLoader gave no batch (an empty dataset, or drop_last with fewer rows "
                                       "than batch_size); expected at least one")
        return _merge(parts), f"{type(batch).__name__}, first {len(parts)} batch(es)"
    read = _one(batch, modality, label, tokenizer)
    if isinstance(batch, Mapping) or hasattr(batch, "keys"):
        what = f"{type(batch).__name__} of {len(list(batch.keys()))} columns"
    elif isinstance(batch, (list, tuple)) and not _is_array(batch):
        what = f"{type(batch).__name__} of {len(batch)}"
    else:
        what = describe(batch)
    return read, what
