#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for tests and benches.
#
#   scripts/pg-cluster.sh DIR         start (creating it if needed) the cluster in DIR and print
#                                     its URL, postgres://postgres@127.0.0.1:PORT/postgres
#   scripts/pg-cluster.sh stop DIR    stop it
#
# The cluster listens on 127.0.0.1 only, on $PGPORT when set, else on a free port; its Unix socket
# is in DIR/socket. Authentication is `trust` (loopback and the socket only): never point this at
# data that matters. When the cluster in DIR is already running, its URL is printed again.
#
# Run as root, the server runs as the `postgres` user (initdb refuses root) and DIR is given to it;
# DIR's parent directories must let that user through (/tmp does). Run as another user, the
# server runs as that user. The superuser is `postgres` either way.
#
# stdout is the URL only; progress and errors go to stderr. Exit status 2: PostgreSQL is not
# installed (install the Debian package `postgresql`).
set -euo pipefail

usage() {
  echo "usage: $0 DIR | $0 stop DIR" >&2
  exit 64
}

action=start
if [ "${1:-}" = stop ]; then
  action=stop
  shift
fi
[ $# -eq 1 ] && [ -n "$1" ] || usage
dir=$1

# The server's binaries: on PATH, else the newest /usr/lib/postgresql/*/bin.
bindir=
if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
  bindir=$(dirname "$(readlink -f "$(command -v pg_ctl)")")
else
  for candidate in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V); do
    [ -x "$candidate/initdb" ] && [ -x "$candidate/pg_ctl" ] && bindir=$candidate
  done
fi
if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ] || [ ! -x "$bindir/pg_ctl" ]; then
  echo "PostgreSQL is not installed (no initdb/pg_ctl on PATH or under /usr/lib/postgresql/*/bin)." >&2
  echo "Install the Debian package: apt-get install postgresql" >&2
  exit 2
fi

mkdir -p "$dir"
dir=$(cd "$dir" && pwd -P)
data=$dir/data
socket=$dir/socket
# A Unix socket's path (DIR/socket/.s.PGSQL.PORT) must fit in 107 bytes.
if [ $((${#socket} + 18)) -gt 107 ]; then
  echo "$dir is too long a path for the cluster's Unix socket; use a shorter one" >&2
  exit 1
fi

# Who runs the server: the owner of an existing cluster; else, as root, `postgres`; else ourselves.
as_owner=()
if [ "$(id -u)" -eq 0 ]; then
  if [ -f "$data/PG_VERSION" ]; then
    owner=$(stat -c %U "$data")
  else
    owner=postgres
  fi
  if ! id -u "$owner" >/dev/null 2>&1; then
    echo "running as root, the server needs the user '$owner' (the Debian package postgresql creates it)" >&2
    exit 1
  fi
  if [ "$owner" = root ]; then
    echo "$data belongs to root; PostgreSQL will not run as root" >&2
    exit 1
  fi
  runuser=$(PATH=$PATH:/usr/sbin:/sbin command -v runuser || true)
  if [ -z "$runuser" ]; then
    echo "running as root, this script needs runuser (Debian package util-linux)" >&2
    exit 1
  fi
  as_owner=("$runuser" -u "$owner" --)
  if [ ! -f "$data/PG_VERSION" ]; then
    chown "$owner:" "$dir"
  fi
  if ! "${as_owner[@]}" test -w "$dir"; then
    echo "the user '$owner' cannot write to $dir (do its parent directories let it through?)" >&2
    exit 1
  fi
fi
run() {
  "${as_owner[@]}" "$@"
}

running() {
  [ -f "$data/PG_VERSION" ] && run "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1
}

# The port of the running cluster: line 4 of postmaster.pid.
running_port() {
  sed -n 4p "$data/postmaster.pid"
}

url() {
  echo "postgres://postgres@127.0.0.1:$1/postgres"
}

if [ "$action" = stop ]; then
  if running; then
    run "$bindir/pg_ctl" -D "$data" -m fast -w stop >&2
  else
    echo "no cluster running in $dir" >&2
  fi
  exit 0
fi

if running; then
  url "$(running_port)"
  exit 0
fi

if [ ! -f "$data/PG_VERSION" ]; then
  echo "creating a PostgreSQL cluster in $data" >&2
  if ! run "$bindir/initdb" -D "$data" -U postgres --auth=trust --encoding=UTF8 --locale=C \
    >"$dir/initdb.log" 2>&1; then
    cat "$dir/initdb.log" >&2
    exit 1
  fi
  run mkdir -p "$socket"
  run tee "$data/pg_hba.conf" >/dev/null <<'EOF'
# Throwaway test cluster (scripts/pg-cluster.sh): trust on the Unix socket and on loopback only.
local all all              trust
host  all all 127.0.0.1/32 trust
EOF
  run tee -a "$data/postgresql.conf" >/dev/null <<EOF

# Throwaway test cluster (scripts/pg-cluster.sh).
listen_addresses = '127.0.0.1'
unix_socket_directories = '$socket'
max_connections = 300
shared_buffers = 32MB
fsync = on
EOF
fi

# A port nothing listens on (the check and the start race with other programs, so a failed start
# on a port someone took meanwhile is retried on another).
port_free() {
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}
pick_port() {
  local port
  for _ in $(seq 1 200); do
    port=$((20000 + RANDOM % 40000))
    if port_free "$port"; then
      echo "$port"
      return 0
    fi
  done
  echo "no free port found on 127.0.0.1" >&2
  return 1
}

attempts=5
[ -n "${PGPORT:-}" ] && attempts=1
for attempt in $(seq 1 "$attempts"); do
  port=${PGPORT:-$(pick_port)}
  if ! port_free "$port"; then
    echo "port $port on 127.0.0.1 is taken" >&2
    exit 1
  fi
  if run "$bindir/pg_ctl" -D "$data" -l "$data/server.log" -o "-p $port" -w -t 60 start >/dev/null 2>&1; then
    url "$port"
    exit 0
  fi
  echo "starting PostgreSQL on port $port failed (attempt $attempt); server.log ends:" >&2
  tail -n 5 "$data/server.log" >&2 || true
done
exit 1
