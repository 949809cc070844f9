// What the soak reads from the relay's GET /metrics (src/relay/metrics.ts: prom-client's default
// process metrics and the relay's own), reduced to the few gauges the report tracks.

/** Prometheus text exposition → value per series ("name" or "name{labels}" as written). */
export function parsePrometheusText(text: string): Map<string, number> {
  const series = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][\w:]*(?:\{.*\})?)\s+(\S+)/.exec(line);
    if (m) series.set(m[1], Number(m[2]));
  }
  return series;
}

/** The sum of every series of `name`, whatever its labels; null when the relay exposes none. */
export function total(series: Map<string, number>, name: string): number | null {
  let sum = 0, found = false;
  for (const [key, value] of series) {
    if (key === name || key.startsWith(name + '{')) {
      sum += value;
      found = true;
    }
  }
  return found ? sum : null;
}

export interface RelayReading {
  rssMb: number | null;
  heapUsedMb: number | null;
  /** p99 of the event-loop delay since the previous scrape (prom-client resets its histogram on each). */
  loopP99Ms: number | null;
  handles: number | null;
  poolInUse: number | null;
  poolWaiting: number | null;
  poolSize: number | null;
  connections: number | null;
  storedTotal: number | null;
  slowClientCloses: number | null;
}

export function readingOf(series: Map<string, number>): RelayReading {
  const scaled = (name: string, factor: number) => {
    const v = total(series, name);
    return v === null ? null : v * factor;
  };
  return {
    rssMb: scaled('process_resident_memory_bytes', 2 ** -20),
    heapUsedMb: scaled('nodejs_heap_size_used_bytes', 2 ** -20),
    loopP99Ms: scaled('nodejs_eventloop_lag_p99_seconds', 1000),
    handles: total(series, 'nodejs_active_handles_total'),
    poolInUse: total(series, 'pgrelay_db_pool_in_use'),
    poolWaiting: total(series, 'pgrelay_db_pool_waiting'),
    poolSize: total(series, 'pgrelay_db_pool_connections'),
    connections: total(series, 'nostr_connections'),
    storedTotal: total(series, 'nostr_events_stored_total'),
    slowClientCloses: total(series, 'nostr_slow_client_disconnects_total'),
  };
}

/** Scrapes the relay (ws:// URL) once; undefined when it does not answer within 5 s. */
export async function scrapeRelay(relayUrl: string, token: string): Promise<RelayReading | undefined> {
  try {
    const res = await fetch(relayUrl.replace(/^ws/, 'http') + '/metrics', { headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(5000) });
    if (!res.ok) return undefined;
    return readingOf(parsePrometheusText(await res.text()));
  } catch {
    return undefined;
  }
}

/** GET /ready: 200 once the relay reaches its database again. */
export async function relayReady(relayUrl: string): Promise<boolean> {
  try {
    const res = await fetch(relayUrl.replace(/^ws/, 'http') + '/ready', { signal: AbortSignal.timeout(2000) });
    await res.arrayBuffer();
    return res.status === 200;
  } catch {
    return false;
  }
}
