# Two commands set everything up on a fresh machine (Python 3.11+, Java 17+): `make demo`, `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# What the demo needs (the product and its client), not the test and dev tools.
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: demo test check packages lint typecheck docs docs-update unit integration bench bench-smoke soak clean zookeeper s3 \
	spark-cluster prometheus-rule

$(STAMP): pyproject.toml client/pyproject.toml docs/requirements.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ./client -e '.[test,dev]' -r docs/requirements.txt
	touch $(STAMP) $(DEMO_STAMP)

$(DEMO_STAMP): pyproject.toml client/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ./client -e .
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/python -m orchestrator.testing.demo

# The whole suite, in parallel workers (tests/support/parallel.py): most of a test's time is
# waiting, so 4 workers on 2 cores. Budget: 15 minutes (docs/design.md, "Testing").
TEST_WORKERS ?= 4
# Then the tests that assert a time or a rate (marked quiet), in two workers: they mostly wait
# (sessions, throttled copies), so each has a core, and four workers would make them measure
# each other.
test: $(STAMP) packages lint typecheck docs
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadscope -m "not quiet" --durations=25
	$(BIN)/python -m pytest -q -n 2 --dist loadscope -m quiet --durations=10

# Before each commit: lint, dead code, types, import contracts and the pure-logic tests. Budget: 2 minutes.
check: $(STAMP) lint typecheck
	$(BIN)/python -m pytest -q -n 2 tests/unit

# The Debian packages the suite needs (Chromium, nftables, iproute2, Prometheus), where
# apt-get may install them; otherwise their tests skip, named in pytest's summary.
packages:
	bash .ci/packages

lint: $(STAMP)
	$(BIN)/ruff check catalog client orchestrator tests benchmarks docs/hooks
	$(BIN)/lint-imports
	$(BIN)/vulture

typecheck: $(STAMP)
	$(BIN)/mypy

# The manual: an MkDocs site, built strict (a broken link fails the build), with a docs-only
# install: its generated text is in the pages already (docs/hooks/markers.py).
DOCS_VENV := .venv-docs
DOCS_STAMP := $(DOCS_VENV)/.installed
$(DOCS_STAMP): docs/requirements.txt
	test -x $(DOCS_VENV)/bin/python || $(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/python -m pip install --quiet -r docs/requirements.txt
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict --quiet

# Rewrite the text generated into the pages (defaults, figures, the CLI and API references,
# the code map) from the code and benchmarks/results; make test fails while a page is stale.
docs-update: $(STAMP)
	$(BIN)/python docs/hooks/generated.py

unit: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 tests/unit

integration: $(STAMP)
	$(BIN)/python -m pytest -q -m integration

zookeeper: $(STAMP)
	$(BIN)/catalog-upgrade zookeeper

s3: $(STAMP)
	$(BIN)/catalog-upgrade s3

spark-cluster: $(STAMP)
	$(BIN)/catalog-upgrade spark-cluster --connect-port 15002

prometheus-rule: $(STAMP)
	$(BIN)/python deploy/prometheus/make_rule.py

# Before a release: 50 seeds x 60 steps on a 3-server ensemble with partitions (root, ip, nft).
# SOAK_ARGS overrides, e.g. SOAK_ARGS="--seeds 5 --first-seed 42".
SOAK_ARGS ?=
# Then many seeds of the exact-path tests: random histories jumped and stepped, and
# Materialize's randomized test ported to real processes (PATH_SEEDS, PORT_SEEDS override).
PATH_SEEDS ?= 1-100
PORT_SEEDS ?= 1-50
soak: $(STAMP)
	$(BIN)/catalog-upgrade scenario soak $(SOAK_ARGS)
	TEST_PATH_SEEDS=$(PATH_SEEDS) TEST_PORT_SEEDS=$(PORT_SEEDS) $(BIN)/python -m pytest -q \
		-n $(TEST_WORKERS) tests/integration/test_upgrade_paths.py \
		tests/integration/test_materialize_port.py

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done
	$(BIN)/python benchmarks/bench_appends.py --store s3 --label s3

# Every benchmark at a tiny size (figures to a temporary directory): none rots unseen.
bench-smoke: $(STAMP)
	$(BIN)/python benchmarks/smoke.py

clean:
	rm -rf $(VENV) $(DOCS_VENV) var site demo-data .pytest_cache .mypy_cache .ruff_cache
