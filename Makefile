# Two commands on a fresh machine (README): `make demo` runs the main job, `make test` the whole
# suite. Each creates .venv and installs what it needs by itself.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
BASE := $(VENV)/.installed-base
STAMP := $(VENV)/.installed
# The browser tests drive Debian's Chromium through Playwright (never `playwright install`).
CHROMIUM := /usr/bin/chromium
# Screenshots of the browser tests: a test artefact, kept after the run, ignored by git.
ORS_LAB_SCREENSHOTS ?= $(CURDIR)/build/screenshots

.PHONY: demo test check lint bench clean

# Python writes its bytecode here even where the environment says not to: the tests start hundreds of
# Python processes (servers, kernels, the CLI, child pytest runs), and each would compile ors_lab and
# rewrite the tests' asserts again (a third of a second of CPU each).
unexport PYTHONDONTWRITEBYTECODE

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# ors_lab is pure Python: no compiler, no system package. The demo needs ors_lab alone ...
$(BASE): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $(BASE)

# ... the tests also need the test extras (pytest, nbval, JupyterLab, Playwright, the linters).
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(BASE) $(STAMP)

# Debian's chromium, installed with apt-get only when it is missing (as root, else through sudo).
$(CHROMIUM):
	@command -v apt-get >/dev/null || { echo "make test: the browser tests need Debian's chromium at $(CHROMIUM)," \
	    "and there is no apt-get here to install it: install chromium and fonts-dejavu-core, then run make test again" >&2; \
	    exit 1; }
	@if [ "$$(id -u)" = 0 ]; then sudo=; elif command -v sudo >/dev/null; then sudo=sudo; else \
	    echo "make test: the browser tests need Debian's chromium at $(CHROMIUM); run make test as root, or" \
	        "with sudo installed, or first: apt-get install chromium fonts-dejavu-core" >&2; \
	    exit 1; fi; \
	echo "make test: installing Debian's chromium and fonts-dejavu-core for the browser tests (apt-get)"; \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-dejavu-core >/dev/null
	@test -x $(CHROMIUM) || { echo "make test: apt-get ran but $(CHROMIUM) is still missing" >&2; exit 1; }

demo: $(BASE)
	$(BIN)/ors-lab demo

# lint-imports checks the layers drawn in docs/architecture.md (contracts in pyproject.toml, one in tests/contracts.py).
LINT = $(BIN)/ruff check ors_lab tests bench && $(BIN)/ruff format --check ors_lab && $(BIN)/mypy && \
    PYTHONPATH=. $(BIN)/lint-imports --no-cache

lint: $(STAMP)
	$(LINT)

# Jupyter, IPython and Chromium state stays out of $HOME; the kernel runs from this venv. The
# notebooks run under strict nbval: their stored outputs are compared, once sanitized. `make lint`
# runs beside the parallel pass (its output follows it, in build/lint.log); either failing fails the run.
test: $(STAMP) $(CHROMIUM)
	@mkdir -p build
	export NBTMP=$$(mktemp -d) && trap 'rm -rf "$$NBTMP"' EXIT && \
	export IPYTHONDIR=$$NBTMP/ipython JUPYTER_CONFIG_DIR=$$NBTMP/cfg JUPYTER_DATA_DIR=$$NBTMP/data \
	       JUPYTER_RUNTIME_DIR=$$NBTMP/rt XDG_CONFIG_HOME=$$NBTMP/xdg-config XDG_CACHE_HOME=$$NBTMP/xdg-cache \
	       OPENREWARD_DISABLE_UPDATE_CHECK=1 ORS_LAB_SCREENSHOTS=$(ORS_LAB_SCREENSHOTS) && \
	{ ( $(LINT) ) > build/lint.log 2>&1 & lint=$$!; } && \
	{ $(BIN)/python -m pytest $(PYTEST_OPTIONS) -n $(WORKERS) -m "not serial" --durations=10 --junitxml=build/junit-parallel.xml \
	      tests notebooks; parallel=$$?; } ; \
	wait $$lint; linted=$$?; echo "make lint (beside the tests):"; cat build/lint.log; \
	test $$parallel = 0 && test $$linted = 0 && \
	$(BIN)/python -m pytest -p no:cacheprovider -m serial --durations=5 --junitxml=build/junit-serial.xml tests

# The inner loop, about 2 minutes: lint, types, and the tests that start no browser, kernel or Ray cluster
# and took at most a second when last timed (`--quick`, tests/conftest.py), on three workers. The timings:
# `$(BIN)/python -m tests.durations build/junit-*.xml` after a `make test`.
check: $(STAMP) lint
	OPENREWARD_DISABLE_UPDATE_CHECK=1 $(BIN)/python -m pytest -p no:cacheprovider -n 3 -q --quick --durations=5 tests

# Two passes: WORKERS xdist workers (a file each, the longest first: tests/conftest.py), then the `serial` tests
# alone (the Ray clusters, wall-clock timing).
WORKERS ?= 4
PYTEST_OPTIONS := -p no:cacheprovider --nbval --nbval-current-env --nbval-sanitize-with notebooks/nbval_sanitize.cfg \
    --nbval-cell-timeout=300

bench: $(STAMP)
	$(BIN)/python bench/client.py

clean:
	rm -rf $(VENV) build
