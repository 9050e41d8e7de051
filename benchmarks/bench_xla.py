"""Benchmarks for nbdebug's XLA area, measured side by side in one run (ratios, no absolute claims).

1. parse_report vs torch_xla's own ``metrics_compare_utils.parse_metrics_report`` (when torch_xla is installed)
   and vs a one-regex baseline: speed, and how many time values torch_xla's parser gets wrong by > 1 %.
2. ``watch()`` overhead on a real XLA-on-CPU training loop (when torch_xla is installed).
3. ``compile_check`` vs a bare ``torch._dynamo.explain`` of the same function.

Run: ``python benchmarks/bench_xla.py`` (main venv) or with ``.venv-xla`` for parts 1-2 against torch_xla.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "xla"


def _best(fn, repeat=5, number=20):
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t) / number)
    return best


def bench_parse() -> None:
    from nbdebug.core.xla._units import TIME_RE, parse_time_ns
    from nbdebug.xla import parse_report

    texts = [p.read_text() for p in sorted(DATA.glob("*.txt")) if "debug" not in p.name]
    naive = re.compile(r"^(Metric|Counter): (\S+)", re.M)
    t_ours = _best(lambda: [parse_report(t) for t in texts])
    t_naive = _best(lambda: [naive.findall(t) for t in texts])
    print(f"parse_report on {len(texts)} real reports: {t_ours * 1e3:.2f} ms; "
          f"ratio to a bare header regex: {t_ours / t_naive:.1f}x")
    try:
        from torch_xla.debug import metrics_compare_utils as mcu
    except Exception:
        print("torch_xla not installed: skipping the comparison with metrics_compare_utils")
        return
    one = (DATA / "xla29_item_and_print.txt").read_text()
    t_tx = _best(lambda: mcu.parse_metrics_report(one))
    t_us = _best(lambda: parse_report(one))
    print(f"one 2.9 report: nbdebug {t_us * 1e3:.2f} ms vs torch_xla parse_metrics_report {t_tx * 1e3:.2f} ms "
          f"(ratio {t_us / t_tx:.2f}x)")
    time_token = re.compile(r"(?<![\w.])(?:\d+d)?(?:\d+h)?(?:\d+m(?!s))?(?:\d+s)?(?:\d+ms)?\d+\.\d{3}us")
    tokens = {tok for t in texts for tok in time_token.findall(t) if TIME_RE.match(tok)}
    wrong = worst = 0.0
    for tok in tokens:
        exact = parse_time_ns(tok) / 1e9
        naive_value = mcu._metric_str_to_number(tok)[0] if hasattr(mcu, "_metric_str_to_number") else None
        if naive_value is None or exact == 0:
            continue
        err = abs(naive_value - exact) / exact
        worst = max(worst, err)
        wrong += err > 0.01
    print(f"time strings in the saved reports: {len(tokens)}; torch_xla's parser off by >1% on {int(wrong)} "
          f"({wrong / max(1, len(tokens)):.0%}), worst {worst:.1%}; nbdebug exact (re-encodes byte for byte)")


def bench_watch() -> None:
    try:
        import torch_xla  # noqa: F401
    except Exception:
        print("torch_xla not installed: skipping watch() overhead")
        return
    import torch

    from nbdebug.xla import watch

    dev = torch_xla.device()
    model = torch.nn.Linear(64, 64).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def loop(n=30):
        for _ in range(n):
            model(torch.randn(16, 64, device=dev)).sum().backward()
            opt.step()
            opt.zero_grad()
            torch_xla.sync()

    loop(3)  # warm-up compiles

    def watched():
        with watch(debug=False):
            loop()

    t_plain = t_watch = float("inf")
    for _ in range(5):  # interleaved: the machine's load drifts between runs
        t_plain = min(t_plain, _best(loop, repeat=1, number=1))
        t_watch = min(t_watch, _best(watched, repeat=1, number=1))
    print(f"30-step XLA-on-CPU loop: plain {t_plain * 1e3:.0f} ms, under watch() {t_watch * 1e3:.0f} ms "
          f"(ratio {t_watch / t_plain:.2f}x)")


def bench_compile_check() -> None:
    import torch
    import torch._dynamo

    import nbdebug

    def f(x):
        y = x.sin()
        if y.sum().item() > 0:
            y = y + 1
        return y.cos()

    x = torch.randn(64)
    t_explain = _best(lambda: torch._dynamo.explain(f)(x), repeat=3, number=3)
    t_check = _best(lambda: nbdebug.compile_check(f, x), repeat=3, number=3)
    print(f"compile_check vs torch._dynamo.explain on a function with one graph break: ratio {t_check / t_explain:.2f}x")


if __name__ == "__main__":
    bench_parse()
    bench_watch()
    bench_compile_check()
