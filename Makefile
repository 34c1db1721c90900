# blockbatch: the two commands are `make demo` and `make test`; the rest serve them.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
PYTEST_ARGS ?=
# The cores this process may run on (its CPU affinity, where the OS has one).
CORES = $(shell $(PYTHON) -c "import os; print(len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count() or 1)")
# `make test`'s workers (pytest-xdist), each with its own Postgres, Temporal dev server and
# simulator: one more than the cores, since a stack test spends about a third of its time
# waiting on its services (on 2 cores, 3 workers took 15% less time than 2, and 4 no less
# than 3; docs/testing.md "How many workers").
TEST_WORKERS ?= $(shell echo $$(( $(CORES) + 1 )))
# `make test-fast`'s and `make test-deep`'s tests compute rather than wait: one per core.
FAST_WORKERS ?= $(CORES)

.PHONY: demo test test-fast test-deep install up down status worker lint docs compose-tool browser serve screenshots

# uv (from PyPI, into the venv by pip) installs what pip would, in a quarter of the time: it
# downloads in parallel and links from its cache (docs/testing.md, "Install").
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@test -x $(BIN)/uv || $(BIN)/python -m pip install -q 'uv>=0.9,<1'
	@$(BIN)/uv pip install -q --python $(BIN)/python -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

## demo: start the embedded stack and a worker, run the sample document, print the summary.
demo: install
	@$(BIN)/python -m blockbatch.devtools.demo

## test: the whole suite against real Postgres, Temporal dev server and simulator (what CI runs).
test: install compose-tool browser
	@$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

## test-fast: the inner loop: unit, workflow (time-skipping server) and simulator tests,
## none of which needs Postgres, the Temporal dev server or the simulator process; the
## property tests draw fewer examples (tests/helpers.py `examples`, `make test-deep` all).
test-fast: install compose-tool
	@BLOCKBATCH_TEST_TIER=fast $(BIN)/python -m pytest -n $(FAST_WORKERS) -m "not stack" \
	  tests/unit tests/workflows tests/simulator $(PYTEST_ARGS)

## test-deep: the property tests alone, drawing every example they name (`make test` draws
## a quarter, `make test-fast` a tenth; docs/testing.md).
test-deep: install
	@BLOCKBATCH_TEST_TIER=deep $(BIN)/python -m pytest -n $(FAST_WORKERS) -m property \
	  tests/unit tests/workflows tests/simulator $(PYTEST_ARGS)

## up / down / status: the local stack (Postgres, Temporal + UI, simulator); data stays in .data/.
up: install
	@$(BIN)/python -m blockbatch.devtools.stack up

down: install
	@$(BIN)/python -m blockbatch.devtools.stack down

status: install
	@$(BIN)/python -m blockbatch.devtools.stack status

## worker: one worker in the foreground (Ctrl-C stops it gracefully).
worker: up
	@$(BIN)/python worker.py

## serve: the review web app on http://127.0.0.1:8780 (HOST=0.0.0.0 needs BLOCKBATCH_SERVE_TOKEN).
HOST ?= 127.0.0.1
PORT ?= 8780
serve: up
	@$(BIN)/python starter.py serve --host $(HOST) --port $(PORT)

## screenshots: the review app's pictures in docs/screenshots (docs/how-it-works.md), taken by its browser test.
screenshots: install browser
	@BLOCKBATCH_SCREENSHOTS=docs/screenshots $(BIN)/python -m pytest -q \
	  tests/e2e/test_review_web.py -k browser

## lint: formatting, the chosen ruff rules and mypy (pyproject.toml); .ci/run runs it first.
lint: install
	@$(BIN)/ruff format --check .
	@$(BIN)/ruff check .
	@$(BIN)/mypy

# The compose file is validated by a test with Debian's docker-compose (no engine needed).
compose-tool:
	@command -v docker-compose >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian's docker-compose (validates docker-compose.yml)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose) >/dev/null; \
	  else \
	    echo "docker-compose is missing: run 'sudo apt-get install docker-compose' (tests/e2e/test_compose.py needs it)"; \
	  fi; }

# The review app's browser tests drive Debian's chromium-headless-shell with Playwright (no
# browser download): the old headless mode, a third of the full chromium's CPU headless.
browser:
	@test -x /usr/lib/chromium/chromium-headless-shell || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian's chromium-headless-shell (the review app's browser tests)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium-headless-shell) >/dev/null; \
	  else \
	    echo "chromium-headless-shell is missing: run 'sudo apt-get install chromium-headless-shell' (tests/e2e/test_review_web.py needs it)"; \
	  fi; }

## docs: rewrite the docs generated from the code: docs/cli.md (every command's --help) and the
## generated parts of the other pages (metrics, settings, run options, reason codes);
## tests/unit/test_cli_reference.py and tests/unit/test_docs.py fail while they are out of date.
.PHONY: docs
docs: install
	@$(BIN)/python -m blockbatch.cli.reference > docs/cli.md
	@$(BIN)/python -m blockbatch.devtools.docs
