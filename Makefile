# allot: every target bootstraps .venv from pyproject.toml on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: help test demo demo-sim bench lint schema clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

test: $(STAMP)  ## run the test suite (starts its own Kafka broker where needed)
	$(PY) -m pytest

demo: $(STAMP)  ## play scenarios/demo.toml through Kafka on the embedded stack; audit + replay
	$(PY) -m allot up --demo

demo-sim: $(STAMP)  ## the simulator's demo: both policies side by side, report.html
	$(PY) -m allot demo

bench: $(STAMP)  ## run the benchmarks and print their figures
	$(PY) -m benchmarks.bench_core
	$(PY) -m benchmarks.bench_sim
	$(PY) -m benchmarks.bench_audit

lint: $(STAMP)  ## ruff over the tree, and the published event schema is current
	$(PY) -m ruff check .
	$(PY) -m events.schema --check

schema: $(STAMP)  ## regenerate docs/events.schema.json
	$(PY) -m events.schema

clean:  ## remove the venv and build litter
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
