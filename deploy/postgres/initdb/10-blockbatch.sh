#!/usr/bin/env bash
# Runs once, when the Postgres data volume is first initialised (the official image runs
# every script in /docker-entrypoint-initdb.d on an empty data directory only). Changing
# a password here later has no effect on an existing volume: use ALTER ROLE instead.
#
# Creates, next to the superuser the image makes from POSTGRES_USER:
#   * role `temporal` (LOGIN, CREATEDB): Temporal's auto-setup creates and migrates its own
#     databases (`temporal`, `temporal_visibility`) with it;
#   * role `blockbatch` and database `$BLOCKBATCH_DB_NAME` owned by it: blockbatch's source
#     of truth, kept apart from Temporal's databases. The worker applies the blockbatch
#     migrations itself at start-up, as the database owner.
set -euo pipefail

: "${TEMPORAL_DB_PASSWORD:?TEMPORAL_DB_PASSWORD must be set}"
: "${BLOCKBATCH_DB_PASSWORD:?BLOCKBATCH_DB_PASSWORD must be set}"
BLOCKBATCH_DB_NAME="${BLOCKBATCH_DB_NAME:-blockbatch}"

# Values are passed as psql variables and quoted by psql (:'x' / :"x"), never spliced
# into the SQL text, so a password with quotes or spaces is safe.
psql -v ON_ERROR_STOP=1 --no-psqlrc \
  --username "${POSTGRES_USER:-postgres}" --dbname postgres \
  -v temporal_pw="$TEMPORAL_DB_PASSWORD" \
  -v app_pw="$BLOCKBATCH_DB_PASSWORD" \
  -v app_db="$BLOCKBATCH_DB_NAME" <<'EOSQL'
CREATE ROLE temporal LOGIN CREATEDB PASSWORD :'temporal_pw';
CREATE ROLE blockbatch LOGIN PASSWORD :'app_pw';
CREATE DATABASE :"app_db" OWNER blockbatch;
REVOKE ALL ON DATABASE :"app_db" FROM PUBLIC;
GRANT ALL ON DATABASE :"app_db" TO blockbatch;
EOSQL

echo "blockbatch init: roles temporal, blockbatch and database ${BLOCKBATCH_DB_NAME} created"
