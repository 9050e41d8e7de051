"""``predict_memory`` speed: a 1-billion-parameter Llama-style config built on the meta device (no weights
allocated), and a ResNet-50 step, each predicted in a fresh child process.

    python benchmarks/bench_predict.py

Cases (AdamW, ``device="cuda"``: the allocator model included):
  llama1b   a TinyLlama-1.1B-shaped ``LlamaConfig`` (hidden 2048, 22 layers, 32 heads, 4 key/value heads, MLP 5632,
            vocabulary 32000), built under ``torch.device("meta")``, batch 4 x 512 tokens
  resnet50  ResNet-50 written out (25.6 M parameters, real weights), batch 32 of 224x224 images
Each figure is the wall time of the ``predict_memory`` call and the child's peak resident memory (its whole process:
Python, torch and transformers included).
Targets: llama1b <= 30 s and <= 2 GB peak RSS; resnet50 <= 5 s.  Exit status 0 whatever the verdict.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

TARGETS = {"llama1b": (30.0, 2 << 30), "resnet50": (5.0, None)}


def _llama1b() -> tuple[Any, Any, Any]:
    import torch
    import transformers

    config = transformers.LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                                      num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    ids = torch.randint(0, 32000, (4, 512))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}
    return model, batch, None


def _resnet50() -> tuple[Any, Any, Any]:
    import torch
    from test_predict_accuracy import Bottleneck, ResNet

    model = ResNet(Bottleneck, [3, 4, 6, 3], classes=1000)
    return model, (torch.randn(32, 3, 224, 224), torch.randint(0, 1000, (32,))), torch.nn.functional.cross_entropy


def child(case: str) -> None:
    import torch

    from nbdebug.core.memory._predict import predict_memory

    torch.set_num_threads(1)
    model, batch, loss_fn = {"llama1b": _llama1b, "resnet50": _resnet50}[case]()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    t0 = time.perf_counter()
    pred = predict_memory(model, batch, loss_fn, optimizer, device="cuda")
    seconds = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"seconds": seconds, "rss": rss, "peak": pred.peak_bytes, "total": pred.total_bytes,
                      "params": params}))


def main() -> None:
    from nbdebug._units import fmt_bytes

    for case, (max_s, max_rss) in TARGETS.items():
        out = subprocess.run([sys.executable, __file__, "--child", case], capture_output=True, text=True,
                             cwd=ROOT, timeout=900)
        line = next((x for x in reversed(out.stdout.splitlines()) if x.startswith("{")), None)
        if line is None:
            print(f"{case}: the child failed (exit {out.returncode}): {out.stderr.strip()[-400:]}")
            continue
        r = json.loads(line)
        ok = r["seconds"] <= max_s and (max_rss is None or r["rss"] <= max_rss)
        rss_target = f", peak RSS {fmt_bytes(r['rss'])} (target <= {fmt_bytes(max_rss)})" if max_rss else ""
        print(f"{case} ({r['params'] / 1e6:.0f} M parameters, predicted peak {fmt_bytes(r['peak'])}): "
              f"{r['seconds']:.1f} s (target <= {max_s:.0f} s){rss_target} {'PASS' if ok else 'MISSED'}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
    else:
        main()
