"""Real tokenizers built offline for the batch inspector's tests, and real text to tokenize.

Hub downloads fail here, so the tokenizers are built with the ``tokenizers`` library over text a package ships:
the descriptions of scikit-learn's bundled datasets (``sklearn/datasets/descr/*.rst``).  ``word_tokenizer`` is a
WordLevel tokenizer over the vocabulary written below (BOS/EOS added by a template, a distinct pad token, chat
markers as special tokens); ``bpe_tokenizer`` is a byte-level BPE trained on the same text, GPT-2 style
(``<|endoftext|>`` is BOS, EOS and pad at once, nothing added).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

SPECIAL = ["<pad>", "<s>", "</s>", "<unk>", "<|im_start|>", "<|im_end|>"]


@functools.cache
def sentences() -> tuple[str, ...]:
    """Plain sentences from the descriptions of scikit-learn's datasets (real English, shipped with sklearn)."""
    import sklearn

    folder = Path(sklearn.__file__).parent / "datasets" / "descr"
    out = []
    for path in sorted(folder.glob("*.rst")):
        text = re.sub(r"[^A-Za-z0-9.,;:()'\- \n]", " ", path.read_text(encoding="utf-8"))
        for s in re.split(r"(?<=[.;:])\s+", text):
            s = " ".join(s.split())
            if 4 <= len(s.split()) <= 40 and "--" not in s and "==" not in s and not s.startswith((":", "..")):
                out.append(s)
    return tuple(dict.fromkeys(out))


@functools.cache
def word_tokenizer():
    """A WordLevel ``PreTrainedTokenizerFast``: <s> text </s>, pad <pad> (distinct from EOS), chat markers."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = sorted({w for s in sentences() for w in re.findall(r"\w+|[^\w\s]", s.lower())})
    vocab = {t: i for i, t in enumerate(SPECIAL + ["user", "assistant", "system"] + words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> $B </s>",
                                                       special_tokens=[("<s>", vocab["<s>"]), ("</s>", vocab["</s>"])])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    return fast


@functools.cache
def bpe_tokenizer():
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained on the same text, GPT-2 style: pad == eos == bos."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(sentences(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   unk_token="<|endoftext|>", additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    fast.pad_token = fast.eos_token
    return fast
