#!/usr/bin/env bash
# suite.sh KIND BIN - the ctest entries db/suite_KIND: scripts/test-db on
# a database of this test run. KIND is postgresql (a fresh database on the
# run's server, INBOXD_TEST_PG_PORT), sqlite (a file) or mssql (the
# connection string in INBOXD_TEST_MSSQL; without one scripts/test-db says
# why it skips).
set -euo pipefail
kind=${1:?usage: suite.sh postgresql|sqlite|mssql BIN}
bin=${2:?usage: suite.sh KIND BIN}
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/inboxd-suite.XXXXXX)
db=""
cleanup() {
  if [ -n "$db" ]; then
    psql -h 127.0.0.1 -p "$INBOXD_TEST_PG_PORT" -U postgres -d postgres -qAt \
      -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

case "$kind" in
  postgresql)
    if [ -z "${INBOXD_TEST_PG_PORT:-}" ]; then
      [ "${INBOXD_TEST_REQUIRE_PG:-}" = 1 ] && { echo "INBOXD_TEST_PG_PORT is unset" >&2; exit 1; }
      echo "skipped: INBOXD_TEST_PG_PORT is unset"; exit 77
    fi
    db=inboxd_suite_$$
    psql -h 127.0.0.1 -p "$INBOXD_TEST_PG_PORT" -U postgres -d postgres -qAt -c "CREATE DATABASE $db" >/dev/null
    connstr="Driver={PostgreSQL Unicode};Server=127.0.0.1;Port=$INBOXD_TEST_PG_PORT;Database=$db;Uid=postgres;Pwd="
    ;;
  sqlite) connstr="Driver={SQLite3};Database=$tmp/suite.db;Timeout=3000" ;;
  mssql) connstr=${INBOXD_TEST_MSSQL:-} ;;
  *) echo "suite.sh: unknown kind $kind" >&2; exit 2 ;;
esac
"$root/scripts/test-db" --bin "$bin" "$connstr"
