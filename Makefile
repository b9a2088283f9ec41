# One entry point for set-up, tests and the demo. Every target bootstraps .venv first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
STAMP  := $(VENV)/.ember-installed
PKGS   := core vision audio data arrow tools
DIST   ?= dist
PYTEST_FAST := -m "not slow" -n 2 --dist loadfile
# The parity suite's own environment: torch 2.14.1 + the real torchvision 0.29.1, with
# ember-core and ember-vision installed editable (tests/peers/constraints.txt pins torch).
PEERS_VENV  ?= .venv-peers
PEERS_PY    := $(PEERS_VENV)/bin/python
PEERS_PIP   := $(PEERS_PY) -m pip --disable-pip-version-check -q
PEERS_STAMP := $(PEERS_VENV)/.ember-peers-installed
PEERS_PINS  := tests/peers/constraints.txt
# The audio parity suite's: torch 2.9.1 + the real torchaudio 2.9.1, with ember-core and
# ember-audio editable (tests/peers/audio/constraints.txt pins torch).
PEERS_AUDIO_VENV  ?= .venv-peers-audio
PEERS_AUDIO_PY    := $(PEERS_AUDIO_VENV)/bin/python
PEERS_AUDIO_PIP   := $(PEERS_AUDIO_PY) -m pip --disable-pip-version-check -q
PEERS_AUDIO_STAMP := $(PEERS_AUDIO_VENV)/.ember-peers-installed
PEERS_AUDIO_PINS  := tests/peers/audio/constraints.txt

.PHONY: venv test test-all test-peers test-peers-vision test-peers-audio lint demo bench \
	wheels clean

venv: $(STAMP)

$(STAMP): constraints.txt requirements-test.txt $(foreach p,$(PKGS),$(p)/pyproject.toml)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -c constraints.txt torch==2.13.0
	$(PIP) install -c constraints.txt $(foreach p,$(PKGS),-e ./$(p)) -r requirements-test.txt
	@touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_FAST)

$(PEERS_STAMP): $(PEERS_PINS) core/pyproject.toml vision/pyproject.toml
	@test -x $(PEERS_PY) || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_PIP) install -c $(PEERS_PINS) torch==2.14.1 torchvision==0.29.1
	$(PEERS_PIP) install -c $(PEERS_PINS) -e ./core -e ./vision pytest
	@touch $(PEERS_STAMP)

$(PEERS_AUDIO_STAMP): $(PEERS_AUDIO_PINS) core/pyproject.toml audio/pyproject.toml
	@test -x $(PEERS_AUDIO_PY) || $(PYTHON) -m venv $(PEERS_AUDIO_VENV)
	$(PEERS_AUDIO_PIP) install -c $(PEERS_AUDIO_PINS) torch==2.9.1 torchaudio==2.9.1
	$(PEERS_AUDIO_PIP) install -c $(PEERS_AUDIO_PINS) -e ./core -e ./audio pytest scipy
	@touch $(PEERS_AUDIO_STAMP)

# Both parity suites, each in its own environment (tests/peers; skipped by `make test`).
test-peers: test-peers-vision test-peers-audio

# ember.vision against the real torchvision.
test-peers-vision: $(PEERS_STAMP)
	$(PEERS_PY) -m pytest tests/peers --ignore=tests/peers/audio

# ember.audio against the real torchaudio (tests/peers/audio).
test-peers-audio: $(PEERS_AUDIO_STAMP)
	$(PEERS_AUDIO_PY) -m pytest tests/peers/audio

test-all: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadfile

lint: $(STAMP)
	$(VENV)/bin/ruff check .

demo: $(STAMP)
	$(VENV)/bin/ember demo

bench: $(STAMP)
	$(VENV)/bin/ember bench all

# The six wheels into $(DIST)/ with the venv's setuptools (no downloads). setuptools' build/
# folders go before (it would pack files deleted from the source since) and after.
wheels: $(STAMP)
	rm -rf $(foreach p,$(PKGS),$(p)/build) $(DIST)/ember_*.whl
	$(PIP) wheel --no-deps --no-build-isolation -w $(DIST) $(foreach p,$(PKGS),./$(p))
	rm -rf $(foreach p,$(PKGS),$(p)/build)
	@ls $(DIST)/ember_*.whl

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache $(DIST)
