#!/usr/bin/env bash
# `make airflow`: a local Airflow 3 (api-server + UI, scheduler with the LocalExecutor, dag-processor,
# triggerer) running this repo's `recrawl` DAG and `/crawl` API plugin, on SQLite, from .venv.
#
#   UI:        http://localhost:${AIRFLOW_PORT:-8080}   log in as admin / ${AIRFLOW_ADMIN_PASSWORD:-admin}
#   Trigger:   Dags → recrawl → Trigger (the form shows crawl id, seeds, budgets, politeness, scope)
#   Crawl API: http://localhost:8080/crawl/docs (token: POST /auth/token {"username","password"})
#   Stop:      Ctrl-C (SIGINT stops every component)
#
# Settings (env, all optional):
#   AIRFLOW_HOME           default .airflow/ in the repo (metadata DB, logs, passwords file)
#   CRAWL_ROOT             default crawldata/ in the repo, the same folder `make demo` and DuckDB use
#   CRAWL_RESOLVE          e.g. '*.sim.test=127.0.0.1:8800' to crawl the simulated web
#   RECRAWL_SCHEDULE       default 'none' here (manual runs only); '@hourly' etc. for scheduled rounds
#   AIRFLOW_PORT, AIRFLOW_ADMIN_PASSWORD
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$REPO/.venv/bin"
if [[ ! -x "$BIN/airflow" ]]; then
  echo "no $BIN/airflow: run 'make install' first" >&2
  exit 1
fi

export AIRFLOW_HOME="${AIRFLOW_HOME:-$REPO/.airflow}"
export CRAWL_ROOT="${CRAWL_ROOT:-$REPO/crawldata}"
export RECRAWL_SCHEDULE="${RECRAWL_SCHEDULE:-none}"
port="${AIRFLOW_PORT:-8080}"
mkdir -p "$AIRFLOW_HOME" "$CRAWL_ROOT"

# Fixed login (the generated one changes per home): written once, edit the file to change it.
passwords="$AIRFLOW_HOME/passwords.json"
if [[ ! -s "$passwords" ]]; then
  "$BIN/python" -c 'import json, os, sys; json.dump({"admin": os.environ.get("AIRFLOW_ADMIN_PASSWORD", "admin")}, open(sys.argv[1], "w"))' "$passwords"
fi

export PATH="$BIN:$PATH"                      # standalone starts its components as `airflow ...`
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"   # DAG, plugin and `python -m crawl` import the engine
export AIRFLOW__CORE__DAGS_FOLDER="$REPO/dags"
export AIRFLOW__CORE__PLUGINS_FOLDER="$REPO/plugins"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=False
export AIRFLOW__CORE__PARALLELISM="${AIRFLOW__CORE__PARALLELISM:-4}"   # not 32 forked executor workers
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="admin:admin"
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE="$passwords"
export AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="${AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL:-30}"
export AIRFLOW__API__PORT="$port"
export AIRFLOW__API__BASE_URL="${AIRFLOW__API__BASE_URL:-http://localhost:$port}"

echo "Airflow home: $AIRFLOW_HOME   crawl root: $CRAWL_ROOT   schedule: $RECRAWL_SCHEDULE"
echo "UI: http://localhost:$port  (admin / password in $passwords)   Crawl API: http://localhost:$port/crawl/docs"
cd "$AIRFLOW_HOME"
exec "$BIN/airflow" standalone
