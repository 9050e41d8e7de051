"""Names of the internal playbooks some knowledge was first gathered from.

Users do not have these files, so they are never shown: ``Diagnosis`` keeps only http(s) sources.  The
cuda, autograd, data and io entries no longer use them; delete this module once dist, compile and xla do not
import it either.
"""

SEED_GPU = "seed: gpu-tpu-common-errors.md"
SEED_RECIPES = "seed: debugging-recipes.md"
SEED_TROUBLE = "seed: pytorch-troubleshooting.md"
SEED_DIST = "seed: debug-distributed.md"
SEED_TRAINING = "seed: training-failures-troubleshooting.md"
