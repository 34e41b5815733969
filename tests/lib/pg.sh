#!/usr/bin/env bash
# pg.sh - a throwaway PostgreSQL server for tests, without the system service.
#
#   tests/lib/pg.sh start DIR [PORT]   init (once) and start; prints the port
#   tests/lib/pg.sh stop DIR           fast shutdown
#   tests/lib/pg.sh kill DIR           immediate shutdown (a crash, for tests)
#   tests/lib/pg.sh port DIR           the port of a started server
#
# The server listens on 127.0.0.1 only, trusts local connections (user
# postgres, no password) and runs as the postgres user when started by root.
set -euo pipefail

cmd=${1:?usage: pg.sh start|stop|kill|port DIR [PORT]}
dir=${2:?usage: pg.sh start|stop|kill|port DIR [PORT]}
bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -x "$bindir/pg_ctl" ] || { echo "pg.sh: PostgreSQL server binaries not found (apt-get install postgresql)" >&2; exit 1; }

as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# A port nobody listens on, chosen at random below the ephemeral range.
free_port() {
  local p
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768-)
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
  done
  echo "pg.sh: no free port found" >&2; return 1
}

case "$cmd" in
start)
  port=${3:-}
  mkdir -p "$dir"
  [ "$(id -u)" = 0 ] && chown postgres: "$dir"
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    as_pg "$bindir/initdb" -D "$dir/data" -A trust -U postgres --no-sync >"$dir/initdb.log" 2>&1 \
      || { cat "$dir/initdb.log" >&2; exit 1; }
  fi
  if [ -z "$port" ]; then
    if [ -f "$dir/port" ]; then port=$(cat "$dir/port"); else port=$(free_port); fi
  fi
  echo "$port" >"$dir/port"
  [ "$(id -u)" = 0 ] && chown postgres: "$dir/port"
  as_pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/log" -w -t 60 \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=on" \
    start >/dev/null || { tail -n 20 "$dir/log" >&2; exit 1; }
  echo "$port"
  ;;
stop)
  [ -f "$dir/data/postmaster.pid" ] && as_pg "$bindir/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || true
  ;;
kill)
  [ -f "$dir/data/postmaster.pid" ] && as_pg "$bindir/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null || true
  ;;
port)
  cat "$dir/port"
  ;;
*)
  echo "pg.sh: unknown command $cmd" >&2; exit 2
  ;;
esac
