"""The knowledge tables: one schema, unique slugs, every pattern compiles and lives in exactly one entry."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from nbdebug.core import knowledge
from nbdebug.core._findings import Finding, Fix, Severity

ENTRIES = knowledge.entries()


def test_every_domain_module_loads_and_slugs_are_unique():
    slugs = [e.slug for e in ENTRIES]
    assert len(slugs) == len(set(slugs))
    assert {e.domain for e in ENTRIES} <= set(knowledge.DOMAINS)
    assert len(ENTRIES) >= 29  # the explainer's categories at least


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.slug)
def test_entry_is_complete(entry):
    assert entry.title and entry.title == entry.title.strip()
    assert isinstance(entry.severity, Severity)
    assert all(isinstance(f, Fix) and f.title for f in entry.fixes)
    for pattern in entry.patterns:
        re.compile(pattern)
    for regex, _ in entry.facts:
        re.compile(regex)
    if entry.patterns:
        assert entry.contexts, f"{entry.slug} has patterns but no reader"
    if "rank_failure" in entry.contexts:
        assert entry.role in ("cause", "victim")


def test_a_message_pattern_lives_in_exactly_one_entry():
    counts = Counter(p for e in ENTRIES for p in set(e.patterns))
    shared = {p: [e.slug for e in ENTRIES if p in e.patterns] for p, n in counts.items() if n > 1}
    assert not shared, f"patterns in more than one entry: {shared}"


def test_context_and_domain_filters():
    explain = knowledge.entries("explain")
    assert explain and all("explain" in e.contexts and e.patterns for e in explain)
    cuda = knowledge.entries(domain="cuda")
    assert "cuda_oom" in {e.slug for e in cuda}
    with pytest.raises(ValueError, match="unknown context 'nope'"):
        knowledge.entries("nope")
    with pytest.raises(ValueError, match="unknown domain"):
        knowledge.entries(domain="nope")
    with pytest.raises(KeyError, match="no knowledge entry 'nope'"):
        knowledge.entry("nope")


def test_finding_takes_severity_title_and_fixes_from_its_entry():
    e = knowledge.entry("cuda_oom")
    f = knowledge.finding("cuda_oom", "ran out", where=("model.fc",), evidence={"bytes": 3})
    assert isinstance(f, Finding)
    assert (f.kind, f.severity, f.title, f.fixes, f.where) == ("cuda_oom", e.severity, e.title, e.fixes, ("model.fc",))
    assert f.to_dict()["evidence"] == {"bytes": 3}
    g = knowledge.finding("cuda_oom", "ran out", severity="info", fixes=["do this"])
    assert g.severity is Severity.INFO and g.fixes == (Fix("do this"),) and g.fix == "do this"


def test_thresholds_have_reasons_and_sources():
    for name, t in knowledge.thresholds().items():
        assert t.name == name and t.why and t.source, name


def test_warning_categories_are_marked_and_complete():
    """Issue 10: the warnings that are bugs are explain entries of severity warning, marked for the warnings hook."""
    marked = {e.slug for e in knowledge.entries("explain") if e.extra.get("warning") == "yes"}
    assert marked == {"loss_broadcast", "nonleaf_grad_access", "scheduler_order", "checkpoint_no_grad", "ddp_grad_strides",
                      "pipeline_no_device"}  # issue 23: transformers' pipeline left on the CPU
    for slug in marked:
        e = knowledge.entry(slug)
        assert e.severity == Severity.WARNING and e.keywords and e.patterns and e.first_step
        assert any(s.startswith("https://") for s in e.sources) and all(f.code for f in e.fixes[:1])


def test_scheduler_order_says_the_gradscaler_warning_is_harmless_first():
    """Review 10: PyTorch warns on the first scheduler step only, and GradScaler skipping its first step (inf
    gradients at scale 65536) triggers the warning with a correct loop: the first step must say so."""
    from nbdebug.core.explain import explain

    d = explain("UserWarning: Detected call of `lr_scheduler.step()` before `optimizer.step()`. In PyTorch 1.1.0 "
                "and later, you should call them in the opposite order: `optimizer.step()` before "
                "`lr_scheduler.step()`.")
    assert d.kind == "scheduler_order"
    first = d.first_step
    assert first.startswith("Under GradScaler / AMP") and "single warning at the start is harmless" in first
    assert "scaler.get_scale()" in first and "65536" in first and "step the optimizer first" in first
    assert "harmless" in d.summary and "only the first step" in d.summary


def test_every_pattern_that_matches_a_real_text_passes_its_keyword_gate():
    """The keywords gate an entry before its patterns run: a pattern whose words no keyword covers never fires.

    Checked on every real text of the corpora (bitsandbytes' ``cget_managed_ptr`` and a bare ``DistBackendError``
    were such patterns: right in the table, never reached).
    """
    from pathlib import Path

    from nbdebug.core.explain._explain import _compiled
    from nbdebug.core.explain._normalize import normalize

    data = Path(__file__).parent / "data"
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(data.glob("errors*/*.txt"))]
    assert len(texts) > 500
    missed = []
    for raw in texts:
        text = normalize(raw[-200_000:])
        low = text.lower()
        for c in _compiled():
            if c.entry.keywords and not any(k in low for k in c.entry.keywords):
                missed += [(c.entry.slug, p.pattern) for p in c.patterns if p.search(text)]
    assert not missed, missed


def _example(tree, alt: int) -> str:
    """A string the parsed regex matches: the ``alt``-th branch of each alternation, optional parts per ``alt``."""
    import re._constants as c  # the parser's opcodes (Python 3.11+)

    out = []
    for op, av in tree:
        if op is c.LITERAL:
            out.append(chr(av))
        elif op is c.NOT_LITERAL or op is c.ANY or op is c.CATEGORY:
            out.append("b" if av == ord("a") else "a")
        elif op is c.IN:
            first = av[0]
            if first[0] is c.LITERAL:
                out.append(chr(first[1]))
            elif first[0] is c.RANGE:
                out.append(chr(first[1][0]))
            elif first[0] is c.CATEGORY:
                out.append({c.CATEGORY_DIGIT: "1", c.CATEGORY_SPACE: " "}.get(first[1], "a"))
            else:
                out.append("a")
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
            low, high, sub = av
            out.append(_example(sub, alt) * (low or (1 if alt and high else 0)))
        elif op is c.SUBPATTERN or op is c.ATOMIC_GROUP:
            out.append(_example(av[-1], alt))
        elif op is c.BRANCH:
            out.append(_example(av[1][min(alt, len(av[1]) - 1)], alt))
    return "".join(out)


def test_every_pattern_passes_its_keyword_gate_on_a_text_it_matches():
    """A string built from each pattern (each alternative in turn) that the pattern matches holds one of its entry's
    keywords: a pattern whose words no keyword covers is never tried (xla_error's 'Computation requires more
    parameters', 'store_based_barrier_key', 'CUDA_ERROR_ILLEGAL_ADDRESS' were such patterns)."""
    import re._parser as parser

    unreachable = []
    for entry in ENTRIES:
        keywords = [k.lower() for k in entry.keywords]
        for pattern in entry.patterns if keywords else ():
            for alt in range(4):
                text = _example(parser.parse(pattern), alt)
                if re.search(pattern, text, re.S | re.M) and not any(k in text.lower() for k in keywords):
                    unreachable.append((entry.slug, pattern, text))
    assert not unreachable, unreachable
