#!/usr/bin/env bash
# Installs what a PostgreSQL cluster with automatic failover needs on this machine, for the failover
# test (test/store/failover.test.ts) and `npm run bench:failover`: etcd (Debian's etcd-server), the
# PostgreSQL 15 server (Debian's postgresql-15, binaries in /usr/lib/postgresql/15/bin) and Patroni,
# from PyPI, in a virtualenv at load/ha/venv (ignored by git), pinned by load/ha/requirements.txt.
# Idempotent: what is there already is only reported. No service is started or enabled: the test
# and the bench run their own etcd and Patroni in a temporary folder.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
venv="$here/load/ha/venv"
requirements="$here/load/ha/requirements.txt"
pg_bin=/usr/lib/postgresql/15/bin

source "$(dirname "$0")/lib/apt.sh"

# Debian's postgresql-common makes and starts a `main` cluster when a server package is installed,
# unless its createcluster.conf says not to: postgresql-common first, then the setting, then the
# server (the cluster here is Patroni's to make).
if [ ! -x "$pg_bin/postgres" ]; then
  apt_ready "PostgreSQL 15"
  apt_install_missing "PostgreSQL 15" postgresql-common
  conf=/etc/postgresql-common/createcluster.conf
  if ! grep -Eq '^\s*create_main_cluster\s*=\s*false' "$conf" 2>/dev/null; then
    echo "setting create_main_cluster = false in $conf" >&2
    echo 'create_main_cluster = false' | ${SUDO:-} tee -a "$conf" >/dev/null
  fi
fi
apt_install_missing "etcd and PostgreSQL 15" etcd-server postgresql-15

# The packages also enable their services for the next boot; leave that choice to the operator.
for service in etcd postgresql; do
  if command -v systemctl >/dev/null 2>&1; then
    ${SUDO:-} systemctl disable "$service" >/dev/null 2>&1 || true
  elif command -v update-rc.d >/dev/null 2>&1; then
    ${SUDO:-} update-rc.d "$service" disable >/dev/null 2>&1 || true
  fi
done

# Patroni runs as the `postgres` user when this is root, so its interpreter must be one that user can
# reach: Debian's python3, not one under a home folder such as pyenv's.
python=/usr/bin/python3
if ! "$python" -m venv --help >/dev/null 2>&1 || ! "$python" -c 'import ensurepip' >/dev/null 2>&1; then
  apt_install_missing "Python's venv module" python3 python3-venv
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "creating the virtualenv load/ha/venv…" >&2
  "$python" -m venv "$venv"
fi
if ! "$venv/bin/python" -m pip freeze 2>/dev/null | sort | cmp -s - <(grep -v '^#' "$requirements" | sort); then
  echo "installing Patroni into load/ha/venv (load/ha/requirements.txt)…" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements" >&2
fi

echo "etcd $(etcd --version 2>/dev/null | sed -n 's/^etcd Version: //p') at $(command -v etcd)"
echo "PostgreSQL $("$pg_bin/postgres" --version | awk '{print $3}') at $pg_bin"
echo "Patroni $("$venv/bin/patroni" --version | awk '{print $2}') at $venv/bin/patroni"
