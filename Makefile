# allot: every target bootstraps .venv from pyproject.toml on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
# The compiled core (native/): rebuilt whenever a source it was compiled from changes.
NATIVE := build/native/manifest.json
CORE_SOURCES := $(wildcard events/*.py projections/*.py scheduler/*.py scheduler/*/*.py native/*.py)

.PHONY: help test demo demo-sim bench lint schema clean native

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

# uv resolves and downloads the packages side by side: on this machine the whole install
# takes about 4 s with it, against about 40 s with pip alone (most of it pip waiting on the
# index, one package after another). Where uv cannot be had, pip installs the same set.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check uv \
		&& $(VENV)/bin/uv pip install --quiet --python $(PY) -e '.[dev]' \
		|| $(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

# A failed native build is reported and leaves the pure-Python core running
# (tests/test_native.py then fails, so CI notices); it never stops a target.
$(NATIVE): $(STAMP) $(CORE_SOURCES)
	$(PY) -m native.build || echo "make: the native build failed; the pure-Python core runs"

native: $(STAMP)  ## compile the core with mypyc into build/native (done by every target that runs it)
	$(PY) -m native.build

# The dashboard's browser test drives Debian's Chromium (never a downloaded one);
# installed here when missing and apt can, else that one test is skipped, saying why.
BROWSER := /usr/bin/chromium
$(BROWSER):
	-@command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] \
		&& DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null \
		|| echo "make: no $(BROWSER) (apt-get install -y chromium); the browser test will be skipped"

# Three test processes per core: many tests wait on a broker, a worker or a subprocess,
# and more processes than cores fill those waits. Each test module goes whole to one
# process (--dist loadscope: a module's shared fixtures, e.g. one live cluster, are built
# once, and its tests run in the order written), and the longest modules are handed out
# first (tests/conftest.py; --no-loadscope-reorder keeps xdist from reordering them by
# their number of tests), so they run beside the short ones instead of ending the run
# alone. On this 2-core machine, quiet, 2,242 tests, a fresh clone: 4 min 52 s,
# 5 min 11 s, 5 min 28 s and 5 min 3 s (2026-12-08, docs/benchmarks.md). TEST_JOBS=N overrides.
TEST_JOBS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 2) * 3 )))

# Python caches compiled modules (__pycache__) unless PYTHONDONTWRITEBYTECODE is set, as
# it is on some machines (this one): then every test process and every command a test
# runs compiles the same sources again, and pytest rewrites every test module's asserts
# in each of its processes. The suite lets Python keep the cache (it is in .gitignore).
#
# The compiled core is built beside the tests, not before them: the build is mostly the C
# compiler (about 40 CPU-seconds), which then fills the moments the tests wait on
# brokers and subprocesses instead of running alone before them. build/native.building says a build is under way; the tests
# that run the compiled core wait for it to go (native.build.wait_for_build), the others
# run the pure core and need no build. The build's own lines are printed at the end.
BUILDING := build/native.building
test: $(STAMP) | $(BROWSER)  ## run the test suite (starts its own Kafka broker where needed)
	@mkdir -p build && touch $(BUILDING)
	@echo "make: building the compiled core beside the tests (log: build/native-build.log)"
	@env -u PYTHONDONTWRITEBYTECODE sh -c 'trap "rm -f $(BUILDING)" EXIT INT TERM; \
		{ $(MAKE) --no-print-directory $(NATIVE) > build/native-build.log 2>&1; rm -f $(BUILDING); } & \
		$(PY) -m pytest -n $(TEST_JOBS) --dist loadscope --no-loadscope-reorder --durations=15; status=$$?; \
		wait; cat build/native-build.log; exit $$status'

demo: $(STAMP) $(NATIVE)  ## play scenarios/demo.toml through Kafka on the embedded stack; audit + replay
	$(PY) -m allot up --demo

demo-sim: $(STAMP) $(NATIVE)  ## the simulator's demo: both policies side by side, report.html
	$(PY) -m allot demo

bench: $(STAMP) $(NATIVE)  ## run the benchmarks and print their figures
	$(PY) -m benchmarks.bench_core
	$(PY) -m benchmarks.bench_sim
	$(PY) -m benchmarks.bench_audit

lint: $(STAMP)  ## ruff over the tree, mypy over the core, and the published event schema is current
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(PY) -m events.schema --check

schema: $(STAMP)  ## regenerate docs/events.schema.json
	$(PY) -m events.schema

clean:  ## remove the venv, the native build and build litter
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .mypy_cache
