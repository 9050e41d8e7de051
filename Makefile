# nbdebug: `make lab` opens JupyterLab on the tutorials; `make test` runs everything.
PYTHON ?= python3
VENV := .venv
VENV_XLA := .venv-xla
PY := $(VENV)/bin/python
PY_XLA := $(VENV_XLA)/bin/python
# The CPU build of torch; a bare `torch` would pull a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0
XLA_SPEC ?= torch==2.9.1 torch-xla==2.9.0
LAB_PORT ?= 8888

.PHONY: lab test test-unit test-xla test-binder lint typecheck bench screenshots browser-deps clean

$(VENV)/.stamp: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[all]" --group dev "$(TORCH_SPEC)"  # the pin keeps pip from swapping torch for a CUDA build
	touch $@

$(VENV_XLA)/.stamp: pyproject.toml
	test -x $(PY_XLA) || $(PYTHON) -m venv $(VENV_XLA)
	$(PY_XLA) -m pip install -q --upgrade pip
	$(PY_XLA) -m pip install -q $(XLA_SPEC)
	$(PY_XLA) -m pip install -q numpy pandas ipython pytest pytest-timeout
	$(PY_XLA) -m pip install -q --no-deps -e .
	touch $@

browser-deps:
	bash scripts/ensure-chromium.sh

lab: $(VENV)/.stamp
	$(VENV)/bin/jupyter lab --ServerApp.root_dir=notebooks --port=$(LAB_PORT) notebooks/00_tour.ipynb $(if $(filter 0,$(shell id -u)),--allow-root)

lint: $(VENV)/.stamp
	$(VENV)/bin/ruff check nbdebug tests benchmarks

typecheck: $(VENV)/.stamp
	$(VENV)/bin/mypy

test-unit: $(VENV)/.stamp browser-deps
	$(PY) -m pytest -q -p no:cacheprovider tests --ignore=tests/xla

test-xla: $(VENV_XLA)/.stamp
	PJRT_DEVICE=CPU $(PY_XLA) -m pytest -q -p no:cacheprovider tests/xla

test: lint typecheck test-unit test-xla test-binder

# Binder's environment, built fresh from binder/ alone (requirements.txt, then postBuild from the repository's root,
# as repo2docker does), and every tutorial run in it. pip's cache keeps a rebuild to a few minutes.
# One recipe, one shell: a private folder per run, removed however the run ends.
test-binder: export PIP_RETRIES = 1
test-binder: $(VENV)/.stamp
	set -e; env_dir=$$(mktemp -d "$${TMPDIR:-/tmp}/nbdebug-binder-XXXXXX"); trap 'rm -rf "$$env_dir"' EXIT; \
	$(PYTHON) -m venv "$$env_dir"; \
	PATH="$$env_dir/bin:$$PATH" VIRTUAL_ENV="$$env_dir" pip install -q -r binder/requirements.txt; \
	PATH="$$env_dir/bin:$$PATH" VIRTUAL_ENV="$$env_dir" bash binder/postBuild; \
	NBDEBUG_BINDER_PYTHON="$$env_dir/bin/python" $(PY) -m pytest -q -p no:cacheprovider -m binder tests/test_binder.py

# The README's pictures: the browser tests, writing their screenshots into docs/ (a plain `make test` does not),
# and every tutorial in notebooks/, live and reopened untrusted, in Light and Dark, into out/tutorials/ (not tracked).
screenshots: $(VENV)/.stamp browser-deps
	NBDEBUG_SCREENSHOTS=1 $(PY) -m pytest -q -p no:cacheprovider -m browser tests/browser

bench: $(VENV)/.stamp $(VENV_XLA)/.stamp
	$(PY) benchmarks/run_all.py
	@echo "== bench_xla.py (torch_xla on CPU)"
	PJRT_DEVICE=CPU PYTHONPATH=$(CURDIR) $(PY_XLA) benchmarks/bench_xla.py

clean:
	rm -rf $(VENV) $(VENV_XLA) .pytest_cache .mypy_cache .ruff_cache
