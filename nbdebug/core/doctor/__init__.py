"""``doctor``: Karpathy's recipe and common training checklists in one call, on a deep copy of the model.

The checks, in order: frozen parameters and the input scale; targets in the output's class range; probabilities
or an activation (ReLU/sigmoid) fed to a loss that expects logits; the loss at init against ``-log(1/C)``;
NaN/Inf in the forward and backward pass (with the module, by ``nan_sentinel``, or the parent's code between two
modules); parameters that get no gradient; gradient flow per layer (a decay with depth); whether the output
depends on the input; ReLU units that never fire; overfitting one repeated batch (with a ``GradMonitor`` for
exploding norms; its verdict follows the curve: rising or oscillating is a learning rate too high); a zero-input
baseline; labels against inputs (given a DataLoader, a second batch after fitting the first; with one batch, a copy
trained on half of it predicts the other half); the time spent waiting for data; and two seeded runs
(reproducibility).  A finding caused by another says so.

It takes ``(inputs, targets)`` and a loss, a Hugging Face dict batch (``loss_fn=None``), a LightningModule, or a
DataLoader, and answers within ``time_budget`` seconds (60 by default): the overfit run stops once the batch is
fitted or at its share of the budget.

Nothing of the caller's changes: the model is deep-copied, the optimizer is re-created on the copy from its
class and hyper-parameters, and the Python, numpy and torch (CPU and CUDA) RNG states are restored.

What each finding kind means, its fixes and sources, and the thresholds: ``nbdebug.core.knowledge.training``.
The rooms: ``_inputs`` (what was passed, and one adapter for a plain loss, a Hugging Face output and a Lightning
``training_step``), ``_loss_probe`` (what each torch loss is given, wherever it is called), ``_session`` (what one
call knows), ``_init_checks``, ``_nonfinite_site``, ``_train_checks``, ``_side_runs``, ``_experiments``,
``_generalise`` (labels against inputs), ``_run`` (the order and the report), ``_report``, ``_repro``.
"""

from nbdebug.core.doctor._report import DoctorReport
from nbdebug.core.doctor._repro import ReproReport, check_reproducible, set_reproducible
from nbdebug.core.doctor._run import doctor

__all__ = ["doctor", "DoctorReport", "set_reproducible", "check_reproducible", "ReproReport"]
