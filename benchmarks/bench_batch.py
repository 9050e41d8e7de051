"""Time ``inspect_batch`` on a 64 x 2048 token batch (target: at most 0.5 s), beside decoding the same batch.

The batch is real text (the descriptions scikit-learn ships) tokenized by a byte-level BPE tokenizer trained
offline (GPT-2 style: pad == eos), rows of 300 to 2048 tokens ending in EOS, right-padded to 2048, with an
attention mask and causal-LM labels (padding masked with -100); a tiny GPT-2 built from its config gives the
embedding size.  Figures: the median of ROUNDS runs; ``batch_decode`` of the same batch is timed in the same
rounds, for scale.

    python benchmarks/bench_batch.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGET_S = 0.5


def batch(rows: int = 64, width: int = 2048):
    import numpy as np
    import torch

    from tests.data.batch.corpus import bpe_tokenizer, sentences

    tok = bpe_tokenizer()
    stream = [i for s in sentences() for i in tok(s + " ")["input_ids"]]
    rng = np.random.default_rng(0)
    ids = torch.full((rows, width), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros((rows, width), dtype=torch.long)
    for r in range(rows):
        n = int(rng.integers(300, width))
        start = int(rng.integers(0, len(stream) - n))
        ids[r, : n - 1] = torch.tensor(stream[start : start + n - 1])
        ids[r, n - 1] = tok.eos_token_id
        mask[r, :n] = 1
    labels = ids.clone()
    labels[mask == 0] = -100
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}, tok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    from transformers import GPT2Config, GPT2LMHeadModel

    import nbdebug

    b, tok = batch()
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=2048, n_embd=16, n_layer=1, n_head=2,
                                       bos_token_id=0, eos_token_id=0))
    report = nbdebug.inspect_batch(b, tokenizer=tok, model=model)  # warm: imports, caches
    assert report.ok, report.kinds
    inspect_s, decode_s = [], []
    for _ in range(args.rounds):
        t = time.perf_counter()
        nbdebug.inspect_batch(b, tokenizer=tok, model=model)
        inspect_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        tok.batch_decode(b["input_ids"])
        decode_s.append(time.perf_counter() - t)
    mi, md = statistics.median(inspect_s), statistics.median(decode_s)
    print(f"64 x 2048 token batch: batch_decode {md * 1e3:.1f} ms, inspect_batch {mi * 1e3:.1f} ms "
          f"({mi / md:.2f}x decoding it)")
    print(f"inspect_batch 64 x 2048: {mi:.3f} s (target <= {TARGET_S} s) {'PASS' if mi <= TARGET_S else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
