// What the load runner reads about the processes under test, from /proc (Linux; elsewhere every
// reading is undefined and the table shows "–"): CPU time of the relay, of the embedded PostgreSQL
// and of k6 (a reaped child: our cutime), the relay's RSS, and its established connections.
import { execFileSync } from 'node:child_process';
import { readFileSync, readdirSync, readlinkSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

let ticks: number | undefined;
function clockTicks(): number {
  if (ticks === undefined) {
    try {
      ticks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      ticks = 100;
    }
  }
  return ticks;
}

/** Fields of /proc/<pid>/stat after the command name (field 3 onwards, so index 0 = state). */
function statFields(pid: number | 'self' | `${number}/task/${number}`): string[] | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return text.slice(text.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}

/** User + system CPU seconds of a process. */
export function cpuSeconds(pid: number): number | undefined {
  const f = statFields(pid);
  return f ? (Number(f[11]) + Number(f[12])) / clockTicks() : undefined;
}

/** User + system CPU seconds of a process' main thread (a Node process: its event loop). */
export function mainThreadCpuSeconds(pid: number): number | undefined {
  const f = statFields(`${pid}/task/${pid}`);
  return f ? (Number(f[11]) + Number(f[12])) / clockTicks() : undefined;
}

/**
 * CPU seconds the hypervisor gave to others while this machine's CPUs wanted to run, all CPUs
 * together (/proc/stat's `steal`; 0 on bare metal). During a measurement it is time no process here
 * was counted for and none of them could use.
 */
export function stolenCpuSeconds(): number | undefined {
  try {
    const first = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!.trim().split(/\s+/);
    // cpu user nice system idle iowait irq softirq steal …
    return first[0] === 'cpu' && first.length > 8 ? Number(first[8]) / clockTicks() : undefined;
  } catch {
    return undefined;
  }
}

/** CPU seconds of this process' children that have exited and been waited for (k6 runs, here). */
export function reapedChildrenCpuSeconds(): number | undefined {
  const f = statFields('self');
  return f ? (Number(f[13]) + Number(f[14])) / clockTicks() : undefined;
}

/** The embedded PostgreSQL's postmaster and its backends (children), from DATA_DIR/pg/postmaster.pid. */
export function postgresPids(dataDir: string): number[] {
  let postmaster: number;
  try {
    postmaster = Number(readFileSync(path.join(dataDir, 'pg', 'postmaster.pid'), 'utf8').split('\n')[0]);
  } catch {
    return [];
  }
  const pids = [postmaster];
  try {
    for (const entry of readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      const f = statFields(Number(entry));
      if (f && Number(f[1]) === postmaster) pids.push(Number(entry));
    }
  } catch {
    return [];
  }
  return pids;
}

/**
 * CPU seconds of a set of processes that come and go (PostgreSQL backends: the relay's pool opens
 * and closes connections): `sample()` records every process seen, `seconds()` adds up the CPU
 * each used since it was first sampled (all of it for processes born after the first sample).
 * Sample often: a backend that exits between two samples takes its last CPU with it.
 */
export function cpuTracker(pids: () => number[]) {
  const first = new Map<number, number>();
  const last = new Map<number, number>();
  let started = false;
  const sample = () => {
    for (const pid of pids()) {
      const s = cpuSeconds(pid);
      if (s === undefined) continue;
      if (!first.has(pid)) first.set(pid, started ? 0 : s);
      last.set(pid, s);
    }
    started = true;
  };
  sample();
  return {
    sample,
    seconds(): number | undefined {
      if (last.size === 0) return undefined;
      let total = 0;
      for (const [pid, s] of last) total += s - first.get(pid)!;
      return total;
    },
  };
}

export function rssBytes(pid: number): number | undefined {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** Inodes of the sockets a process holds open (its /proc/<pid>/fd links "socket:[inode]"). */
function socketInodes(pid: number): Set<string> | undefined {
  try {
    const inodes = new Set<string>();
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      try {
        const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
        if (m) inodes.add(m[1]);
      } catch {
        /* closed meanwhile */
      }
    }
    return inodes;
  } catch {
    return undefined;
  }
}

/**
 * ESTABLISHED TCP connections on local port `port` (the relay's side of each client socket); with
 * `pid`, only sockets that process holds, so another program's connection that happens to use the
 * same (ephemeral) port number is not counted.
 */
export function establishedConnections(port: number, pid?: number): number | undefined {
  const owned = pid === undefined ? undefined : socketInodes(pid);
  let count = 0;
  let read = false;
  const hexPort = port.toString(16).toUpperCase().padStart(4, '0');
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
      read = true;
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      if (cols.length > 9 && cols[3] === '01' && cols[1].endsWith(`:${hexPort}`) && (!owned || owned.has(cols[9]))) count++;
    }
  }
  return read ? count : undefined;
}

/** The open-file limit a child process gets (`ulimit -Hn`: Node and Go raise their soft limit to it). */
export function openFileLimit(): number | undefined {
  try {
    const text = execFileSync('sh', ['-c', 'ulimit -Hn'], { encoding: 'utf8' }).trim();
    return text === 'unlimited' ? Infinity : Number(text);
  } catch {
    return undefined;
  }
}

/** A one-line description of this machine for the report. */
export function machineDescription(): string {
  const cpus = os.cpus();
  const mem = (os.totalmem() / 2 ** 30).toFixed(0);
  return `${cpus.length} × ${cpus[0]?.model?.trim() ?? 'unknown CPU'}, ${mem} GiB RAM, ${os.type()} ${os.release()}, Node ${process.version}`;
}

/** Load average over the last minute, to note a busy (shared) machine in the report. */
export function loadAverage(): number {
  return os.loadavg()[0];
}
