VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install test test-slow lint bench validate test-integration fuzz invariants hetero-pins corpus-tables recipes

# the validation corpus: published calibration + held-out runs + one file per source in benchmarks/corpus/
CORPUS := tests/data/published_calibration.yaml benchmarks/published_heldout.yaml $(sort $(filter-out %.amend.yaml,$(wildcard benchmarks/corpus/*.yaml)))

install:
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q -e '.[dev,plot]'

test:
	$(PY) -m pytest -q

# the tests marked slow (full searches, the fuzz sample, large plans); .ci/run runs them after `make test`
test-slow:
	$(PY) -m pytest -q -m slow

lint:
	$(VENV)/bin/ruff check baige_plan tests benchmarks

bench:
	$(PY) benchmarks/run_all.py

validate:
	$(VENV)/bin/baige-plan backtest tests/data/published_calibration.yaml

# leave-one-source-out over the corpus: benchmarks/corpus/loso.json + LOSO.md (tests/test_loso_gate.py gates on
# them) and the step-time band table shipped in the package (baige_plan/data/bands.yaml)
corpus-tables:
	$(VENV)/bin/baige-plan backtest --loso $(CORPUS) --tables benchmarks/corpus --bands baige_plan/data/bands.yaml

# the published-recipe index shipped in the package (baige_plan/data/recipes.yaml): `plan` shows the nearest
# recipe beside its top plan and prefers a recipe's layout among ties (io/recipes.py)
recipes:
	$(PY) benchmarks/corpus/make_recipes.py --out baige_plan/data/recipes.yaml $(CORPUS)

test-integration:
	bash tests/integration/run.sh

# the whole input fuzzer (tests/fuzz/; a sample runs in `make test`): FUZZ_ARGS="--seed 1 --n 5000"
fuzz:
	$(PY) tests/fuzz/run_fuzz.py $(FUZZ_ARGS)

# random valid plans checked against independent properties (tests/fuzz/run_invariants.py)
invariants:
	$(PY) tests/fuzz/run_invariants.py $(INVARIANT_ARGS)

# random two-group clusters: pins that beat the heterogeneous search, and by how much (tests/fuzz/run_hetero_pins.py)
hetero-pins:
	$(PY) tests/fuzz/run_hetero_pins.py $(HETERO_PIN_ARGS)
