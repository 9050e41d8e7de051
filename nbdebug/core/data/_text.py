"""Checks of a token batch: padding and masks, labels against input_ids, BOS/EOS, truncation, vocabulary size,
the loss on a chat prompt, duplicated and empty rows.  Everything is vectorized over the ``(N, T)`` batch; only
the few rows shown are decoded."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from nbdebug.core._findings import Finding
from nbdebug.core.data._inputs import TextBatch
from nbdebug.core.data._report import TokenRow, batch_finding, limit

__all__ = ["TokenizerInfo", "tokenizer_info", "text_checks", "token_rows", "content_mask", "rows_of"]

IGNORE = -100


@dataclass(frozen=True)
class TokenizerInfo:
    pad: int | None = None
    eos: int | None = None
    bos: int | None = None
    unk: int | None = None
    special: frozenset[int] = frozenset()
    size: int | None = None
    max_length: int | None = None


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, np.integer)) else None


def tokenizer_info(tokenizer: Any) -> TokenizerInfo:
    """The ids that matter, from a Hugging Face tokenizer (or anything with the same attributes)."""
    if tokenizer is None:
        return TokenizerInfo()
    from nbdebug.errors import InvalidArgumentError

    if not hasattr(tokenizer, "convert_ids_to_tokens"):
        raise InvalidArgumentError(f"tokenizer={type(tokenizer).__name__}; expected a Hugging Face tokenizer "
                                   "(PreTrainedTokenizerFast, AutoTokenizer.from_pretrained(...))")
    try:
        size = len(tokenizer)
    except TypeError:
        size = None
    mx = _int(getattr(tokenizer, "model_max_length", None))
    return TokenizerInfo(pad=_int(tokenizer.pad_token_id), eos=_int(tokenizer.eos_token_id),
                         bos=_int(tokenizer.bos_token_id), unk=_int(getattr(tokenizer, "unk_token_id", None)),
                         special=frozenset(int(i) for i in (getattr(tokenizer, "all_special_ids", None) or ())),
                         size=size, max_length=mx if mx is not None and mx < 1_000_000 else None)


def rows_of(index: np.ndarray, limit_: int = 8) -> tuple[str, ...]:
    """``("row 3", "row 7", ...)`` for the first few rows of a boolean or index array."""
    idx = np.flatnonzero(index) if index.dtype == bool else index
    shown = tuple(f"row {int(i)}" for i in idx[:limit_])
    return shown + ((f"... {len(idx) - limit_} more",) if len(idx) > limit_ else ())


def _edge_run(flag: np.ndarray, present: np.ndarray, right: bool) -> np.ndarray:
    """Positions in the run of ``flag`` touching the row's right (or left) end, among present positions."""
    f = flag | ~present if right else flag
    if right:
        run = np.flip(np.cumprod(np.flip(f, 1), 1), 1).astype(bool)
    else:
        run = np.cumprod(f, 1).astype(bool)
    return run & present


def pad_positions(tb: TextBatch, tok: TokenizerInfo) -> np.ndarray:
    """(N, T) True where a row is padding: from attention_mask, else the pad runs at either end of each row."""
    if tb.mask is not None:  # with pad == eos too: the mask knows which EOS is real
        return (tb.mask == 0) & tb.present
    if tok.pad is None:
        return np.zeros_like(tb.present)
    is_pad = (tb.ids == tok.pad) & tb.present
    right, left = _edge_run(is_pad, tb.present, True), _edge_run(is_pad, tb.present, False)
    if tok.pad == tok.eos:  # the first EOS of a right run is the row's own end, not padding
        first = right & ~np.roll(right, 1, axis=1)
        first[:, 0] = right[:, 0]
        right &= ~first
    full = is_pad.sum(1) == tb.present.sum(1)
    left[full] = False
    return right | left


def content_mask(tb: TextBatch, tok: TokenizerInfo, pads: np.ndarray | None = None) -> np.ndarray:
    """(N, T) True at the real tokens of each row (not padding, not missing)."""
    pads = pad_positions(tb, tok) if pads is None else pads
    return tb.present & ~pads


def _model_info(model: Any) -> tuple[int | None, bool, bool]:
    """(embedding rows, shifts labels itself (a Hugging Face causal LM), known custom model)."""
    if model is None:
        return None, False, False
    size = None
    try:
        size = int(model.get_input_embeddings().num_embeddings)
    except Exception:
        import torch

        emb = next((m for m in model.modules() if isinstance(m, torch.nn.Embedding)), None) \
            if isinstance(model, torch.nn.Module) else None
        size = int(emb.num_embeddings) if emb is not None else None
    name = type(model).__name__
    hf_clm = name.endswith(("ForCausalLM", "LMHeadModel")) and hasattr(model, "config")
    return size, hf_clm, not hasattr(model, "config")


def _find(ids: np.ndarray, seq: list[int]) -> np.ndarray:
    """(N,) first position just after ``seq`` in each row (-1 where absent)."""
    n, t = ids.shape
    k = len(seq)
    if k == 0 or k > t:
        return np.full(n, -1)
    hit = np.ones((n, t - k + 1), dtype=bool)
    for j, s in enumerate(seq):
        hit &= ids[:, j : t - k + 1 + j] == s
    first = np.where(hit.any(1), hit.argmax(1) + k, -1)
    return first


def _template_marker(tokenizer: Any) -> tuple[str, ...]:
    """The text the tokenizer's own chat template puts before an assistant's answer (its generation prompt)."""
    if not getattr(tokenizer, "chat_template", None):
        return ()
    try:
        msgs = [{"role": "user", "content": "\x00"}]
        with_prompt = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        without = tokenizer.apply_chat_template(msgs, add_generation_prompt=False, tokenize=False)
    except Exception:  # a template that needs more (a system turn, tools): the common markers still apply
        return ()
    prompt = with_prompt[len(without):] if with_prompt.startswith(without) else ""
    return (prompt.strip(),) if prompt.strip() else ()


def _marker_ends(tb: TextBatch, tokenizer: Any, tok: TokenizerInfo, template: str | None) -> np.ndarray:
    """(N,) position after the first assistant-turn marker of each row (-1: none found)."""
    from nbdebug.core.knowledge.batch import CHAT_MARKERS

    best = np.full(len(tb.ids), -1)
    for marker in ((template,) if template else (*_template_marker(tokenizer), *CHAT_MARKERS)):
        for text in dict.fromkeys((marker, " " + marker, marker + "\n")):
            try:
                seq = list(tokenizer(text, add_special_tokens=False)["input_ids"])
            except Exception:
                continue
            if not seq or (tok.unk is not None and tok.unk in seq):
                continue
            ends = _find(tb.ids, seq)
            take = (ends >= 0) & ((best < 0) | (ends < best))
            best[take] = ends[take]
    return best


def text_checks(tb: TextBatch, tokenizer: Any = None, model: Any = None, *, max_length: int | None = None,
                response_template: str | None = None) -> tuple[list[Finding], list[tuple[str, Any]]]:
    """The findings of a token batch, and its headline numbers."""
    tok = tokenizer_info(tokenizer)
    vocab, hf_clm, custom = _model_info(model)
    pads = pad_positions(tb, tok)
    content = tb.present & ~pads
    ids = tb.ids
    n, t = ids.shape
    lengths = content.sum(1)
    found = list(_vocab_checks(ids, tb.present, tok, vocab))
    stats: list[tuple[str, Any]] = [("rows x width", f"{n} x {t}")]
    n_pad = int(pads.sum())
    pad_frac = n_pad / max(1, int(tb.present.sum()))
    side = "none"
    if n_pad:
        r = bool(pads[:, -1].any())
        lft = bool((pads[:, 0] & tb.present[:, 0]).any())
        side = "both" if r and lft else ("left" if lft else "right")
    stats.append(("padding", f"{pad_frac:.1%} ({side} side)"))
    if pad_frac > limit("batch_heavy_padding"):
        found.append(batch_finding("heavy_padding", f"{pad_frac:.0%} of the batch's positions are padding ({side} "
                                   "side): compute spent on nothing", evidence={"pad_fraction": round(pad_frac, 3)}))
    if tb.mask is not None and tok.pad is not None:
        found += _mask_checks(tb, tok, content)
    last = np.where(lengths > 0, np.argmax(np.cumsum(content, 1) == lengths[:, None], 1), 0)
    first = np.argmax(content, 1)
    last_tok = ids[np.arange(n), last]
    first_tok = ids[np.arange(n), first]
    ends_eos = (last_tok == tok.eos) & (lengths > 0) if tok.eos is not None else np.zeros(n, bool)
    lm_labels = False
    if tb.labels is not None:
        lm, more = _label_checks(tb, tok, content, pads, hf_clm, custom, model is not None)
        lm_labels = lm
        found += more
        trained = (tb.labels != IGNORE) & tb.present
        stats.append(("label tokens trained", f"{int((trained & content).sum())} of {int(content.sum())} real tokens"
                      f" ({int((content & ~trained).sum())} masked with -100, {int((trained & pads).sum())} on padding)"))
        if tokenizer is not None and lm:
            found += _prompt_check(tb, tokenizer, tok, trained, response_template)
    elif tb.target is not None and tok.pad is not None:  # a target of its own length: its padding is its own
        run = _edge_run(tb.target == tok.pad, np.ones(tb.target.shape, bool), True)
        if tok.pad == tok.eos:
            run[:, 1:] &= run[:, :-1]
        if run.any():
            found.append(batch_finding("labels_padded_with_pad_id", f"{int(run.sum())} padding position(s) of the "
                                       f"labels carry the pad id {tok.pad} instead of -100", rows_of(np.asarray(run.any(1))),
                                       evidence={"positions": int(run.sum())}))
    if tok.bos is not None and tok.bos != tok.eos:
        starts = (first_tok == tok.bos) & (lengths > 0)
        stats.append(("rows starting with BOS", f"{int(starts.sum())} of {n}"))
        second = ids[np.arange(n), np.minimum(first + 1, t - 1)]
        double = starts & (second == tok.bos) & (lengths > 1)
        if double.any():
            found.append(batch_finding("double_bos", f"{int(double.sum())} of {n} rows start with BOS twice: the "
                                       "chat template and the tokenizer both added it", rows_of(double)))
        elif not starts.any():
            found.append(batch_finding("missing_bos", f"no row starts with the BOS token (id {tok.bos})"))
    if tok.eos is not None:
        stats.append(("rows ending with EOS", f"{int(ends_eos.sum())} of {n}"))
    # a row may end in another stop token: a chat template's end of turn (<|im_end|>, <|eot_id|>)
    stops = np.fromiter(tok.special - {tok.pad, tok.bos}, dtype=np.int64) if tok.special else np.zeros(0, np.int64)
    ends_stop = ends_eos | (np.isin(last_tok, stops) & (lengths > 0))
    cut = _cut_rows(tb, tok, content, lengths, ends_stop, max_length or tok.max_length)
    if cut.any():
        found.append(batch_finding("rows_truncated", f"{int(cut.sum())} of {n} rows fill the whole width "
                                   f"({int(lengths[cut].max())} tokens) and end without EOS: cut at max_length",
                                   rows_of(cut), evidence={"rows": int(cut.sum())}))
    elif tok.eos is not None and not ends_stop.any() and n:
        found.append(batch_finding("missing_eos", f"none of the {n} rows ends with the EOS token (id {tok.eos})",
                                   severity=None if lm_labels else "info"))
    found += _row_checks(ids, content, lengths, tok)
    return found, stats


def _vocab_checks(ids: np.ndarray, present: np.ndarray, tok: TokenizerInfo, vocab: int | None) -> Iterator[Finding]:
    size = vocab if vocab is not None else tok.size
    if size is None:
        bad = (ids < 0) & present
    else:
        bad = ((ids >= size) | (ids < 0)) & present
    if bad.any():
        rows = bad.any(1)
        hi = int(ids[present].max())
        lo = int(ids[present].min())
        whose = "the model's embedding" if vocab is not None else "the tokenizer's vocabulary"
        yield batch_finding("token_id_beyond_vocab", f"{int(bad.sum())} token id(s) outside {whose} of {size} rows "
                            f"(ids range {lo}..{hi}) in {int(rows.sum())} row(s); the embedding lookup fails, or on "
                            "some devices silently reads garbage", rows_of(rows),
                            evidence={"max_id": hi, "min_id": lo, "embedding_size": size,
                                      "tokenizer_size": tok.size})


def _mask_checks(tb: TextBatch, tok: TokenizerInfo, content: np.ndarray) -> Iterator[Finding]:
    assert tb.mask is not None
    ids, mask, present = tb.ids, tb.mask, tb.present
    hidden = (mask == 0) & present & (ids != tok.pad)
    is_pad = (ids == tok.pad) & present & (mask != 0)
    if tok.pad == tok.eos:  # a real EOS is attended: only a run of two or more attended pads is padding
        prev = np.zeros_like(is_pad)
        prev[:, 1:] = is_pad[:, :-1]
        is_pad &= prev
    if hidden.any() or is_pad.any():
        rows = hidden.any(1) | is_pad.any(1)
        parts = []
        if is_pad.any():
            parts.append(f"{int(is_pad.sum())} pad token(s) attended (mask 1)")
        if hidden.any():
            parts.append(f"{int(hidden.sum())} real token(s) masked out (mask 0)")
        yield batch_finding("attention_mask_mismatch", f"{' and '.join(parts)} in {int(rows.sum())} row(s)",
                            rows_of(rows), evidence={"attended_pads": int(is_pad.sum()),
                                                     "masked_tokens": int(hidden.sum())})


def _label_checks(tb: TextBatch, tok: TokenizerInfo, content: np.ndarray, pads: np.ndarray, hf_clm: bool,
                  custom: bool, has_model: bool) -> tuple[bool, list[Finding]]:
    """(labels look like a language model's, findings)."""
    assert tb.labels is not None
    labels, ids = tb.labels, tb.ids
    out: list[Finding] = []
    trained = (labels != IGNORE) & tb.present
    if tok.pad is not None and tok.pad != IGNORE:
        on_pad = pads & (labels == tok.pad)
        if on_pad.any():
            out.append(batch_finding("labels_padded_with_pad_id", f"{int(on_pad.sum())} padding position(s) carry "
                                     f"the pad id {tok.pad} as their label instead of -100 "
                                     f"({on_pad.sum() / max(1, trained.sum()):.0%} of the trained label tokens)",
                                     rows_of(on_pad.any(1)), evidence={"positions": int(on_pad.sum())}))
    real = trained & content
    same = int(((labels == ids) & real).sum())
    nxt = np.zeros_like(real)
    nxt[:, :-1] = real[:, :-1] & tb.present[:, 1:]
    shifted = int(((labels[:, :-1] == ids[:, 1:]) & nxt[:, :-1]).sum())
    total = max(1, int(real.sum()))
    k = limit("batch_shift_match")
    is_shifted = shifted / max(1, int(nxt.sum())) >= k and same / total < 0.5
    aligned = same / total >= k
    if is_shifted and not (has_model and custom):
        where = "the model shifts them again" if hf_clm else "a Hugging Face causal LM would shift them again"
        out.append(batch_finding(
            "labels_shifted_twice", f"labels[t] == input_ids[t+1] on {shifted} of {int(nxt.sum())} trained "
            f"positions: the labels are already shifted, and {where} (each position learns the token two ahead)",
            evidence={"shifted_match": round(shifted / max(1, int(nxt.sum())), 3)},
            severity=None if hf_clm else "info"))
    if aligned and has_model and custom:
        out.append(batch_finding(
            "labels_not_shifted", f"labels == input_ids on {same} of {total} trained positions and the model is "
            "not a Hugging Face causal LM: unless its loss shifts them, position t learns to copy token t",
            evidence={"aligned_match": round(same / total, 3)}))
    has_content = content.any(1)
    dead = has_content & ~(trained & content).any(1) & ~(trained & pads).any(1)
    if dead.any():
        out.append(batch_finding("row_fully_masked", f"{int(dead.sum())} of {len(ids)} rows have every label -100: "
                                 "they cost compute and teach nothing (often a response cut off by max_length)",
                                 rows_of(dead), evidence={"rows": int(dead.sum())}))
    if tok.eos is not None and tok.pad == tok.eos:
        out += _eos_masked(tb, tok, content, trained)
    return aligned or is_shifted, out


def _eos_masked(tb: TextBatch, tok: TokenizerInfo, content: np.ndarray, trained: np.ndarray) -> list[Finding]:
    """pad == eos: is the row's own final EOS trained?"""
    ids = tb.ids
    n = len(ids)
    lengths = content.sum(1)
    last = np.where(lengths > 0, np.argmax(np.cumsum(content, 1) == lengths[:, None], 1), 0)
    has = (ids[np.arange(n), last] == tok.eos) & (lengths > 0)  # the row's own EOS: its last real token
    if not has.any() or not trained[content].any():
        return []
    masked = has & ~trained[np.arange(n), last]
    if masked.sum() == has.sum():
        return [batch_finding("eos_masked_as_pad", f"pad == eos (id {tok.eos}) and the EOS ending each of "
                              f"{int(has.sum())} rows has label -100, like the padding: the model never learns to "
                              "stop", rows_of(masked), evidence={"rows": int(has.sum())})]
    return []


def _prompt_check(tb: TextBatch, tokenizer: Any, tok: TokenizerInfo, trained: np.ndarray,
                  template: str | None) -> list[Finding]:
    ends = _marker_ends(tb, tokenizer, tok, template)
    marked = ends >= 0
    if not marked.any():
        return []
    cols = np.arange(tb.ids.shape[1])[None, :]
    before = (cols < ends[:, None]) & trained & marked[:, None]
    rows = before.any(1)
    if rows.sum() * 2 >= marked.sum():
        return [batch_finding("loss_on_prompt", f"{int(rows.sum())} of {int(marked.sum())} chat rows train on "
                              f"{int(before.sum())} label token(s) before the assistant's turn: the model learns to "
                              "write the user's prompts", rows_of(rows), evidence={"prompt_tokens": int(before.sum())})]
    return []


def _cut_rows(tb: TextBatch, tok: TokenizerInfo, content: np.ndarray, lengths: np.ndarray, ends_eos: np.ndarray,
              max_length: int | None) -> np.ndarray:
    full = lengths == tb.present.sum(1)
    if max_length is not None:
        cut = full & (lengths == max_length)
        return cut & ~ends_eos if tok.eos is not None else cut
    if tok.eos is None or not ends_eos.any():
        return np.zeros(len(lengths), bool)
    # padded to the longest row: the full rows that lack the EOS every other row has
    return full & ~ends_eos & (lengths > 0) & (lengths == lengths.max()) & (~full).any()


def _row_checks(ids: np.ndarray, content: np.ndarray, lengths: np.ndarray, tok: TokenizerInfo) -> list[Finding]:
    out = []
    if tok.special:
        specials = np.isin(ids, np.fromiter(tok.special, dtype=np.int64))
        words = (content & ~specials).sum(1)
    else:
        words = lengths
    empty = words == 0
    if empty.any():
        out.append(batch_finding("empty_rows", f"{int(empty.sum())} of {len(ids)} rows hold no token but special "
                                 "tokens and padding", rows_of(empty), evidence={"rows": int(empty.sum())}))
    seen: dict[bytes, int] = {}
    dups = []
    for i in np.flatnonzero(~empty):
        key = ids[i][content[i]].tobytes()
        if key in seen:
            dups.append((seen[key], int(i)))
        else:
            seen[key] = int(i)
    if dups:
        out.append(batch_finding("duplicate_rows", f"{len(dups)} row(s) repeat an earlier row of the batch "
                                 f"(first: row {dups[0][1]} = row {dups[0][0]})",
                                 tuple(f"row {b} = row {a}" for a, b in dups[:8]), evidence={"duplicates": len(dups)}))
    return out


def token_rows(tb: TextBatch, tokenizer: Any, *, rows: int = 4, head: int = 48, tail: int = 16) -> tuple[TokenRow, ...]:
    """The first ``rows`` rows decoded token by token (special tokens visible), bounded to ``head + tail`` tokens
    each, with what the loss does with every token; a run of padding is one entry (``<pad> x37``)."""
    tok = tokenizer_info(tokenizer)
    pads = pad_positions(tb, tok)
    content = tb.present & ~pads
    out = []
    for i in range(min(rows, len(tb.ids))):
        pos = np.flatnonzero(tb.present[i])
        keep = pos if len(pos) <= head + tail else np.concatenate([pos[:head], pos[-tail:]])
        ids = [int(v) for v in tb.ids[i, keep]]
        if tokenizer is not None:
            try:
                pieces = [str(p) for p in tokenizer.convert_ids_to_tokens(ids)]
            except Exception:  # an id beyond the vocabulary
                pieces = [str(tokenizer.convert_ids_to_tokens(v)) if 0 <= v < (tok.size or 0) else f"<{v}?>"
                          for v in ids]
        else:
            pieces = [str(v) for v in ids]
        items: list[tuple[str, str]] = []
        for j, (p, v) in enumerate(zip(keep, ids)):
            if j == head and len(pos) > head + tail:
                items.append((f"... {len(pos) - head - tail} tokens ...", "gap"))
            if pads[i, p]:
                state = "pad"
            elif tb.labels is not None:
                state = "trained" if tb.labels[i, p] != IGNORE else "masked"
            else:
                state = "special" if v in tok.special else "input"
            if state == "pad" and items and items[-1][1] == "pad":
                text, _ = items[-1]
                base, _, count = text.partition(" x")
                items[-1] = (f"{base} x{int(count or 1) + 1}", "pad")
                continue
            items.append((p_text(pieces[j]), state))
        lengths = int(content[i].sum())
        last = int(tb.ids[i, np.flatnonzero(content[i])[-1]]) if lengths else None
        firsts = int(tb.ids[i, np.flatnonzero(content[i])[0]]) if lengths else None
        trained = int(((tb.labels[i] != IGNORE) & tb.present[i]).sum()) if tb.labels is not None else 0
        out.append(TokenRow(index=i, tokens=tuple(items), length=lengths, pad=int(pads[i].sum()), trained=trained,
                            bos=firsts is not None and firsts == tok.bos, eos=last is not None and last == tok.eos,
                            cut=lengths == int(tb.present[i].sum()) and last != tok.eos and tok.eos is not None))
    return tuple(out)


def p_text(piece: str) -> str:
    """A token as a person reads it: byte-level BPE's space and newline marks shown as ' ' and '\\n'."""
    return piece.replace("\u0120", " ").replace("\u010a", "\\n").replace("\u2581", " ")
