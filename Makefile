# Every target creates .venv from scratch when it is missing, so a fresh clone needs only Python 3.10+.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

.PHONY: demo test bench lint conformance clean docs-check

$(PY):
	$(PYTHON) -m venv $(VENV)

$(VENV)/.train-installed: $(PY) pyproject.toml
	$(PIP) install -q -e '.[train]'
	touch $@

$(VENV)/.test-installed: $(PY) pyproject.toml
	$(PIP) install -q -e '.[test]'
	touch $@

demo: $(VENV)/.train-installed
	# the tiny model is too small for BLAS threads to pay: one thread is faster on 2 cores
	OPENBLAS_NUM_THREADS=1 $(PY) -m anekit demo

test: $(VENV)/.test-installed
	$(PY) -m ruff check anekit tests benchmarks tools
	$(PY) -m ruff format --check anekit tests benchmarks tools
	$(PY) tools/docs_check.py
	$(PY) -m pytest -q

bench: $(VENV)/.test-installed
	@for f in benchmarks/*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

# coremltools' own MIL op tests through the reference backend (long; needs the coreml extra)
conformance: $(VENV)/.test-installed
	$(PY) -m pytest -p tools.coreml_conformance --pyargs coremltools.converters.mil.mil.ops.tests -q --tb=no -p no:cacheprovider -W ignore

# every generated number in README.md and docs/ against its data (a few seconds, no network)
docs-check: $(VENV)/.test-installed
	$(PY) tools/docs_check.py

lint: $(VENV)/.test-installed
	$(PY) -m ruff check anekit tests benchmarks tools
	$(PY) -m ruff format --check anekit tests benchmarks tools

clean:
	rm -rf $(VENV) build *.egg-info
