# The two commands the README opens with, and their helpers.
#   make demo   install mu into .venv and run its main job: the whole agent path on the local provider
#   make test   install mu with its test tools into .venv and run every test
#               (two pytest-xdist workers; a test's state, sockets and namespaces are its own);
#               each failure is named the moment it happens (tests/live_failures.py)
#   make test-quick   the docs, first-hour, CLI and unit tests only (about 55 s of CPU), for the loop of a change

PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: demo test test-quick lint bench clean

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
	PATH="$(CURDIR)/$(BIN):$$PATH" PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -p no:cacheprovider -n 2 --durations=25

# The docs (their examples run), the first hour, the command line, the
# unit tests: what a change to the CLI, the docs or a leaf module breaks
# first.  No harness, ssh or podman test: `make test` runs those.
QUICK = tests/test_docs.py tests/test_first_hour.py tests/test_guide.py \
        tests/test_cli_misuse.py tests/test_cli_output.py tests/test_input.py \
        tests/test_api_names.py tests/test_layers.py tests/test_ids.py tests/test_rpc.py tests/test_schema.py \
        tests/test_declaration.py tests/test_conforms.py tests/test_test_commands.py

test-quick: $(BIN)/.installed
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/ruff check mu tests bench
	PATH="$(CURDIR)/$(BIN):$$PATH" PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -p no:cacheprovider -n 2 $(QUICK)

bench: $(BIN)/.installed
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info
