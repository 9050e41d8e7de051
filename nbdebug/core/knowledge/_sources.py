"""Names of the playbooks the knowledge was first gathered from (shown to users as sources)."""

SEED_GPU = "seed: gpu-tpu-common-errors.md"
SEED_RECIPES = "seed: debugging-recipes.md"
SEED_TROUBLE = "seed: pytorch-troubleshooting.md"
SEED_DIST = "seed: debug-distributed.md"
SEED_TRAINING = "seed: training-failures-troubleshooting.md"
