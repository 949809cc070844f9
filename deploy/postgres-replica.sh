#!/usr/bin/env bash
# Entrypoint of the `postgres-replica` service (docker-compose.yml): a streaming hot standby of the
# `postgres` service, read by the relays through READ_DATABASE_URL.
#
# First start (no cluster in PGDATA, i.e. an empty volume): wait for the primary, then copy it with
#   pg_basebackup -R -X stream -S $REPLICATION_SLOT
# into a scratch folder beside PGDATA, and move that into place only once the copy is complete, so an
# interrupted copy is simply started again at the next start. -R writes standby.signal and the
# primary_conninfo / primary_slot_name settings (in postgresql.auto.conf), so the server comes up as a
# standby that streams from the primary through the slot the primary's init script created.
#
# Every start then hands over to the image's own entrypoint (docker-entrypoint.sh): it finds a cluster,
# skips initdb, drops to the postgres user and starts `postgres` with this container's command.
#
# Environment: PGDATA (the image's: /var/lib/postgresql/18/docker), PRIMARY_HOST, PRIMARY_PORT,
# REPLICATION_USER, REPLICATION_PASSWORD, REPLICATION_SLOT.
#
# To rebuild the replica from scratch (for instance after the primary dropped its slot's WAL, see
# max_slot_wal_keep_size in docker-compose.yml): stop it, delete its volume, start it again.
set -Eeuo pipefail

: "${PGDATA:?PGDATA must be set (the postgres image sets it)}"
primary_host="${PRIMARY_HOST:-postgres}"
primary_port="${PRIMARY_PORT:-5432}"
replication_user="${REPLICATION_USER:-replicator}"
replication_slot="${REPLICATION_SLOT:-replica1}"

log() { printf 'postgres-replica: %s\n' "$*" >&2; }

# Runs a command as the postgres user (the container starts as root; with `user:` set it already is).
as_postgres() {
	if [ "$(id -u)" = 0 ]; then gosu postgres "$@"; else "$@"; fi
}

if [ ! -s "$PGDATA/PG_VERSION" ]; then
	: "${REPLICATION_PASSWORD:?REPLICATION_PASSWORD must be set}"
	if [ -d "$PGDATA" ] && [ -n "$(ls -A "$PGDATA")" ]; then
		log "$PGDATA is not empty but holds no cluster; refusing to overwrite it (empty the volume to start over)"
		exit 1
	fi

	parent="$(dirname "$PGDATA")"
	scratch="$PGDATA.basebackup"
	mkdir -p "$parent"
	if [ "$(id -u)" = 0 ]; then chown postgres:postgres "$parent"; fi
	rm -rf "$scratch"

	log "waiting for the primary at $primary_host:$primary_port"
	until pg_isready -q -h "$primary_host" -p "$primary_port"; do sleep 1; done

	log "copying the primary into $scratch (slot $replication_slot)"
	# The password goes through the environment, not the command line; -R writes it into
	# primary_conninfo, which the standby needs for every later connection.
	PGPASSWORD="$REPLICATION_PASSWORD" as_postgres pg_basebackup \
		--pgdata="$scratch" \
		--dbname="host=$primary_host port=$primary_port user=$replication_user application_name=$replication_slot" \
		--write-recovery-conf \
		--wal-method=stream \
		--slot="$replication_slot" \
		--checkpoint=fast \
		--no-password ||
		{
			log "base backup failed; retrying at the next start. A primary whose volume predates deploy/postgres-primary-init.sh has no replication role or slot: run that script there (see its header)."
			exit 1
		}
	chmod 700 "$scratch"
	if [ -d "$PGDATA" ]; then rmdir "$PGDATA"; fi
	mv "$scratch" "$PGDATA"
	log "base backup complete; starting as a hot standby"
fi

exec docker-entrypoint.sh "$@"
