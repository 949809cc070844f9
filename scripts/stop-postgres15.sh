#!/usr/bin/env bash
# Stops the PostgreSQL 15 server that scripts/start-postgres15.sh started in FOLDER and deletes
# FOLDER. It deletes only a folder that script made (it leaves a mark there).
set -euo pipefail

dir="${1:?usage: stop-postgres15.sh FOLDER (the folder start-postgres15.sh named)}"
BIN="${POSTGRES15_BIN:-/usr/lib/postgresql/15/bin}"
[ -e "$dir/.pgrelay-postgres15" ] || { echo "$dir was not made by start-postgres15.sh; left alone" >&2; exit 1; }

as_postgres=()
[ "$(id -u)" -ne 0 ] || as_postgres=(runuser -u postgres --)
# Immediate: the folder is deleted next, so a shutdown checkpoint would write what nobody reads.
if "${as_postgres[@]}" "$BIN/pg_ctl" status -D "$dir/pg" >/dev/null 2>&1; then
  "${as_postgres[@]}" "$BIN/pg_ctl" stop -D "$dir/pg" -m immediate -w -t 60 >&2
fi
rm -rf "$dir"
