# The two commands the README opens with, and their helpers.
#   make demo   install mu into .venv and run its main job: the whole agent path on the local provider
#   make test   install mu with its test tools into .venv and run every test
#               (two pytest-xdist workers; a test's state, sockets and namespaces are its own)

PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: demo test lint bench clean

$(BIN)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet '.[test,bench]'
	touch $@

demo: $(BIN)/.installed
	PATH="$(CURDIR)/$(BIN):$$PATH" sh examples/demo.sh

test: $(BIN)/.installed
	sh tests/harnesses/install.sh  # the pinned coding agents, cached outside the checkout (tests/harness_fixture.py)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/ruff check mu tests bench examples/mu-plugin-hello examples/mu-plugin-local examples/mu-demo-agent tests/hostile/mu-plugin-*
	PATH="$(CURDIR)/$(BIN):$$PATH" PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -p no:cacheprovider -n 2

bench: $(BIN)/.installed
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info
