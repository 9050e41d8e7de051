"""Whether ReLU units silent at init matter to this training: evidence, not a count.

Many healthy nets have ReLU units that no sample of one batch fires at init (a squeeze layer of a few channels, a
final conv before global pooling, units that only some inputs reach): a count of them is no fault.  After the
overfit run the finding is settled by what was measured:

- the batch was learned: the units cost this training nothing measurable, so the finding is an info that says so;
- the batch was not learned: the fix the finding names is tried on a copy (the biases of the layers that feed the
  silent units set to 0, which is what "check the bias initialisation" means), trained as long as the user's run.
  When that learns the batch better the finding keeps its severity with the before and after numbers; when it
  does not, partly silent layers are not why the batch is not learned (an info), while a layer silent for every
  unit keeps its verdict (nothing of the input passes it, whatever else is wrong).
"""

from __future__ import annotations

from typing import Any

from nbdebug.core._findings import Fix, Severity
from nbdebug.core.doctor._session import Session, fixes_for, replaced

__all__ = ["settle"]


def _feeding(work: Any, relus: list[str]) -> list[str]:
    """The layer with a bias that runs just before each named ReLU, in the order the modules are registered."""
    names = [n for n, m in work.named_modules() if not list(m.children())]
    mods = dict(work.named_modules())
    out: list[str] = []
    for r in relus:
        if r not in names:
            continue
        before = names[: names.index(r)]
        layer = next((n for n in reversed(before) if getattr(mods[n], "bias", None) is not None
                      and getattr(mods[n], "weight", None) is not None and mods[n].weight.dim() >= 2), None)
        if layer is not None and layer not in out:
            out.append(layer)
    return out


def settle(s: Session) -> None:
    from nbdebug.core.doctor._experiments import trial

    at = next((i for i, f in enumerate(s.findings) if f.kind == "dead_activations" and f.severity != "info"
               and " at init " in f.message), None)
    if at is None or not s.losses:
        return
    f = s.findings[at]
    learned = not any(g.kind == "cannot_overfit" and g.severity != "info" for g in s.findings)
    if learned:
        s.findings[at] = replaced(f, message=f"{f.message}; the batch was learned all the same (the loss went "
                                  f"{s.losses[0]:.4g} -> {min(s.losses):.4g}), so they cost this training nothing "
                                  "measurable (many healthy nets have units that one batch never fires)",
                                  severity=Severity.INFO)
        return
    if "follows from the finding above" in f.message:
        return  # a symptom of a cause already measured: that cause's fix comes first
    layers = _feeding(s.user_model, [str(w).split(" = ")[0].removeprefix(f"{s.options.name}.") for w in f.where])
    if not layers:
        return

    def zero_biases(s: Session) -> tuple[Any, Any, Any, Any]:
        import torch

        work, opt = s.fresh()
        with torch.no_grad():
            for n in layers:
                work.get_submodule(n).bias.zero_()
        return work, opt, None, s.loss.inputs

    named = [f"{s.options.name}.{n}" for n in layers]
    change = f"the biases of {', '.join(named[:3])}{' ...' if len(named) > 3 else ''} set to 0"
    code = "\n".join(f"with torch.no_grad(): {n}.bias.zero_()" for n in named[:3])
    ex = trial(s, "dead_activations", change, zero_biases, code)
    if ex is None:
        return
    f = s.findings[at]
    if ex.restores:
        first, *rest = fixes_for("dead_activations_at_init")
        s.findings[at] = replaced(f, message=f"{f.message}. Tried on a copy: {ex.said()}",
                                  evidence={**dict(f.evidence), **ex.evidence()},
                                  fixes=(Fix(f"{first.title} (measured on a copy)", code), *rest))
    elif f.severity != Severity.ERROR:
        s.findings[at] = replaced(f, message=f"{f.message}. Tried on a copy: {ex.said()}, so they are not why the "
                                  "batch is not learned", severity=Severity.INFO,
                                  evidence={**dict(f.evidence), **ex.evidence()})
        s.not_causes.add("dead_activations")
