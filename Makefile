# Development commands. `make demo` and `make test` work on a fresh clone:
# they create .venv and install what they need first.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# PostgreSQL: PG_URL when given. Otherwise scripts/pg provides it for each
# target that needs it: the default address if something answers there, else a
# private cluster under var/pg/, started for the target and stopped after it.
# Without PostgreSQL installed, `make test` says so and runs the SQLite suites
# only, unless PG_REQUIRED=1 (CI) makes that a failure.
PG_DEFAULT_HOST ?= 127.0.0.1
PG_DEFAULT_PORT ?= 5432
PG_DATABASE ?= jobqueue
PG_URL ?= postgres://postgres@$(PG_DEFAULT_HOST):$(PG_DEFAULT_PORT)/$(PG_DATABASE)
PG := PG_DEFAULT_HOST=$(PG_DEFAULT_HOST) PG_DEFAULT_PORT=$(PG_DEFAULT_PORT) PG_DATABASE=$(PG_DATABASE) scripts/pg
PG_REQUIRED ?=
# Django 6 needs Python >= 3.12: the first pyenv one found. Where there is one,
# `make test` also runs the suite on Django 6, in a venv of its own.
PYTHON_DJ6 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python $(HOME)/.pyenv/versions/3.13*/bin/python))
VENV_DJ6 := .venv-dj6
BIN_DJ6 := $(VENV_DJ6)/bin
# Databases of their own, so that the Django 6 suites may run next to the others.
PG_URL_DJ6 ?= $(PG_URL)_dj6
SQLITE_TEST_FILE_DJ6 ?= $(if $(SQLITE_TEST_FILE),$(SQLITE_TEST_FILE).dj6,$(CURDIR)/var/test-dj6.sqlite3)
# `make test` runs the suites one after the other: the fault and worker tests
# time real processes, and two cores shared by two suites make them noisy.
# TEST_JOBS=2 runs the SQLite and PostgreSQL suites side by side. Two PostgreSQL
# suites never run at once: their workers together would pass max_connections.
TEST_JOBS ?= 1
# The Django 6 suites leave out the tests marked `slow`: fault scenarios of
# worker processes under kills, outages and races, whose code paths do not
# depend on Django's version. DJ6_ALL=1 runs them on Django 6 too.
DJ6_ALL ?=
DJ6_MARKERS := $(if $(DJ6_ALL),,-m 'not slow')
# The newest Python under pyenv: the wheel is also installed and run there.
PYTHON_NEWEST ?= $(lastword $(sort $(wildcard $(HOME)/.pyenv/versions/3.1[2-9]*/bin/python)))
# The oldest PostgreSQL Django 5.2 accepts and the newest released, fetched by
# scripts/pg-binaries; each serves PG_VERSION_TESTS from a private cluster.
PG_OLDEST ?= 14.23.0-beta.17
PG_NEWEST ?= 18.4.0-beta.17
PG_VERSION_TESTS ?= tests/test_queue_*.py tests/test_job_partitions.py tests/test_flow_claims.py \
	tests/test_dependencies.py tests/test_batches.py tests/test_schedules_due.py tests/test_worker_basic.py \
	tests/test_round_commit.py
# The queue behind a real PgBouncer in transaction mode (scripts/pgbouncer), the
# tests and the workers they start alike: real workers, flow control, schedules,
# workflows, SIGKILLed workers and terminated server sessions, about 6 minutes.
PG_URL_PGBOUNCER ?= $(PG_URL)_pgbouncer
PGBOUNCER_TESTS ?= tests/test_pooler.py tests/test_worker_basic.py tests/test_worker_faults.py \
	tests/test_worker_signals.py tests/test_worker_console.py tests/test_flow_*.py tests/test_schedules_*.py \
	tests/test_dependencies.py tests/test_batches_workers.py tests/faults/test_sigkill_chaos.py \
	tests/faults/test_stale_owner.py tests/faults/test_batch_kills.py tests/test_worker_listen.py \
	tests/test_worker_budget.py tests/test_several_databases.py tests/test_asyncio_pool.py
# MariaDB (or MySQL) at MARIADB_URL: the server on the default address. The leg
# installs mysqlclient, which builds against libmariadb-dev (pkg-config finds it),
# and runs the whole suite there; then the queue's statements again as they are
# written for MySQL 8, which lacks MariaDB's INSERT and DELETE … RETURNING
# (tests/conftest.py). Without a server answering, `make test` says so and goes
# on, unless PG_REQUIRED=1.
MARIADB_URL ?= mysql://root@127.0.0.1:3306/jobqueue
MARIADB_DESELECT ?= tests/test_queue_schema.py
MYSQL_STATEMENT_TESTS ?= tests/test_queue_*.py tests/test_mysql.py tests/test_dependencies.py tests/test_batches.py \
	tests/test_flow_claims.py tests/test_progress_stored.py tests/test_attempt_history.py
# The SQLite stream runs the MariaDB leg too: a server of its own, so the two
# streams share no database.
# Django 6 runs on PostgreSQL in `make test` (its psycopg backend is what the queue's
# own cursor rides on); `make test-dj6-sqlite` runs it on SQLite, which `make test`
# leaves out to keep a whole run under 45 minutes with the MariaDB leg.
SQLITE_SUITES := test-sqlite test-pg-versions test-mariadb
POSTGRES_SUITES := test-postgres $(if $(PYTHON_DJ6),test-dj6-postgres) test-pgbouncer test-wheel

.PHONY: demo test test-sqlite test-postgres test-dj6-sqlite test-dj6-postgres tests-sqlite tests-postgres
.PHONY: lint docs docs-build bench clean dist test-wheel test-pg-versions test-pgbouncer test-mariadb

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,docs]'
	touch $@

# `make bench` alone needs the `bench` extra (pgqueuer, the peer it measures against).
$(BIN)/.bench-installed: $(BIN)/.installed pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	touch $@

# The MariaDB leg alone needs the `mysql` extra (mysqlclient compiles against libmariadb).
$(BIN)/.mysql-installed: $(BIN)/.installed pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev,mysql]'
	touch $@

$(BIN_DJ6)/.installed: pyproject.toml
	$(if $(PYTHON_DJ6),,$(error Django 6 needs Python 3.12 or later: set PYTHON_DJ6))
	$(PYTHON_DJ6) -m venv $(VENV_DJ6)
	$(BIN_DJ6)/pip install --quiet --upgrade pip
	$(BIN_DJ6)/pip install --quiet -e '.[dev]' 'Django>=6.0,<6.2'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/python manage.py jobqueue_demo

lint: $(BIN)/.installed docs-build
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python manage.py makemigrations --check --dry-run

# The docs site (mkdocs.yml). `make docs` serves it and rebuilds it as the pages
# change; `make docs-build` builds it into var/site, where --strict makes a broken
# link or anchor a failure. NO_MKDOCS_2_WARNING: Material's notice of its end of
# life, printed on every build (docs/decisions.md says what follows from it).
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs

docs: $(BIN)/.installed
	$(MKDOCS) serve --dev-addr 127.0.0.1:8000

docs-build: $(BIN)/.installed
	$(MKDOCS) build --strict --site-dir var/site

# The wheel and the sdist, in var/dist/, checked: twine's check of their
# metadata, and scripts/check_dist.py's of what they hold.
dist: $(BIN)/.installed
	rm -rf var/dist
	$(BIN)/python -m build --outdir var/dist .
	$(BIN)/twine check --strict var/dist/*
	$(BIN)/python scripts/check_dist.py var/dist

# The oldest and the newest PostgreSQL, each from a private cluster of its own.
test-pg-versions: $(BIN)/.installed
	set -e; for version in $(PG_OLDEST) $(PG_NEWEST); do \
	  PG_BINDIR=$$(scripts/pg-binaries $$version) PG_HOME=$(CURDIR)/var/pg-$$version \
	    scripts/pg private sh -c 'DATABASE_URL=$$PG_URL $(BIN)/pytest $(PYTEST_ARGS) $(PG_VERSION_TESTS)'; \
	done

# One suite after the other, each run even if one before it failed.
run_suites = status=0; for suite in $(1); do $(MAKE) --no-print-directory $$suite || status=1; done; exit $$status

test-sqlite: $(BIN)/.installed
	env -u DATABASE_URL $(BIN)/pytest $(PYTEST_ARGS)

test-dj6-sqlite: $(BIN_DJ6)/.installed
	env -u DATABASE_URL SQLITE_TEST_FILE=$(SQLITE_TEST_FILE_DJ6) $(BIN_DJ6)/pytest $(DJ6_MARKERS) $(PYTEST_ARGS)

tests-sqlite:
	$(call run_suites,$(SQLITE_SUITES))

test-mariadb:
	@if scripts/mariadb ping; then $(MAKE) --no-print-directory $(BIN)/.mysql-installed && \
	  DATABASE_URL=$(MARIADB_URL) $(BIN)/pytest $(PYTEST_ARGS) $(foreach test,$(MARIADB_DESELECT),--ignore=$(test)) && \
	  DATABASE_URL=$(MARIADB_URL)_mysql JOBQUEUE_TEST_MYSQL_STATEMENTS=1 $(BIN)/pytest $(PYTEST_ARGS) \
	    $(filter-out $(MARIADB_DESELECT),$(wildcard $(MYSQL_STATEMENT_TESTS))); \
	elif [ -n "$(PG_REQUIRED)" ]; then echo "test-mariadb: no MariaDB answers at 127.0.0.1:3306" >&2; exit 1; \
	else echo "test-mariadb: no MariaDB answers at 127.0.0.1:3306; skipped"; fi

ifeq ($(origin PG_URL),file)
# No PG_URL given: the same target again, with the PG_URL scripts/pg sets.
test-postgres test-dj6-postgres test-pgbouncer test-wheel bench:
	$(PG) run $(MAKE) --no-print-directory $@

tests-postgres:
	$(PG) run $(if $(PG_REQUIRED),,--or-skip) $(MAKE) --no-print-directory $@
else
test-postgres: $(BIN)/.installed
	DATABASE_URL=$(PG_URL) $(BIN)/pytest $(PYTEST_ARGS)

test-dj6-postgres: $(BIN_DJ6)/.installed
	DATABASE_URL=$(PG_URL_DJ6) $(BIN_DJ6)/pytest $(DJ6_MARKERS) $(PYTEST_ARGS)

tests-postgres:
	$(call run_suites,$(POSTGRES_SUITES))

# Without PgBouncer installed, `make test` says so and goes on, unless PG_REQUIRED=1.
test-pgbouncer: $(BIN)/.installed
	PG_URL=$(PG_URL_PGBOUNCER) scripts/pgbouncer run $(if $(PG_REQUIRED),,--or-skip) sh -c \
	  'DATABASE_URL=$$PG_URL DATABASE_POOLER_URL=$$PGBOUNCER_URL $(BIN)/pytest $(PYTEST_ARGS) $(PGBOUNCER_TESTS)'

# The wheel, installed as a user would (scripts/wheel_smoke.py): on this
# Python with Django 5.2, and on the newest Python with the newest Django.
test-wheel: dist
	$(BIN)/python scripts/wheel_smoke.py var/dist/*.whl --database-url $(PG_URL)
	if [ -n "$(PYTHON_NEWEST)" ]; then $(BIN)/python scripts/wheel_smoke.py var/dist/*.whl \
	  --python $(PYTHON_NEWEST) --django 'Django>=6.0,<6.2' --database-url $(PG_URL); fi

bench: $(BIN)/.bench-installed
	DATABASE_URL=$(PG_URL) $(BIN)/python -m bench
endif

test: lint
	$(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target tests-sqlite tests-postgres

clean:
	-$(PG) stop
	-scripts/pgbouncer stop
	rm -rf $(VENV) $(VENV_DJ6) var
