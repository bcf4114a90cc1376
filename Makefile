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

# The recorder's hot path is a C extension (setup.py): it needs a C compiler and Python's headers.
# A machine without them gets Debian's (gcc; python3-dev, for a Debian Python).
$(STAMP): pyproject.toml setup.py ors_lab/recording/_rows.c | $(BIN)/python
	@command -v gcc >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq gcc; }
	@test -f "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" || \
		{ apt-get update -qq && apt-get install -y -qq python3-dev; }
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/ors-lab demo

lint: $(STAMP)
	$(BIN)/ruff check ors_lab tests bench
	$(BIN)/ruff format --check ors_lab
	$(BIN)/mypy

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
