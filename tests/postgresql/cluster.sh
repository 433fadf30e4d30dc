#!/usr/bin/env bash
# A PostgreSQL server of the tests' own: Debian's postgresql package, a cluster made in a
# temporary directory, listening on a unix socket there (and, with a port, on 127.0.0.1),
# owned by the package's postgres user (the server refuses to run as root).
#
#   cluster.sh start DIR [PORT]   makes DIR/data and starts it; prints the conninfo
#   cluster.sh stop DIR           stops it (immediately) and removes DIR
#   cluster.sh stop-server DIR    stops the server at once (as a crash would), keeping DIR:
#                                 `start DIR` starts it again on the same data
#   cluster.sh run DIR COMMAND…   start, run COMMAND with HATCHERY_TEST_POSTGRESQL set to
#                                 the conninfo, stop; exits with COMMAND's status
set -euo pipefail

bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -x "$bin/postgres" ] || { echo "cluster.sh: Debian's postgresql is not installed (deploy/install-deps.sh installs it)" >&2; exit 1; }
user=postgres
id "$user" >/dev/null 2>&1 || { echo "cluster.sh: no $user user (the postgresql package makes it)" >&2; exit 1; }
as_user() { if [ "$(id -u)" = 0 ]; then runuser -u "$user" -- "$@"; else "$@"; fi; }

conninfo() { echo "host=$1 user=hatchery dbname=hatchery"; }

start() {
  local dir=$1 port=${2:-}
  mkdir -p "$dir"
  [ "$(id -u)" = 0 ] && chown "$user" "$dir"
  if [ ! -d "$dir/data" ]; then
    as_user "$bin/initdb" -D "$dir/data" -U hatchery -A trust -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 ||
      { cat "$dir/initdb.log" >&2; exit 1; }
  fi
  local listen="''"
  [ -n "$port" ] && listen="127.0.0.1"
  as_user "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
    -o "-k $dir -c listen_addresses=$listen ${port:+-p $port} -c unix_socket_permissions=0777" start >/dev/null ||
    { cat "$dir/server.log" >&2; exit 1; }
  # The database the tests name; each test may make more of its own.
  as_user "$bin/psql" -h "$dir" ${port:+-p $port} -U hatchery -d postgres -qAt \
    -c "SELECT 1 FROM pg_database WHERE datname = 'hatchery'" | grep -q 1 ||
    as_user "$bin/createdb" -h "$dir" ${port:+-p $port} -U hatchery hatchery
  echo "$(conninfo "$dir")${port:+ port=$port}"
}

stop() {
  local dir=$1
  [ -d "$dir/data" ] && as_user "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}

case "${1:-}" in
  start) start "$2" "${3:-}" ;;
  stop) stop "$2" ;;
  stop-server)
    as_user "$bin/pg_ctl" -D "$2/data" -m immediate -w stop >/dev/null ;;
  run)
    dir=$2; shift 2
    trap 'stop "$dir"' EXIT
    HATCHERY_TEST_POSTGRESQL=$(start "$dir") "$@" ;;
  *) echo "usage: cluster.sh start DIR [PORT] | stop DIR | stop-server DIR | run DIR COMMAND..." >&2; exit 2 ;;
esac
