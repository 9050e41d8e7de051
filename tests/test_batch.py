"""The batch inspector: the planted-bug set is named with the right fix, clean batches get no warning, the
held-out batches from public code keep their measured figure, and every accepted input reads."""

from __future__ import annotations

import json

import numpy as np
import pytest

import nbdebug
from nbdebug.core._findings import Severity
from nbdebug.errors import InvalidArgumentError
from tests.data.batch import heldout, planted
from tests.data.batch.corpus import word_tokenizer


@pytest.mark.parametrize("name", list(planted.CASES))
def test_planted_bug_is_named_with_its_fix(name):
    expected, build = planted.CASES[name]
    report = nbdebug.inspect_batch(**build())
    if expected is None:
        problems = [f for f in report.findings if f.severity is not Severity.INFO]
        assert report.ok, f"{name}: clean batch got {[(f.kind, f.message) for f in problems]}"
        return
    assert expected in report.kinds, f"{name}: expected {expected}, got {report.kinds}"
    f = report.finding(expected)
    assert f is not None and f.severity is not Severity.INFO
    assert f.fixes and any(x.code for x in f.fixes), f"{expected} has no fix with code"
    assert f.title and f.message


def test_the_planted_set_covers_twenty_kinds_over_text_images_tables():
    kinds = {k for k, _ in planted.CASES.values() if k}
    assert len(kinds) >= 20
    clean = [n for n, (k, _) in planted.CASES.items() if k is None]
    assert {"text", "digits", "photos", "cancer"} <= {w for n in clean for w in n.split("_")}


def _judge(name: str) -> bool:
    expected = heldout.LABEL[name]
    report = nbdebug.inspect_batch(**heldout.CASES[name]())
    return report.ok if expected is None else expected in report.kinds


def test_heldout_batches_from_public_code_keep_their_figure():
    """Held-out: 14 batches re-stating public collate/dataset code, labelled before the first run.  The first run
    got 12 right and 2 wrong; a later change may only do better."""
    right = [n for n in heldout.CASES if _judge(n)]
    assert len(right) >= 12, f"held-out right: {len(right)} of {len(heldout.CASES)}; wrong: " \
        f"{sorted(set(heldout.CASES) - set(right))}"


# -- what it accepts ---------------------------------------------------------------------------------------
def _enc():
    tok = word_tokenizer()
    return tok(list(planted.sentences()[:6]), padding=True, return_tensors="pt"), tok


def test_every_accepted_form_reads():
    import pandas as pd
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    enc, tok = _enc()
    x = np.random.default_rng(0).normal(size=(40, 3))
    y = np.arange(40) % 2
    forms = {
        "text": [enc, enc["input_ids"], dict(enc), [{"input_ids": r[:5].tolist()} for r in enc["input_ids"]],
                 (enc["input_ids"], enc["attention_mask"]), enc["input_ids"].numpy()],
        "image": [torch.rand(8, 3, 8, 8), np.random.rand(8, 8, 8, 3), (torch.rand(8, 1, 8, 8), torch.arange(8)),
                  {"pixel_values": torch.rand(4, 3, 8, 8), "labels": torch.arange(4)},
                  DataLoader(TensorDataset(torch.rand(12, 1, 8, 8), torch.arange(12)), batch_size=4)],
        "table": [pd.DataFrame(x, columns=list("abc")).assign(label=y), (x, y), x.astype(np.float32),
                  [{"a": float(v), "label": int(t)} for v, t in zip(x[:, 0], y)]],
    }
    for modality, batches in forms.items():
        for b in batches:
            r = nbdebug.inspect_batch(b, tokenizer=tok if modality == "text" else None)
            assert r.modality == modality, (type(b).__name__, r.modality)
            assert r.rows > 0


def test_dataloader_merges_its_first_batches():
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.rand(40, 1, 8, 8), torch.arange(40) % 3), batch_size=8)
    assert nbdebug.inspect_batch(loader, batches=3).rows == 24
    assert "first 3 batch" in nbdebug.inspect_batch(loader, batches=3).source


@pytest.mark.parametrize("bad, words", [
    ("some text", "str"), (object(), "object"), (42, "int"), ([], "list"),
])
def test_bad_input_is_one_clear_error(bad, words):
    with pytest.raises(InvalidArgumentError) as e:
        nbdebug.inspect_batch(bad)
    assert words in str(e.value) and "expected" in str(e.value)


def test_bad_options_are_one_clear_error():
    with pytest.raises(InvalidArgumentError, match="modality='nope'"):
        nbdebug.inspect_batch(np.zeros((4, 2)), modality="nope")
    with pytest.raises(InvalidArgumentError, match="mean=.*3 channel"):
        nbdebug.inspect_batch(np.zeros((4, 3, 8, 8)), mean=[0.5, 0.5])
    with pytest.raises(InvalidArgumentError, match="tokenizer=int"):
        nbdebug.inspect_batch(_enc()[0], tokenizer=3)
    with pytest.raises(InvalidArgumentError, match="label='nope'"):
        import pandas as pd

        nbdebug.inspect_batch(pd.DataFrame({"a": [1.0, 2.0]}), label="nope")


# -- the report --------------------------------------------------------------------------------------------
def test_report_is_data_first():
    kw = planted.CASES["labels_padded_with_pad_id"][1]()
    r = nbdebug.inspect_batch(**kw)
    data = json.loads(json.dumps(r.to_dict()))
    assert data["ok"] is False and data["findings"][0]["kind"] == "labels_padded_with_pad_id"
    df = r.to_pandas()
    assert list(df["kind"]) == list(r.kinds) and "evidence.positions" in df.columns
    assert repr(r).count("\n") == 0 and "labels_padded_with_pad_id" in repr(r)
    clean = nbdebug.inspect_batch(**planted.CASES["clean_chat_answer_only"][1]())
    assert clean.to_pandas().empty and "kind" in clean.to_pandas().columns


def test_text_rows_are_decoded_bounded_with_trained_and_masked_apart():
    r = nbdebug.inspect_batch(**planted.CASES["clean_chat_answer_only"][1](), show=3)
    assert len(r.token_rows) == 3
    row = r.token_rows[0]
    states = {s for _, s in row.tokens}
    assert {"trained", "masked"} <= states
    assert any(t == "<|im_start|>" for t, _ in row.tokens)  # special tokens visible
    text = str(r)
    assert "[" in text and "<|im_start|>" in text
    html = r._repr_html_()
    assert "<mark>" in html and "&lt;|im_start|&gt;" in html and "<|im_start|>" not in html.replace("&lt;", "")
    long_ids = np.tile(np.arange(3, 500), 3)[None].repeat(2, 0)
    r = nbdebug.inspect_batch({"input_ids": long_ids}, tokenizer=word_tokenizer())
    assert len(r.token_rows[0].tokens) <= 48 + 16 + 1 and any(s == "gap" for _, s in r.token_rows[0].tokens)


def test_image_report_has_a_picture_and_channel_stats():
    from matplotlib.figure import Figure

    r = nbdebug.inspect_batch(**planted.CASES["clean_digits_normalized"][1]())
    bundle = r._repr_mimebundle_()
    import base64

    assert base64.b64decode(bundle["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"
    assert 'src="data:image/png;base64,' in bundle["text/html"]
    assert isinstance(r.plot(), Figure)
    assert r.grid.dtype == np.uint8 and r.grid.shape[-1] == 1 and len(r.grid_labels) == len(r.grid)
    assert r.channels[0].name == "gray" and len(r.label_counts) == 10
    text = nbdebug.inspect_batch(**planted.CASES["clean_chat_answer_only"][1]())
    assert "image/png" not in text._repr_mimebundle_()
    with pytest.raises(TypeError, match="no images"):
        text.plot()


def test_compare_splits_counts_exact_and_near_copies():
    kw = planted.CASES["split_overlap"][1]()
    r = nbdebug.compare_splits(kw["batch"], kw["other"])
    assert r.overlap.exact == 20 and r.overlap.val_rows == 189 and r.kinds == ("split_overlap",)
    near = planted.CASES["split_near_duplicates"][1]()
    r = nbdebug.compare_splits(near["batch"], near["other"], tokenizer=near["tokenizer"])
    assert r.overlap.near == 5 and r.overlap.exact == 0
    with pytest.raises(InvalidArgumentError, match="different kinds"):
        nbdebug.compare_splits(kw["batch"], near["batch"])


# -- the magic ---------------------------------------------------------------------------------------------
def test_magic_returns_and_binds_the_report(ip):
    from IPython.core.error import UsageError
    from IPython.utils.capture import capture_output

    kw = planted.CASES["labels_padded_with_pad_id"][1]()
    ip.user_ns.update(b=kw["batch"], tok=kw["tokenizer"])
    r = ip.run_line_magic("inspect_batch", "{'input_ids': b['input_ids'], 'labels': b['labels']} --tokenizer tok -o rep")
    assert r.kinds == ("labels_padded_with_pad_id",) and ip.user_ns["rep"] is r
    data, _ = ip.display_formatter.format(r)
    assert "labels_padded_with_pad_id" in data["text/html"]
    for line, words in [("nope_name", "could not evaluate"), ("b --tokenizer 3", "tokenizer=int"),
                        ("b -n 0", "-n must be"), ("", "name the batch"), ("b --mean x", "--mean 'x'")]:
        with pytest.raises(UsageError, match=words):
            ip.run_line_magic("inspect_batch", line)
    with pytest.raises(UsageError, match="was given str.*expected"):
        ip.run_line_magic("inspect_batch", "'text'")
    with capture_output() as cap:
        ip.run_cell("%inspect_batch 'text'")
    assert "Traceback" not in cap.stdout + cap.stderr  # one line, no traceback


def test_batch_findings_for_another_report():
    from nbdebug.core.data import batch_findings

    kw = planted.CASES["raw_pixels"][1]()
    assert [f.kind for f in batch_findings(kw["batch"])] == ["raw_pixels"]
    assert batch_findings(object()) == ()  # a batch it cannot read: no finding, no error
    clean = planted.CASES["clean_text_bpe_pad_is_eos"][1]()
    assert batch_findings(clean["batch"], tokenizer=clean["tokenizer"]) == ()  # info remarks left out


def test_constant_column_in_a_mini_batch_is_a_remark_not_a_warning():
    x = np.random.default_rng(0).normal(size=(32, 5))
    onehot = np.zeros((32, 3))
    onehot[:, 0] = 1  # a rare category absent from these 32 rows
    r = nbdebug.inspect_batch((np.hstack([x, onehot]), np.arange(32) % 2))
    assert r.ok and r.finding("constant_columns").severity == "info"


def test_hf_causal_lm_collator_with_pad_equal_to_eos_is_caught():
    """DataCollatorForLanguageModeling(mlm=False) sets every pad-id label to -100; with pad == eos that is the EOS."""
    from torch.utils.data import DataLoader
    from transformers import DataCollatorForLanguageModeling

    from tests.data.batch.corpus import bpe_tokenizer

    tok = bpe_tokenizer()
    feats = [tok(t + tok.eos_token) for t in planted.sentences()[100:124]]
    loader = DataLoader(feats, batch_size=8, collate_fn=DataCollatorForLanguageModeling(tok, mlm=False))
    assert "eos_masked_as_pad" in nbdebug.inspect_batch(loader, tokenizer=tok).kinds
    fine = DataLoader([word_tokenizer()(t) for t in planted.sentences()[100:124]], batch_size=8,
                      collate_fn=DataCollatorForLanguageModeling(word_tokenizer(), mlm=False))
    assert nbdebug.inspect_batch(fine, tokenizer=word_tokenizer()).ok


def test_the_tokenizers_own_chat_template_gives_the_answer_marker():
    tok = word_tokenizer()
    # a template whose answer turn opens with a marker no common template uses: "<|im_start|>model output"
    tok.chat_template = ("{% for m in messages %}<|im_start|>{{ 'model output' if m['role'] == 'assistant' else "
                         "m['role'] }} {{ m['content'] }} <|im_end|> {% endfor %}"
                         "{% if add_generation_prompt %}<|im_start|>model output {% endif %}")
    try:
        s = list(planted.sentences()[10:20])
        convs = [[{"role": "user", "content": s[i]}, {"role": "assistant", "content": s[i + 1]}] for i in range(0, 10, 2)]
        enc = tok([tok.apply_chat_template(c, tokenize=False) for c in convs], padding=True, return_tensors="pt",
                  add_special_tokens=False)
        enc["labels"] = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
        r = nbdebug.inspect_batch(enc, tokenizer=tok)
        assert "loss_on_prompt" in r.kinds
        tok.chat_template = None  # without the template, no marker is known: nothing is claimed
        assert "loss_on_prompt" not in nbdebug.inspect_batch(enc, tokenizer=tok).kinds
        # rows ending in the template's end of turn (<|im_end|>) are not missing their EOS
        assert "missing_eos" not in r.kinds and "rows_truncated" not in r.kinds
    finally:
        tok.chat_template = None


# -- looking changes nothing: the user's random state; few repeats are a remark -----------------------------------
def test_inspecting_a_loader_keeps_the_users_next_epoch():
    import random

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.rand(40, 3), torch.arange(40) % 2), batch_size=8, shuffle=True)

    def next_epoch(look: bool) -> tuple[list[int], float, float, float]:
        torch.manual_seed(0), random.seed(0), np.random.seed(0)
        if look:
            nbdebug.inspect_batch(loader, batches=2)
        order = [int(i) for _, y in loader for i in y]  # the labels in the order the loader gives them
        return order + [int(i) for _, y in loader for i in y], torch.rand(1).item(), random.random(), np.random.rand()

    assert next_epoch(look=True) == next_epoch(look=False)


def test_iris_has_no_warning_and_planted_repeats_do():
    import pandas as pd
    from sklearn.datasets import load_iris

    iris = load_iris(as_frame=True).frame
    report = nbdebug.inspect_batch(iris, label="target")
    assert [f.kind for f in report.findings if f.severity is not Severity.INFO] == [], report.findings
    dup = report.finding("duplicate_rows")
    assert dup is not None and dup.severity is Severity.INFO and "1 row(s)" in dup.message  # iris repeats one row

    planted_rows = pd.concat([iris, iris.sample(15, random_state=0)], ignore_index=True)  # 15 of 165: 9 %
    dup = nbdebug.inspect_batch(planted_rows, label="target").finding("duplicate_rows")
    assert dup is not None and dup.severity is Severity.WARNING, dup


def test_labels_that_are_not_one_per_row_are_said_and_never_crash():
    # several regression targets a row (sklearn's linnerud has 3), a segmentation mask per image, and token targets
    # flattened beside a (T, B) batch: torch's reshape/squeeze raised a bare ValueError on each
    import torch

    for batch, per_row in (((torch.randn(20, 10), torch.randn(20, 3)), 3),
                           ((torch.randn(8, 3, 16, 16), torch.randint(0, 3, (8, 16, 16))), 256),
                           ((torch.randint(0, 50, (35, 20)), torch.randint(0, 50, (700,))), 20)):
        report = nbdebug.inspect_batch(batch)
        assert f"{per_row} per row" in str(report) and "label checks read one label per row" in str(report)
    with pytest.raises(InvalidArgumentError, match=r"labels of shape \(7,\) for a batch of 20 rows"):
        nbdebug.inspect_batch((torch.randn(20, 10), torch.randn(7)))
