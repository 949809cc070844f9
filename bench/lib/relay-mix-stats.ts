// bench:relay-mix: the arithmetic of the run, apart from processes and sockets so it can be tested.
// The Go client (load/relay-mix) reports latencies as histograms in buckets 1 % wide (bucket b holds
// [1.01^b, 1.01^(b+1)) µs); the processes' histograms are added up here and read as percentiles.

export interface GoHistogram {
  buckets: Record<string, number>;
  n: number;
  sumUs: number;
  maxUs: number;
}

export interface Latency {
  n: number;
  p50: number;
  p95: number;
  p99: number;
  max: number;
  mean: number;
}

export function mergeHistograms(hs: Array<GoHistogram | undefined>): GoHistogram {
  const buckets: Record<string, number> = {};
  let n = 0;
  let sumUs = 0;
  let maxUs = 0;
  for (const h of hs) {
    if (!h) continue;
    for (const [b, c] of Object.entries(h.buckets)) buckets[b] = (buckets[b] ?? 0) + c;
    n += h.n;
    sumUs += h.sumUs;
    maxUs = Math.max(maxUs, h.maxUs);
  }
  return { buckets, n, sumUs, maxUs };
}

/** Percentile p (0–100) in milliseconds: the middle of the bucket holding the nearest-rank sample. */
export function histogramPercentile(h: GoHistogram, p: number): number {
  if (h.n === 0) return NaN;
  const rank = Math.min(h.n, Math.max(1, Math.ceil((p / 100) * h.n)));
  const sorted = Object.entries(h.buckets)
    .map(([b, c]) => [Number(b), c] as const)
    .sort((a, b) => a[0] - b[0]);
  let seen = 0;
  for (const [b, c] of sorted) {
    seen += c;
    if (seen >= rank) return Math.min(1.01 ** (b + 0.5), h.maxUs) / 1000;
  }
  return h.maxUs / 1000;
}

export function latency(h: GoHistogram): Latency {
  return {
    n: h.n,
    p50: histogramPercentile(h, 50),
    p95: histogramPercentile(h, 95),
    p99: histogramPercentile(h, 99),
    max: h.n ? h.maxUs / 1000 : NaN,
    mean: h.n ? h.sumUs / h.n / 1000 : NaN,
  };
}

/**
 * RLIMIT_NOFILE is per process (its hard limit here: 20,000, not raisable without CAP_SYS_RESOURCE),
 * and a relay process holds one descriptor per client plus its database pool, logs and listeners:
 * at most `perWorker` (15,000) connections to each relay process, so WORKERS = ceil(N / 15,000),
 * which leaves room for an uneven deal of connections among them.
 */
export function relayWorkers(connections: number, perWorker = 15_000): number {
  return Math.max(1, Math.ceil(connections / perWorker));
}

/**
 * The subscriber connections split over client processes of at most `perProcess` each, each process
 * from its own loopback source address: every source address has its own ~28,000 ephemeral ports
 * towards the relay's address and port.
 */
export function subscriberShares(connections: number, perProcess: number): Array<{ first: number; count: number; source: string }> {
  const processes = Math.max(1, Math.ceil(connections / perProcess));
  const shares = [];
  let first = 0;
  for (let i = 0; i < processes; i++) {
    const count = Math.floor(connections / processes) + (i < connections % processes ? 1 : 0);
    shares.push({ first, count, source: `127.0.0.${10 + i}` });
    first += count;
  }
  return shares;
}
