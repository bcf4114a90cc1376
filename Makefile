# Two commands on a fresh machine (README): `make demo` runs the main job, `make test` the whole
# suite. Each creates .venv and installs what it needs by itself.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# ors_lab is pure Python: no compiler, no system package.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/ors-lab demo

# lint-imports checks the layers drawn in the README (contracts in pyproject.toml, one in tests/contracts.py).
lint: $(STAMP)
	$(BIN)/ruff check ors_lab tests bench
	$(BIN)/ruff format --check ors_lab
	$(BIN)/mypy
	PYTHONPATH=. $(BIN)/lint-imports --no-cache

# Jupyter and IPython state stays out of $HOME; the kernel runs from this venv.
test: $(STAMP) lint
	export NBTMP=$$(mktemp -d) && trap 'rm -rf "$$NBTMP"' EXIT && \
	export IPYTHONDIR=$$NBTMP/ipython JUPYTER_CONFIG_DIR=$$NBTMP/cfg JUPYTER_DATA_DIR=$$NBTMP/data \
	       JUPYTER_RUNTIME_DIR=$$NBTMP/rt OPENREWARD_DISABLE_UPDATE_CHECK=1 && \
	$(BIN)/python -m pytest -p no:cacheprovider --nbval-lax --nbval-current-env --durations=10 tests notebooks

bench: $(STAMP)
	$(BIN)/python bench/client.py

clean:
	rm -rf $(VENV)
