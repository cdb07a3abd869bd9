# Two commands set everything up on a fresh machine (Python 3.11+, Java 17+): `make demo`, `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit integration bench clean zookeeper s3 spark-cluster prometheus-rule

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m orchestrator.testing.demo

test: $(STAMP) lint typecheck
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check catalog orchestrator tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

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

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) var demo-data .pytest_cache .mypy_cache .ruff_cache
