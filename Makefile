# One command each: `make demo` runs the demo crawl, `make test` runs the tests.
# Both build on `make install`, which creates .venv from the locked requirements.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-e2e deploy-local lint airflow clean chromium

install: $(STAMP)

$(STAMP): requirements.txt requirements.lock
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt -c requirements.lock
	$(BIN)/pip install --quiet --no-deps -e .
	$(BIN)/python -m compileall -q crawl  # an editable install writes no bytecode; with PYTHONDONTWRITEBYTECODE no import does
	touch $(STAMP)

# The deployment test (tests/test_deploy.py, ~6 min: PostgreSQL, four Airflow components, Dask, S3)
# runs in its own target so `make test` stays within 20 minutes on 2 cores; .ci/run runs both.
test: install
	$(BIN)/python -m pytest -q -m "not deploy" tests

test-e2e: install
	$(BIN)/python -m pytest -q -m deploy tests

# docker-compose.yaml's deployment, natively on this machine (scripts/deploy_local.py); Ctrl-C stops it.
deploy-local: install
	$(BIN)/python scripts/deploy_local.py

# The browser tests (tests/test_browser.py) drive Debian's chromium through Playwright's
# executable_path: Playwright's own browser download cannot work without internet access.
CHROMIUM ?= /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
chromium:
	@test -x $(CHROMIUM) || { $(SUDO) apt-get update && $(SUDO) apt-get install -y chromium; }
	@$(CHROMIUM) --headless --no-sandbox --version

airflow: install
	bash scripts/airflow-dev.sh

lint: install
	$(BIN)/ruff check .

demo: install
	$(BIN)/python scripts/demo.py

clean:
	rm -rf crawldata .pytest_cache test-artifacts
