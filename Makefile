# Two commands do all set-up on a fresh Debian machine:
#   make demo   virtualenv + install + CPU rehearsal sweep (1 and 2 processes) + report
#   make test   virtualenv + install (with test tools) + the test suite
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# CPU installs pin torch: an unpinned torch pulls a multi-GB CUDA build. GPU clusters: see docs/.
TORCH  ?= torch==2.13.0

.PHONY: demo test install clean

$(VENV)/.installed: setup.cfg pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q $(TORCH) -e '.[test]'
	@touch $@

install: $(VENV)/.installed

demo: $(VENV)/.installed
	$(PY) -m scalelab.demo --output_dir outputs/demo

test: $(VENV)/.installed
	$(PY) -m pytest

clean:
	rm -rf $(VENV) src/*.egg-info .pytest_cache
