# Development commands. `make demo` and `make test` work on a fresh clone:
# they create .venv and install what they need first.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PG_URL ?= postgres://postgres@127.0.0.1:5432/jobqueue

.PHONY: demo test test-sqlite test-postgres lint bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/python manage.py jobqueue_demo

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python manage.py makemigrations --check --dry-run

test-sqlite: $(BIN)/.installed
	env -u DATABASE_URL $(BIN)/pytest $(PYTEST_ARGS)

test-postgres: $(BIN)/.installed
	DATABASE_URL=$(PG_URL) $(BIN)/pytest $(PYTEST_ARGS)

test: lint test-sqlite test-postgres

bench: $(BIN)/.installed
	DATABASE_URL=$(PG_URL) $(BIN)/python -m bench

clean:
	rm -rf $(VENV) var
