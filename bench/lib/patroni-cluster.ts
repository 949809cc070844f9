// A PostgreSQL cluster with automatic failover on loopback, for the failover test and bench: one
// etcd member (v3 API) holding the leader lock, three Patroni nodes each running PostgreSQL 15 with
// synchronous replication, all in one temporary folder. Faults are real: SIGKILL of a node's Patroni
// and postmaster with all its backends, SIGSTOP of the same, a planned switchover through Patroni's
// REST API. Everything waits by polling etcd's and Patroni's own health answers.
//
// It lives under bench/ so the bench (compiled) and the tests (test/support/patroni.ts) share it.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { accessSync, constants, readdirSync, readFileSync } from 'node:fs';
import { chown, mkdir, mkdtemp, open, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { packageRoot } from '../../src/paths.js';
import { freePort, postgresUser, type RunAs } from '../../src/store/embedded.js';

export const PG_BIN_DIR = process.env.HA_PG_BIN_DIR ?? '/usr/lib/postgresql/15/bin';
export const PATRONI = process.env.HA_PATRONI ?? path.join(packageRoot(), 'load/ha/venv/bin/patroni');
export const ETCD = process.env.HA_ETCD ?? '/usr/bin/etcd';

/** What is missing for a cluster on this machine, each with how to get it; empty when all is there. */
export function missingHaPeers(): string[] {
  const install = 'npm run ha:install';
  const missing: string[] = [];
  if (!executable(ETCD)) missing.push(`etcd (looked for ${ETCD}, or set HA_ETCD): ${install} installs Debian's etcd-server`);
  if (!executable(PATRONI)) missing.push(`Patroni (looked for ${PATRONI}, or set HA_PATRONI): ${install} makes the virtualenv load/ha/venv`);
  for (const bin of ['postgres', 'initdb', 'pg_ctl', 'pg_rewind', 'pg_basebackup']) {
    if (!executable(path.join(PG_BIN_DIR, bin))) {
      missing.push(`PostgreSQL 15 server binaries (no ${bin} in ${PG_BIN_DIR}, or set HA_PG_BIN_DIR): ${install} installs Debian's postgresql-15`);
      break;
    }
  }
  return missing;
}

function executable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** Patroni's timing: a lost leader's lock expires after `ttl` s; Patroni wants loop_wait + 2 × retry_timeout ≤ ttl. */
export const PATRONI_TIMING = { ttl: 20, loop_wait: 2, retry_timeout: 9 };

const NODE_NAMES = ['pg1', 'pg2', 'pg3'] as const;
const DATABASE = 'nostr';
const RELAY_ROLE = 'pgrelay';
const READY_TIMEOUT_MS = 180_000;
const HTTP_TIMEOUT_MS = 1_500;

export interface HaNode {
  name: string;
  pgPort: number;
  restPort: number;
}

export interface ClusterMember {
  name: string;
  role: string; // leader, sync_standby, replica (Patroni's words)
  state: string; // running, streaming, stopped, starting, …
  lag?: number | string;
  timeline?: number;
}

export interface PatroniCluster {
  nodes: HaNode[];
  /** libpq's multi-host URL of the `nostr` database on every node: `postgres://…@127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3/nostr?target_session_attrs=read-write`. */
  url: string;
  /** The same database on one node only (single-host): for reading a node directly. */
  nodeUrl(name: string): string;
  /** The node whose Patroni says it is the running primary holding the leader lock (`GET /primary` → 200), if any. */
  primary(): Promise<string | undefined>;
  /** Polls until a node other than `not` is primary; returns its name. */
  waitForPrimary(options?: { not?: string; timeoutMs?: number }): Promise<string>;
  /** The members as the first Patroni that answers sees them (`GET /cluster`). */
  members(): Promise<ClusterMember[]>;
  /** Polls until every node is up: the leader running, the others streaming from it, one of them as the synchronous standby. */
  waitHealthy(timeoutMs?: number): Promise<void>;
  /** SIGKILL of the node's Patroni and of its postmaster with all its backends, at once: the host is gone. */
  killHost(name: string): Promise<void>;
  /** SIGSTOP of the node's Patroni and its postmaster with all its backends; SIGCONT after `ms`. Resolves once continued. */
  freeze(name: string, ms: number): Promise<void>;
  /** A planned switchover (`POST /switchover` to the leader) to the synchronous standby, or `candidate`; resolves once the new primary answers. Returns its name. */
  switchover(candidate?: string): Promise<string>;
  /** Starts a killed node's Patroni again: it rejoins as a replica, rewinding with pg_rewind where it diverged. */
  restart(name: string): Promise<void>;
  /** Kills every process of the cluster and removes its folder. */
  stop(): Promise<void>;
  /** Where the cluster's logs are (etcd.log, pgN/patroni.log), for a failure message. */
  dir: string;
  /** The last lines of each log, for a failure message. */
  logTails(lines?: number): string;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function pollUntil<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined | false>, detail?: () => string): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined && value !== false) return value;
      lastError = undefined;
    } catch (error) {
      lastError = error;
    }
    if (Date.now() >= deadline) {
      const cause = lastError instanceof Error ? ` (last error: ${lastError.message})` : '';
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${cause}${detail ? `\n${detail()}` : ''}`);
    }
    await sleep(200);
  }
}

async function http(url: string, init: RequestInit = {}): Promise<Response> {
  return fetch(url, { signal: AbortSignal.timeout(HTTP_TIMEOUT_MS), ...init });
}

/** Every process whose command line names `dir`: the catch-all that makes sure nothing outlives the cluster. */
function processesUnder(dir: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes(dir)) pids.push(Number(entry));
    } catch {
      /* exited meanwhile */
    }
  }
  return pids;
}

/** Parent and state of every process (fields 3 and 4 of /proc/pid/stat). */
function processTable(): Map<number, { ppid: number; state: string }> {
  const table = new Map<number, { ppid: number; state: string }>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const [state, ppid] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      table.set(Number(entry), { ppid: Number(ppid), state });
    } catch {
      /* exited meanwhile */
    }
  }
  return table;
}

/** `root` and all its descendants that are alive (not zombies). */
function processTree(root: number): number[] {
  const table = processTable();
  if (!table.has(root) || table.get(root)!.state === 'Z') return [];
  const tree = [root];
  for (let i = 0; i < tree.length; i++) {
    for (const [pid, p] of table) if (p.ppid === tree[i] && p.state !== 'Z') tree.push(pid);
  }
  return tree;
}

const alive = (pids: number[]) => {
  const table = processTable();
  return pids.filter((pid) => table.has(pid) && table.get(pid)!.state !== 'Z');
};

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    /* already gone */
  }
}

interface NodeState extends HaNode {
  dir: string;
  dataDir: string;
  config: string;
  log: string;
  patroni?: ChildProcess;
}

/** Starts etcd and three Patroni nodes in a new temporary folder; on any failure, kills all it started. */
export async function startPatroniCluster(): Promise<PatroniCluster> {
  const missing = missingHaPeers();
  if (missing.length) throw new Error(`a Patroni cluster needs:\n- ${missing.join('\n- ')}`);
  const runAs = await postgresUser();
  const dir = await mkdtemp(path.join(tmpdir(), 'pgrelay-ha-'));
  if (runAs) await chown(dir, runAs.uid, runAs.gid);
  const secret = () => randomBytes(12).toString('hex');
  const passwords = { superuser: secret(), replication: secret(), relay: secret() };
  const [etcdClient, etcdPeer] = [await freePort(), await freePort()];
  const nodes: NodeState[] = [];
  for (const name of NODE_NAMES) {
    const nodeDir = path.join(dir, name);
    nodes.push({ name, pgPort: await freePort(), restPort: await freePort(), dir: nodeDir, dataDir: path.join(nodeDir, 'data'), config: path.join(nodeDir, 'patroni.yml'), log: path.join(nodeDir, 'patroni.log') });
  }
  let etcd: ChildProcess | undefined;
  let stopped: Promise<void> | undefined;

  const killAll = () => {
    for (const node of nodes) {
      if (node.patroni?.pid) signal(-node.patroni.pid, 'SIGKILL');
      signalPostgres(node, 'SIGKILL');
    }
    if (etcd?.pid) signal(etcd.pid, 'SIGKILL');
    for (const pid of processesUnder(dir)) signal(pid, 'SIGKILL');
  };
  // A test runner or bench that exits without stop() must not leave a cluster running.
  const onExit = () => killAll();
  process.once('exit', onExit);

  const stop = () =>
    (stopped ??= (async () => {
      process.removeListener('exit', onExit);
      killAll();
      await pollUntil('the cluster processes to exit', 30_000, async () => {
        const left = processesUnder(dir);
        left.forEach((pid) => signal(pid, 'SIGKILL'));
        return left.length === 0;
      });
      await rm(dir, { recursive: true, force: true });
    })());

  /** Each log's problems (its last lines saying ERROR, FATAL, CRITICAL or Exception) and its last lines. */
  const logTails = (lines = 25) =>
    [path.join(dir, 'etcd.log'), ...nodes.map((n) => n.log)]
      .map((file) => {
        const name = path.relative(dir, file);
        try {
          const all = readFileSync(file, 'utf8').split('\n');
          const problems = all.filter((l) => /ERROR|FATAL|CRITICAL|Exception/.test(l)).slice(-10);
          return `${name}${problems.length ? ` (problems):\n${problems.join('\n')}\n${name}` : ''} (last lines):\n${all.slice(-lines).join('\n')}`;
        } catch {
          return `${name}: none`;
        }
      })
      .join('\n');

  const node = (name: string) => {
    const found = nodes.find((n) => n.name === name);
    if (!found) throw new Error(`no node ${name} (nodes: ${NODE_NAMES.join(', ')})`);
    return found;
  };

  const startPatroni = async (n: NodeState) => {
    const log = await open(n.log, 'a');
    try {
      n.patroni = spawn(PATRONI, [n.config], {
        ...runAs,
        // Its own process group, so a kill takes its helpers (pg_rewind, pg_basebackup) with it.
        detached: true,
        stdio: ['ignore', log.fd, log.fd],
        env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: n.dir, LC_ALL: 'C', LANG: 'C' },
      });
    } finally {
      await log.close();
    }
    n.patroni.unref();
  };

  const members = async (): Promise<ClusterMember[]> => {
    let lastError: unknown;
    for (const n of nodes) {
      try {
        const response = await http(`http://127.0.0.1:${n.restPort}/cluster`);
        if (response.ok) return ((await response.json()) as { members: ClusterMember[] }).members;
      } catch (error) {
        lastError = error;
      }
    }
    throw new Error(`no Patroni answered GET /cluster${lastError instanceof Error ? ` (${lastError.message})` : ''}`);
  };

  const isPrimary = async (n: NodeState) => {
    try {
      const response = await http(`http://127.0.0.1:${n.restPort}/primary`);
      await response.body?.cancel();
      return response.status === 200;
    } catch {
      return false;
    }
  };

  // The first node to say so, without waiting out a frozen node's timeout.
  const primary = () =>
    new Promise<string | undefined>((resolve) => {
      let unanswered = nodes.length;
      for (const n of nodes) {
        void isPrimary(n).then((yes) => {
          if (yes) resolve(n.name);
          else if (--unanswered === 0) resolve(undefined);
        });
      }
    });

  const waitForPrimary = ({ not, timeoutMs = 120_000 }: { not?: string; timeoutMs?: number } = {}) =>
    pollUntil(`a primary${not ? ` other than ${not}` : ''}`, timeoutMs, async () => {
      const name = await primary();
      return name !== undefined && name !== not ? name : undefined;
    }, logTails);

  const healthy = async () => {
    const list = await members();
    return (
      list.length === nodes.length &&
      list.some((m) => m.role === 'leader' && m.state === 'running') &&
      list.some((m) => m.role === 'sync_standby' && m.state === 'streaming') &&
      list.every((m) => (m.role === 'leader' ? m.state === 'running' : m.state === 'streaming'))
    );
  };
  const HEALTHY = 'the leader running and every other node streaming, one as the synchronous standby';
  const waitHealthy = async (timeoutMs = READY_TIMEOUT_MS): Promise<void> => {
    await pollUntil(HEALTHY, timeoutMs, healthy, logTails);
  };

  // A node that wins the race to initialise the cluster but fails its bootstrap (seen on a busy
  // machine) gives the initialize key back and exits; started again, it joins the one that did.
  const restartsAtStart = new Map<string, number>();
  const restartExited = async () => {
    for (const n of nodes) {
      if (!n.patroni || (n.patroni.exitCode === null && n.patroni.signalCode === null)) continue;
      const restarts = restartsAtStart.get(n.name) ?? 0;
      if (restarts >= 2) throw new Error(`${n.name}'s Patroni exited ${restarts + 1} times while the cluster started`);
      restartsAtStart.set(n.name, restarts + 1);
      await startPatroni(n);
    }
  };

  try {
    const etcdData = path.join(dir, 'etcd');
    const etcdLog = await open(path.join(dir, 'etcd.log'), 'a');
    try {
      etcd = spawn(
        ETCD,
        [
          '--name', 'etcd1',
          '--data-dir', etcdData,
          '--listen-client-urls', `http://127.0.0.1:${etcdClient}`,
          '--advertise-client-urls', `http://127.0.0.1:${etcdClient}`,
          '--listen-peer-urls', `http://127.0.0.1:${etcdPeer}`,
          '--initial-advertise-peer-urls', `http://127.0.0.1:${etcdPeer}`,
          '--initial-cluster', `etcd1=http://127.0.0.1:${etcdPeer}`,
          '--initial-cluster-state', 'new',
          '--initial-cluster-token', path.basename(dir),
        ],
        { stdio: ['ignore', etcdLog.fd, etcdLog.fd], detached: true },
      );
    } finally {
      await etcdLog.close();
    }
    etcd.unref();
    await pollUntil('etcd to be healthy', 60_000, async () => {
      const response = await http(`http://127.0.0.1:${etcdClient}/health`);
      return response.ok && ((await response.json()) as { health?: string }).health === 'true';
    }, logTails);

    for (const n of nodes) {
      await mkdir(n.dir, { recursive: true, mode: 0o700 });
      await writeFile(n.config, JSON.stringify(patroniConfig(n, path.basename(dir), etcdClient, passwords), null, 2), { mode: 0o600 });
      if (runAs) await Promise.all([chown(n.dir, runAs.uid, runAs.gid), chown(n.config, runAs.uid, runAs.gid)]);
    }
    // All three at once: one wins the initialize key and runs initdb, the others take a base backup from it.
    await Promise.all(nodes.map(startPatroni));
    await pollUntil(HEALTHY, READY_TIMEOUT_MS, async () => (await restartExited(), healthy()), logTails);

    const leader = await waitForPrimary();
    const admin = new pg.Client({ host: '127.0.0.1', port: node(leader).pgPort, user: 'postgres', password: passwords.superuser, database: 'postgres' });
    await admin.connect();
    try {
      await admin.query(`CREATE ROLE ${RELAY_ROLE} LOGIN PASSWORD '${passwords.relay}'`);
      await admin.query(`CREATE DATABASE ${DATABASE} OWNER ${RELAY_ROLE}`);
    } finally {
      await admin.end();
    }
  } catch (error) {
    const tails = logTails();
    await stop().catch(() => undefined);
    throw new Error(`${(error as Error).message}\n${tails}`);
  }

  const hosts = nodes.map((n) => `127.0.0.1:${n.pgPort}`).join(',');
  return {
    nodes: nodes.map(({ name, pgPort, restPort }) => ({ name, pgPort, restPort })),
    url: `postgres://${RELAY_ROLE}:${passwords.relay}@${hosts}/${DATABASE}?target_session_attrs=read-write`,
    nodeUrl: (name) => `postgres://${RELAY_ROLE}:${passwords.relay}@127.0.0.1:${node(name).pgPort}/${DATABASE}`,
    primary,
    waitForPrimary,
    members,
    waitHealthy,
    async killHost(name) {
      const n = node(name);
      const patroni = n.patroni && n.patroni.exitCode === null && n.patroni.signalCode === null ? n.patroni : undefined;
      const exited = patroni && new Promise((r) => patroni.once('exit', r));
      if (patroni?.pid) signal(-patroni.pid, 'SIGKILL');
      const killed = signalPostgres(n, 'SIGKILL');
      await exited;
      await pollUntil(`${name}'s PostgreSQL processes to exit`, 30_000, async () => alive(killed).length === 0);
    },
    async freeze(name, ms) {
      const n = node(name);
      const patroni = n.patroni?.pid;
      if (patroni) signal(-patroni, 'SIGSTOP');
      const stopped = signalPostgres(n, 'SIGSTOP');
      await sleep(ms);
      stopped.forEach((pid) => signal(pid, 'SIGCONT'));
      if (patroni) signal(-patroni, 'SIGCONT');
    },
    async switchover(candidate) {
      const leader = await waitForPrimary();
      const list = await members();
      const to = candidate ?? list.find((m) => m.role === 'sync_standby')?.name;
      if (!to) throw new Error(`no synchronous standby to switch over to: ${JSON.stringify(list)}`);
      const response = await http(`http://127.0.0.1:${node(leader).restPort}/switchover`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ leader, candidate: to }),
        signal: AbortSignal.timeout(60_000),
      });
      const text = await response.text();
      if (!response.ok) throw new Error(`switchover from ${leader} to ${to} refused: ${response.status} ${text}`);
      return waitForPrimary({ not: leader });
    },
    async restart(name) {
      const n = node(name);
      if (n.patroni && n.patroni.exitCode === null && n.patroni.signalCode === null) throw new Error(`${name}'s Patroni is still running`);
      await startPatroni(n);
    },
    stop,
    dir,
    logTails,
  };
}

/** The node's postmaster pid (first line of postmaster.pid), if the file is there. */
function postmasterPid(n: NodeState): number | undefined {
  try {
    const pid = Number(readFileSync(path.join(n.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    return pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Sends `sig` to the node's postmaster and every process it started. Each backend, walsender and
 * auxiliary process runs in a session of its own (PostgreSQL calls setsid() in each child), so the
 * postmaster's process group does not reach them: they are found by parentage. The postmaster is
 * stopped first, so that it forks nothing new meanwhile. Returns the processes signalled.
 */
function signalPostgres(n: NodeState, sig: 'SIGKILL' | 'SIGSTOP' | 'SIGCONT'): number[] {
  const postmaster = postmasterPid(n);
  if (postmaster === undefined || processTree(postmaster).length === 0) return [];
  if (sig !== 'SIGCONT') signal(postmaster, 'SIGSTOP');
  const tree = processTree(postmaster);
  for (const pid of tree.slice(1)) signal(pid, sig);
  signal(postmaster, sig);
  return tree;
}

function patroniConfig(n: NodeState, scope: string, etcdPort: number, passwords: { superuser: string; replication: string }) {
  return {
    scope,
    namespace: '/pgrelay/',
    name: n.name,
    log: { level: 'INFO' },
    restapi: { listen: `127.0.0.1:${n.restPort}`, connect_address: `127.0.0.1:${n.restPort}` },
    etcd3: { hosts: [`127.0.0.1:${etcdPort}`], protocol: 'http' },
    bootstrap: {
      dcs: {
        ...PATRONI_TIMING,
        maximum_lag_on_failover: 1024 * 1024,
        synchronous_mode: true,
        postgresql: {
          use_pg_rewind: true,
          use_slots: true,
          parameters: {
            max_connections: 200,
            shared_buffers: '64MB',
            wal_level: 'replica',
            hot_standby: 'on',
            max_wal_senders: 10,
            max_replication_slots: 10,
            wal_keep_size: '256MB',
            wal_log_hints: 'on',
          },
        },
      },
      initdb: [{ encoding: 'UTF8' }, { locale: 'C' }, 'data-checksums'],
    },
    postgresql: {
      listen: `127.0.0.1:${n.pgPort}`,
      connect_address: `127.0.0.1:${n.pgPort}`,
      data_dir: n.dataDir,
      bin_dir: PG_BIN_DIR,
      pgpass: path.join(n.dir, 'pgpass'),
      authentication: {
        superuser: { username: 'postgres', password: passwords.superuser },
        replication: { username: 'replicator', password: passwords.replication },
        rewind: { username: 'postgres', password: passwords.superuser },
      },
      parameters: { unix_socket_directories: n.dir },
      // A node that cannot be rewound (or whose timeline forked off) is recloned rather than left out.
      remove_data_directory_on_rewind_failure: true,
      remove_data_directory_on_diverged_timelines: true,
      pg_hba: ['local all all trust', 'host replication replicator 127.0.0.1/32 scram-sha-256', 'host all all 127.0.0.1/32 scram-sha-256'],
    },
  };
}
