#!/usr/bin/env bash
# Runs a command beside a throwaway PostgreSQL server, then stops the server (also when the
# command fails or the script is interrupted).
#
#   bash scripts/with-postgres.sh cargo test -p idemdb-postgres --test postgres
#   bash scripts/with-postgres.sh cargo bench -p idemdb-postgres
#
# The server:
# * uses `initdb`, `pg_ctl` and `postgres` from the PATH, else the newest of
#   /usr/lib/postgresql/*/bin, else installs Debian's `postgresql` package (apt-get) first;
# * lives in a new temporary data directory, listens on 127.0.0.1 only, on a free port, with
#   its Unix socket in the data directory, `trust` authentication for the `postgres` role on
#   loopback, and max_connections = 200 (the race test opens 4 x 16 connections and more);
# * refuses to run as root (PostgreSQL's own rule): when this script runs as root, the server
#   runs as the unprivileged system user `idemdb-pg`, created here if it does not exist, through
#   `runuser`.
#
# The command sees:
#   IDEMDB_PG_URL      postgresql://postgres@127.0.0.1:PORT/postgres
#   IDEMDB_PG_RESTART  a shell command that restarts the server in immediate mode (a crash:
#                      no checkpoint, recovery at start) and waits until it accepts connections
#   IDEMDB_PG_REQUIRED 1: the adapter's tests fail instead of reporting themselves ignored
#   IDEMDB_PGBOUNCER_URL  the same database through PgBouncer in transaction pooling mode
#                      (pool_mode = transaction), started on another free loopback port with its
#                      files in the data directory; Debian's `pgbouncer` package is installed
#                      first when it is missing and this runs as root (without it, and not root,
#                      the variable is not set and the PgBouncer test says why it cannot run)
set -euo pipefail

if [ $# -eq 0 ]; then
  echo "usage: $0 COMMAND [ARG...]" >&2
  exit 2
fi

find_bin_dir() {
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1 && command -v postgres >/dev/null 2>&1; then
    dirname "$(command -v pg_ctl)"
    return 0
  fi
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -n "$dir" ] && [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && [ -x "$dir/postgres" ]; then
    echo "$dir"
    return 0
  fi
  return 1
}

if ! BIN=$(find_bin_dir); then
  echo "PostgreSQL binaries not found: installing Debian's postgresql package" >&2
  if [ "$(id -u)" -ne 0 ]; then
    echo "error: installing packages needs root; install postgresql (initdb, pg_ctl, postgres) first" >&2
    exit 1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  BIN=$(find_bin_dir) || { echo "error: postgresql installed but initdb/pg_ctl/postgres not found" >&2; exit 1; }
fi

PG_USER=idemdb-pg
if [ "$(id -u)" -eq 0 ]; then
  if ! id -u "$PG_USER" >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin "$PG_USER"
  fi
  as_pg() { (cd / && runuser -u "$PG_USER" -- "$@"); }
  RUN_AS="runuser -u $PG_USER --"
else
  as_pg() { (cd / && "$@"); }
  RUN_AS=""
fi

DATA=$(mktemp -d "${TMPDIR:-/tmp}/idemdb-pg.XXXXXX")
if [ "$(id -u)" -eq 0 ]; then chown "$PG_USER" "$DATA"; fi
chmod 700 "$DATA"

stop_server() {
  if [ -f "$DATA/pgbouncer.pid" ]; then
    kill "$(cat "$DATA/pgbouncer.pid")" 2>/dev/null || true
  fi
  if [ -f "$DATA/postmaster.pid" ]; then
    as_pg "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null 2>&1 || as_pg "$BIN/pg_ctl" -D "$DATA" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$DATA"
}
trap stop_server EXIT
# On a signal, end the command too, then exit (which stops the server): `wait` below returns
# at once when a signal arrives, where a foreground command would delay the trap until it ended.
child=""
on_signal() {
  if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null || true; wait "$child" 2>/dev/null || true; fi
  exit 130
}
trap on_signal INT TERM

as_pg "$BIN/initdb" -D "$DATA" -U postgres --auth=trust --encoding=UTF8 --locale=C --no-sync >/dev/null

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

started=""
for _ in 1 2 3 4 5 6 7 8; do
  PORT=$(( 20000 + RANDOM % 40000 ))
  port_free "$PORT" || continue
  # autovacuum off: a throwaway server needs none, and a worker analysing the catalogs mid-run
  # takes transaction ids that the adapter's tests count as their own (seen once, after a cold
  # build kept the server idle for minutes: 4 ids and 190 KB of WAL during a read-only check).
  if as_pg "$BIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -c port=$PORT -c unix_socket_directories=$DATA -c max_connections=200 -c autovacuum=off" \
      start >/dev/null; then
    started=yes
    break
  fi
done
if [ -z "$started" ]; then
  echo "error: the PostgreSQL server did not start; its log:" >&2
  cat "$DATA/server.log" >&2 || true
  exit 1
fi

start_pgbouncer() {
  local bouncer bport
  bouncer=$(command -v pgbouncer || ls /usr/sbin/pgbouncer 2>/dev/null || true)
  if [ -z "$bouncer" ] && [ "$(id -u)" -eq 0 ]; then
    echo "pgbouncer not found: installing Debian's pgbouncer package" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null || true
    bouncer=$(command -v pgbouncer || ls /usr/sbin/pgbouncer 2>/dev/null || true)
  fi
  if [ -z "$bouncer" ]; then
    echo "pgbouncer not found (apt-get install pgbouncer as root): IDEMDB_PGBOUNCER_URL is not set" >&2
    return 0
  fi
  for _ in 1 2 3 4 5 6 7 8; do
    bport=$(( 20000 + RANDOM % 40000 ))
    if [ "$bport" = "$PORT" ] || ! port_free "$bport"; then continue; fi
    printf '%s\n' "[databases]" "postgres = host=127.0.0.1 port=$PORT dbname=postgres" "[pgbouncer]" \
      "listen_addr = 127.0.0.1" "listen_port = $bport" "unix_socket_dir =" "auth_type = trust" \
      "auth_file = $DATA/pgbouncer-users.txt" "pool_mode = transaction" "max_client_conn = 500" \
      "default_pool_size = 40" "ignore_startup_parameters = extra_float_digits" \
      "logfile = $DATA/pgbouncer.log" "pidfile = $DATA/pgbouncer.pid" >"$DATA/pgbouncer.ini"
    echo '"postgres" ""' >"$DATA/pgbouncer-users.txt"
    if [ "$(id -u)" -eq 0 ]; then chown "$PG_USER" "$DATA/pgbouncer.ini" "$DATA/pgbouncer-users.txt"; fi
    if as_pg "$bouncer" -d -q "$DATA/pgbouncer.ini"; then
      for _ in $(seq 1 50); do
        if ! port_free "$bport"; then
          export IDEMDB_PGBOUNCER_URL="postgresql://postgres@127.0.0.1:$bport/postgres"
          echo "PgBouncer $("$bouncer" --version 2>/dev/null | head -n 1 | awk '{print $2}') (pool_mode = transaction) on 127.0.0.1:$bport" >&2
          return 0
        fi
        sleep 0.1
      done
    fi
  done
  echo "error: PgBouncer did not start; its log:" >&2
  cat "$DATA/pgbouncer.log" >&2 2>/dev/null || true
}

export IDEMDB_PG_URL="postgresql://postgres@127.0.0.1:$PORT/postgres"
export IDEMDB_PG_RESTART="cd / && $RUN_AS $BIN/pg_ctl -D $DATA -l $DATA/server.log -w -t 60 -m immediate restart >/dev/null"
export IDEMDB_PG_REQUIRED=1
echo "PostgreSQL $("$BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$PORT (data $DATA)" >&2
start_pgbouncer

status=0
"$@" &
child=$!
wait "$child" || status=$?
child=""
if [ "$status" -ne 0 ]; then
  echo "--- last lines of the PostgreSQL server log ---" >&2
  tail -n 30 "$DATA/server.log" >&2 || true
fi
exit "$status"
