#!/usr/bin/env bash
# Starts a throwaway PostgreSQL 15 server (Debian's postgresql-15) for running the test suite against
# the oldest version pgrelay supports:
#
#   url="$(bash scripts/start-postgres15.sh [FOLDER])"
#   TEST_DATABASE_URL="$url" npx vitest run
#   bash scripts/stop-postgres15.sh FOLDER
#
# It installs postgresql-15 with apt when its binaries are missing, without letting Debian create and
# start its own `main` cluster, then initdb's a cluster in FOLDER (a new temporary folder when none
# is given), starts it on a free loopback port and prints its admin URL on stdout; everything else
# goes to stderr. Its settings are the embedded server's (src/store/embedded.ts), with a smaller
# buffer pool.
set -euo pipefail

BIN="${POSTGRES15_BIN:-/usr/lib/postgresql/15/bin}"

install_postgres15() {
  source "$(dirname "$0")/lib/apt.sh"
  apt_ready "PostgreSQL 15"
  # postgresql-common first: its createcluster.conf decides whether installing a server version also
  # creates (and starts) a `main` cluster on port 5432, which we do not want.
  apt_install_missing "PostgreSQL 15" postgresql-common
  local conf=/etc/postgresql-common/createcluster.conf
  if ! grep -Eq '^\s*create_main_cluster\s*=\s*false' "$conf" 2>/dev/null; then
    echo "create_main_cluster = false" | $SUDO tee -a "$conf" >/dev/null
  fi
  apt_install_missing "PostgreSQL 15" postgresql-15
}

[ -x "$BIN/postgres" ] || install_postgres15
[ -x "$BIN/postgres" ] || { echo "postgresql-15 is installed but $BIN/postgres is missing" >&2; exit 1; }

# PostgreSQL refuses to run as root: then it runs as `postgres` (Debian's package creates that user).
as_postgres=()
if [ "$(id -u)" -eq 0 ]; then
  id -u postgres >/dev/null 2>&1 || useradd --system --user-group --no-create-home postgres
  as_postgres=(runuser -u postgres --)
fi

dir="${1:-$(mktemp -d "${TMPDIR:-/tmp}/pgrelay-pg15-XXXXXX")}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
# mktemp -d makes 0700 folders, which `postgres` could not enter.
chmod 755 "$dir"
pgdata="$dir/pg"
[ ! -e "$pgdata" ] || { echo "$pgdata already exists: give an empty folder" >&2; exit 1; }
mkdir "$pgdata"
touch "$dir/postgres.log"
[ "${#as_postgres[@]}" -eq 0 ] || chown postgres: "$pgdata" "$dir/postgres.log"
# Marks the folder as this script's, so that the stop script may delete it.
touch "$dir/.pgrelay-postgres15"

password="$(head -c 18 /dev/urandom | base64 | tr '+/' '-_')"
pwfile="$pgdata.password"
printf '%s\n' "$password" >"$pwfile"
chmod 644 "$pwfile"
"${as_postgres[@]}" "$BIN/initdb" -D "$pgdata" -U postgres --auth=scram-sha-256 --pwfile="$pwfile" \
  --encoding=UTF8 --locale=C >&2
rm -f "$pwfile"

port="$(node -e "const s = require('node:net').createServer(); s.listen(0, '127.0.0.1', () => { console.log(s.address().port); s.close(); });")"
# The embedded server's settings: the suite opens up to 200 connections at once.
cat >>"$pgdata/postgresql.conf" <<EOF
# pgrelay test server
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = ''
max_connections = 200
shared_buffers = 512MB
work_mem = 16MB
maintenance_work_mem = 256MB
max_wal_size = 4GB
EOF

if ! "${as_postgres[@]}" "$BIN/pg_ctl" start -D "$pgdata" -l "$dir/postgres.log" -w -t 120 >&2; then
  tail -n 20 "$dir/postgres.log" >&2
  exit 1
fi
echo "PostgreSQL 15 is running on 127.0.0.1:$port (log $dir/postgres.log); stop it with: bash scripts/stop-postgres15.sh $dir" >&2
echo "postgres://postgres:$password@127.0.0.1:$port/postgres"
