#!/usr/bin/env bash
# Replication set-up of the primary (the `postgres` service of docker-compose.yml).
#
# The postgres image runs this once, from /docker-entrypoint-initdb.d/, when it creates the cluster in
# an empty volume: the server is up on its Unix socket only, as POSTGRES_USER (a superuser). It
#   1. creates the replication role REPLICATION_USER (LOGIN REPLICATION, password REPLICATION_PASSWORD);
#   2. lets that role, and only it, open replication connections with a password (pg_hba.conf);
#   3. creates one physical replication slot per name in REPLICATION_SLOTS (space- or comma-separated),
#      reserving WAL from now on, so the primary keeps the WAL a replica has not received yet.
# wal_level = replica, max_wal_senders and max_replication_slots are PostgreSQL's defaults already.
#
# Every step is idempotent. On a cluster created before this script was mounted (an existing volume)
# run it by hand; it then also reloads pg_hba.conf:
#   docker compose exec -u postgres postgres bash /docker-entrypoint-initdb.d/10-replication.sh
#
# The image sources a *.sh file that is not executable instead of running it, so this script changes no
# shell options and never exits: the image's own `set -e` stops the set-up at the first error.

pgrelay_setup_replication() {
	local user="${REPLICATION_USER:-replicator}"
	local password="${REPLICATION_PASSWORD:?REPLICATION_PASSWORD must be set}"
	local slots="${REPLICATION_SLOTS:-replica1}"
	local hba="$PGDATA/pg_hba.conf"
	local psql=(psql -v ON_ERROR_STOP=1 --no-psqlrc --no-password --username "${POSTGRES_USER:-postgres}" --dbname "${POSTGRES_DB:-${POSTGRES_USER:-postgres}}")

	# psql's :'name' and :"name" quote the values as a literal and an identifier.
	"${psql[@]}" --set user="$user" --set password="$password" <<-'EOSQL'
		SELECT format('CREATE ROLE %I WITH LOGIN REPLICATION', :'user')
		 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'user') \gexec
		ALTER ROLE :"user" WITH LOGIN REPLICATION PASSWORD :'password';
	EOSQL

	local slot
	for slot in ${slots//,/ }; do
		"${psql[@]}" --quiet --set slot="$slot" > /dev/null <<-'EOSQL'
			SELECT pg_create_physical_replication_slot(:'slot', true)
			 WHERE NOT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = :'slot');
		EOSQL
		printf 'replication slot %s ready\n' "$slot"
	done

	# `all` in the database column of the image's own line does not cover replication connections.
	local line="host replication $user all scram-sha-256"
	if ! grep -qxF "$line" "$hba"; then
		printf '\n# Streaming replicas (deploy/postgres-primary-init.sh)\n%s\n' "$line" >> "$hba"
	fi
	"${psql[@]}" --quiet --command 'SELECT pg_reload_conf()' > /dev/null
}

pgrelay_setup_replication
