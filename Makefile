# The two commands a newcomer needs: `make demo` and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PG_URL ?= postgresql+psycopg://postgres@127.0.0.1:5432/test
APT_PACKAGES := syslog-ng-core syslog-ng-mod-http docker-compose chromium clickhouse-server

.PHONY: install system-deps postgres lint test test-sqlite test-postgres demo bench bench-client lab lab-install clean

# The client (clients/python, its own distribution) first: the service depends on it.
$(VENV)/.installed: pyproject.toml clients/python/pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e clients/python -e '.[dev]'
	touch $@

install: $(VENV)/.installed

# Debian packages the tests drive: a real log shipper, the compose validator, a browser,
# and a real ClickHouse server (18.16: tests/clickhouse/test_server.py).
system-deps:
	@missing=""; \
	[ -x /usr/sbin/clickhouse-server ] || missing="$$missing clickhouse-server"; \
	command -v syslog-ng >/dev/null || missing="$$missing syslog-ng-core"; \
	[ -e /usr/lib/syslog-ng ] && ls /usr/lib/syslog-ng/*/libhttp.so >/dev/null 2>&1 || missing="$$missing syslog-ng-mod-http"; \
	command -v docker-compose >/dev/null || missing="$$missing docker-compose"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

# PostgreSQL is the production database: start the local cluster when it is down.
postgres:
	@pg_isready -q -h 127.0.0.1 -p 5432 || \
	  (pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql) main start && sleep 2) || true
	@if ! pg_isready -q -h 127.0.0.1 -p 5432; then \
	  if [ "$$CI" = "true" ]; then echo "PostgreSQL at 127.0.0.1:5432 is unreachable" >&2; exit 1; \
	  else echo "warning: PostgreSQL is unreachable; its tests will skip" >&2; fi; \
	fi

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test-sqlite: install
	$(PY) -m pytest -p no:cacheprovider

test-postgres: install postgres
	CACHEWATCH_TEST_DATABASE_URL=$(PG_URL) $(PY) -m pytest -p no:cacheprovider

# The two suites run side by side, one a core (CI has two): each prints its log
# when both are done, and either failing fails the target.
test: install system-deps postgres lint
	@echo "== tests on SQLite and on PostgreSQL, side by side =="
	@logs=$$(mktemp -d); \
	$(PY) -m pytest -p no:cacheprovider > $$logs/sqlite.log 2>&1 & sqlite=$$!; \
	CACHEWATCH_TEST_DATABASE_URL=$(PG_URL) $(PY) -m pytest -p no:cacheprovider \
	  > $$logs/postgres.log 2>&1; postgres=$$?; \
	wait $$sqlite; sqlite=$$?; \
	echo "== tests on SQLite (exit $$sqlite) =="; cat $$logs/sqlite.log; \
	echo "== tests on PostgreSQL (exit $$postgres) =="; cat $$logs/postgres.log; \
	rm -rf $$logs; test $$sqlite -eq 0 && test $$postgres -eq 0

# The whole story on the embedded SQLite database; leaves the dashboard served.
demo: install
	$(VENV)/bin/cachewatch demo --port $${PORT:-8000}

# Real engines (not part of `make test`; docs/lab.md): llama-server replicas behind
# sglang-router, measured by cachewatch. The first run builds llama.cpp (~15 min on
# 2 cores) into a wheel under .lab/; later runs install it in seconds. LAB_ARGS
# passes options (`--scale 0.5` halves every phase).
lab-install:
	bash lab/install.sh

lab: install lab-install
	$(PY) -m service.lab $(LAB_ARGS)

bench: install
	$(PY) bench/ingest.py
	$(PY) bench/analytics.py
	$(PY) bench/detection.py

# The client's cost to an application's calls, cachewatch healthy or failing
# (bench/client.py; `--quick` for a short run).
bench-client: install
	$(PY) bench/client.py

clean:
	rm -rf $(VENV) *.egg-info cachewatch.db cachewatch.db-wal cachewatch.db-shm
