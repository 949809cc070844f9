#!/usr/bin/env bash
# Installs pgBackRest from Debian/Ubuntu's own packages, and a PostgreSQL server when this machine has
# none under /usr/lib/postgresql, for the recipe in docs/operations.md and its test
# (test/ops/pgbackrest.test.ts), which runs its own throwaway cluster. Idempotent: with both present it
# only prints pgBackRest's version. It starts no service.
set -euo pipefail

source "$(dirname "$0")/lib/apt.sh"
apt_install_missing pgBackRest pgbackrest
shopt -s nullglob
servers=(/usr/lib/postgresql/*/bin/postgres)
if [ "${#servers[@]}" -eq 0 ]; then apt_install_missing "a PostgreSQL server" postgresql; fi

pgbackrest version
