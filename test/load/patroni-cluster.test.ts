// The faults of the Patroni cluster that the failover test and bench inject
// (bench/lib/patroni-cluster.ts) reach a node's whole PostgreSQL, backends included, and the
// cluster heals from them as Patroni promises.
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { skipWithoutPatroni, startPatroniCluster, type PatroniCluster } from '../support/patroni.js';
import { serverPass } from '../support/server-pass.js';

// The cluster is a server of its own: the second CI pass (another TEST_DATABASE_URL) has nothing to add.
const SKIPPED = serverPass || skipWithoutPatroni();

let cluster: PatroniCluster;
/** The node the kill took down, for the restart. */
let killed = '';
const clients: pg.Client[] = [];

async function connectTo(node: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: cluster.nodeUrl(node) });
  client.on('error', () => undefined); // the node is killed under it
  await client.connect();
  clients.push(client);
  return client;
}

/** Alive and not a zombie (state, after the command name in /proc/pid/stat). */
function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

describe.skipIf(SKIPPED)('a Patroni cluster on loopback', () => {
  beforeAll(async () => {
    cluster = await startPatroniCluster();
  }, 240_000);

  afterAll(async () => {
    await Promise.all(clients.map((c) => c.end().catch(() => undefined)));
    await cluster?.stop();
  }, 60_000);

  it('starts with a primary, a synchronous standby and a replica', async () => {
    const roles = (await cluster.members()).map((m) => m.role).sort();
    expect(roles).toEqual(['leader', 'replica', 'sync_standby']);
  });

  it('freezes the backends of a node with its postmaster, until the thaw', async () => {
    const client = await connectTo((await cluster.primary())!);
    const order: string[] = [];
    const thawed = cluster.freeze((await cluster.primary())!, 2_000).then(() => order.push('thawed'));
    const answered = client.query('SELECT 1').then(() => order.push('answered'));
    await Promise.all([thawed, answered]);
    expect(order).toEqual(['thawed', 'answered']);
  });

  it('ends the backends of a killed host with its postmaster', async () => {
    const primary = (await cluster.primary())!;
    const client = await connectTo(primary);
    const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    expect(running(rows[0].pid)).toBe(true);
    await cluster.killHost(primary);
    killed = primary;
    expect(running(rows[0].pid)).toBe(false);
    expect(await cluster.waitForPrimary({ not: primary })).not.toBe(primary);
  }, 120_000);

  it('takes a killed node back as a streaming replica once it is started again', async () => {
    await cluster.restart(killed);
    await cluster.waitHealthy();
    const member = (await cluster.members()).find((m) => m.name === killed)!;
    expect(member.role).not.toBe('leader');
    expect(member.state).toBe('streaming');
  }, 240_000);

  it('switches over to the synchronous standby', async () => {
    const standby = (await cluster.members()).find((m) => m.role === 'sync_standby')!.name;
    expect(await cluster.switchover()).toBe(standby);
  }, 120_000);
});
