// Scale-out under test: several relay processes on one database (live events cross between them
// through PostgreSQL LISTEN/NOTIFY), and a relay's cluster workers (WORKERS > 1) counted with it.
import { readFileSync, readdirSync } from 'node:fs';
import { createLogger } from '../../src/log.js';
import { startEmbeddedPostgres } from '../../src/store/embedded.js';
import { ensureDatabase, withDatabaseName } from '../../src/store/database.js';
import { cpuSeconds } from '../load/system.js';
import { startRelayProcess, type RelayProcess } from './relay-process.js';

export interface RelayGroup {
  relays: RelayProcess[];
  /** Stops the relays, then the embedded server if this group started it. */
  stop(): Promise<void>;
}

/**
 * `count` relay processes on one database: `databaseUrl`, or else the embedded server in `dataDir`.
 * One relay owns that server itself (DATA_DIR), as an operator runs it; several share it, started
 * and stopped here, through its `nostr` database (the one a relay given DATA_DIR uses). The relays
 * start one after the other, so only the first applies migrations.
 */
export async function startRelays(count: number, o: { dataDir: string; databaseUrl?: string; env?: Record<string, string> }): Promise<RelayGroup> {
  if (count === 1) {
    const relay = await startRelayProcess({ ...o.env, DATA_DIR: o.dataDir, DATABASE_URL: o.databaseUrl ?? '' });
    return { relays: [relay], stop: () => relay.stop() };
  }
  const embedded = o.databaseUrl ? undefined : await startEmbeddedPostgres(o.dataDir, 0, createLogger('warn', 2));
  const relays: RelayProcess[] = [];
  const stop = async () => {
    await Promise.all(relays.map((r) => r.stop()));
    await embedded?.stop();
  };
  try {
    let url = o.databaseUrl!;
    if (embedded) {
      await ensureDatabase(embedded.adminUrl, 'nostr');
      url = withDatabaseName(embedded.adminUrl, 'nostr');
    }
    for (let i = 0; i < count; i++) relays.push(await startRelayProcess({ ...o.env, DATABASE_URL: url }));
    return { relays, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** A relay process and its direct children: with WORKERS > 1, the cluster workers that hold the connections. */
export function relayPids(pid: number): number[] {
  const pids = [pid];
  try {
    for (const entry of readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      try {
        const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
        if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pid) pids.push(Number(entry));
      } catch {
        /* exited meanwhile */
      }
    }
  } catch {
    /* no /proc */
  }
  return pids;
}

/** CPU seconds of relay processes and their cluster workers (NaN where /proc cannot tell). */
export function relaysCpuSeconds(pids: number[]): number {
  return pids.flatMap(relayPids).reduce((sum, pid) => sum + (cpuSeconds(pid) ?? NaN), 0);
}
