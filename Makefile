# Two commands do all set-up on a fresh Debian machine:
#   make demo   virtualenv + install + CPU rehearsal ladder (1 device, 2 on a node, 2 nodes over a shaped link) + report
#   make test   virtualenv + install (with test tools and ReFrame) + lint + the test suite
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# CPU installs pin torch: an unpinned torch pulls a multi-GB CUDA build. GPU clusters: see docs/.
TORCH  ?= torch==2.13.0
# The tests that may share the cores (conftest.py marks them `parallel`: tests/unit less slow, slurm and alone) run
# first on WORKERS processes (pytest-xdist); then the rest one at a time: no train.py run, SLURM job, chapter or
# reading of the cores has a neighbour. make test runs both passes (a failure in the first does not hide the
# second's) and fails if either did. make test-quick: tests/unit less slow and slurm (no cluster, no chapters).
WORKERS ?= 2
# Python writes its compiled modules (and pytest its rewritten tests) into __pycache__/ even where the shell says
# not to: each pytest process, each rank and each train.py a test starts would otherwise compile them again
# (collecting tests/unit: 14 s without, 6 s with).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: help demo test test-quick mutation lint install clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-11s %s\n", $$1, $$2}'

$(VENV)/.installed: setup.cfg pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q $(TORCH) -e '.[test,reframe]'
	@touch $@

install: $(VENV)/.installed  ## create .venv and install scalelab with its test tools and ReFrame

demo: $(VENV)/.installed  ## CPU rehearsal: 1 device, 2 on a node, 2 emulated nodes over a shaped link; report
	$(PY) -m scalelab.demo --output_dir outputs/demo

lint: $(VENV)/.installed  ## ruff (rules and line length in pyproject.toml)
	$(PY) -m ruff check --output-format concise .

test: lint  ## lint, then the whole test suite (what CI runs); the 25 slowest of the one-at-a-time pass named at the end
	@echo "make test: pass 1 of 2, tests/unit's parallel tests on $(WORKERS) workers; pass 2, the rest one at a time"
	$(PY) -m pytest -n $(WORKERS) -m parallel tests/unit; first=$$?; \
	  echo "make test: pass 2 of 2 (its 'deselected' are pass 1's tests)"; \
	  $(PY) -m pytest --durations=25 -m "not parallel" && exit $$first

test-quick: $(VENV)/.installed  ## the unit tests (tests/unit), under 3 minutes
	@echo "make test-quick: pass 1 of 2, tests/unit's parallel tests on $(WORKERS) workers; pass 2, the alone one"
	$(PY) -m pytest -n $(WORKERS) -m parallel tests/unit
	$(PY) -m pytest -m "alone and not slow and not slurm" tests/unit

$(VENV)/.mutation: $(VENV)/.installed setup.cfg
	$(PY) -m pip install -q -e '.[test,reframe,mutation]'
	@touch $@

# Not in CI: plants each small edit mutmut can make in the modules listed in pyproject.toml's [tool.mutmut], runs
# the unit tests that reach it (none that starts a process: tests/conftest.py), then prints the score per module
# (tests/mutation/equivalent.txt: the reviewed survivors). A second pass does the same for result.json's declaration
# (src/scalelab/record/) in a copy, build/mutation-record/, judged by the record's own tests
# (tests/mutation/record.toml says why apart). From scratch each time: a cached verdict could predate the tests.
RECORD_PASS := build/mutation-record
mutation: $(VENV)/.mutation  ## mutation testing: score per module of the report, perfmodel, results, record, timing
	rm -rf mutants $(RECORD_PASS)
	env -u CI SCALELAB_MUTATION=1 $(VENV)/bin/mutmut run || true
	names="$$($(PY) tests/mutation/score.py --killed-equivalents mutants)"; [ -z "$$names" ] || \
	  env -u CI SCALELAB_MUTATION=1 $(VENV)/bin/mutmut run $$names >/dev/null || true
	mkdir -p $(RECORD_PASS) && cp -r src tests setup.cfg Makefile README.md docs slurm_jobs benchmarks .ci outputs reframe examples \
	  $(RECORD_PASS)/ && cp tests/mutation/record.toml $(RECORD_PASS)/pyproject.toml
	cd $(RECORD_PASS) && env -u CI SCALELAB_MUTATION=1 $(CURDIR)/$(VENV)/bin/mutmut run || true
	names="$$($(PY) tests/mutation/score.py --killed-equivalents $(RECORD_PASS)/mutants)"; [ -z "$$names" ] || \
	  (cd $(RECORD_PASS) && env -u CI SCALELAB_MUTATION=1 $(CURDIR)/$(VENV)/bin/mutmut run $$names >/dev/null) || true
	$(PY) tests/mutation/score.py mutants $(RECORD_PASS)/mutants

clean:  ## remove the virtualenv and caches
	rm -rf $(VENV) src/*.egg-info .pytest_cache .ruff_cache mutants $(RECORD_PASS)
