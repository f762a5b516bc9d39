VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install test lint bench validate test-integration fuzz

install:
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q -e '.[dev,plot]'

test:
	$(PY) -m pytest -q

lint:
	$(VENV)/bin/ruff check baige_plan tests benchmarks

bench:
	$(PY) benchmarks/run_all.py

validate:
	$(VENV)/bin/baige-plan backtest tests/data/published_calibration.yaml

test-integration:
	bash tests/integration/run.sh

# the whole input fuzzer (tests/fuzz/; a sample runs in `make test`): FUZZ_ARGS="--seed 1 --n 5000"
fuzz:
	$(PY) tests/fuzz/run_fuzz.py $(FUZZ_ARGS)
