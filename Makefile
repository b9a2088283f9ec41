# One entry point for set-up, tests and the demo. Every target bootstraps .venv first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
STAMP  := $(VENV)/.ember-installed
PKGS   := core vision audio data arrow tools
PYTEST_FAST := -m "not slow" -n 2 --dist loadfile

.PHONY: venv test test-all lint demo bench clean

venv: $(STAMP)

$(STAMP): constraints.txt requirements-test.txt $(foreach p,$(PKGS),$(p)/pyproject.toml)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -c constraints.txt torch==2.13.0
	$(PIP) install -c constraints.txt $(foreach p,$(PKGS),-e ./$(p)) -r requirements-test.txt
	@touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_FAST)

test-all: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadfile

lint: $(STAMP)
	$(VENV)/bin/ruff check .

demo: $(STAMP)
	$(VENV)/bin/ember demo

bench: $(STAMP)
	$(VENV)/bin/ember bench all

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
