"""``doctor``: Karpathy's recipe and common training checklists in one call, on a deep copy of the model.

The checks, in order: targets in the output's class range; probabilities fed to a loss that expects logits; the
loss at init against ``-log(1/C)``; NaN/Inf in the forward and backward pass (with the module, by
``nan_sentinel``); parameters that get no gradient; gradient flow per layer (vanishing); ReLU units that never
fire; overfitting one repeated batch (with a ``GradMonitor`` for exploding norms); a zero-input baseline; two
seeded runs (reproducibility); and, given a DataLoader, the time spent waiting for data.

Nothing of the caller's changes: the model is deep-copied, the optimizer is re-created on the copy from its
class and hyper-parameters, and the Python, numpy and torch (CPU and CUDA) RNG states are restored.

What each finding kind means, its fixes and sources, and the thresholds: ``nbdebug.core.knowledge.training``.
"""

from nbdebug.core.doctor._report import DoctorReport
from nbdebug.core.doctor._repro import ReproReport, check_reproducible, set_reproducible
from nbdebug.core.doctor._run import doctor

__all__ = ["doctor", "DoctorReport", "set_reproducible", "check_reproducible", "ReproReport"]
