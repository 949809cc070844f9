// bench:relay-mix's arithmetic: latency histograms from several client processes added up and read
// as percentiles, and how connections are split over relay workers and client processes.
import { describe, expect, it } from 'vitest';
import { histogramPercentile, latency, mergeHistograms, relayWorkers, subscriberShares, type GoHistogram } from '../../bench/lib/relay-mix-stats.js';

/** A histogram as load/relay-mix builds it (buckets 1 % wide, in µs). */
function histogram(samplesMs: number[]): GoHistogram {
  const h: GoHistogram = { buckets: {}, n: 0, sumUs: 0, maxUs: 0 };
  for (const ms of samplesMs) {
    const us = Math.max(1, ms * 1000);
    const b = Math.floor(Math.log(us) / Math.log(1.01));
    h.buckets[b] = (h.buckets[b] ?? 0) + 1;
    h.n++;
    h.sumUs += us;
    h.maxUs = Math.max(h.maxUs, us);
  }
  return h;
}

describe('relay-mix histograms', () => {
  it('adds up the processes and reads percentiles to within the 1 % bucket width', () => {
    const all = Array.from({ length: 3000 }, (_, i) => (i + 1) / 3); // 0.33 … 1000 ms
    const parts = [0, 1, 2].map((k) => histogram(all.filter((_, i) => i % 3 === k)));
    const merged = mergeHistograms([...parts, undefined]);
    expect(merged.n).toBe(3000);
    expect(merged.maxUs).toBeCloseTo(1_000_000, 3);
    const l = latency(merged);
    for (const [p, exact] of [[l.p50, 500], [l.p95, 950], [l.p99, 990]] as const) {
      expect(Math.abs(p - exact) / exact).toBeLessThan(0.011);
    }
    expect(l.max).toBeCloseTo(1000, 3);
    expect(l.mean).toBeCloseTo(all.reduce((s, x) => s + x, 0) / all.length, 3);
  });

  it('never reads a percentile above the largest sample, and NaN when empty', () => {
    const h = histogram([5, 5, 5, 5]);
    expect(histogramPercentile(h, 100)).toBeLessThanOrEqual(5);
    expect(histogramPercentile(h, 50)).toBeGreaterThan(4.95);
    expect(histogramPercentile(mergeHistograms([]), 95)).toBeNaN();
  });
});

describe('relay-mix connection split', () => {
  it('keeps every relay process under 15,000 connections (RLIMIT_NOFILE 20,000 per process)', () => {
    expect([1000, 10_000, 50_000, 100_000].map((n) => relayWorkers(n))).toEqual([1, 1, 4, 7]);
    for (const n of [1, 15_000, 15_001, 99_999, 250_000]) expect(n / relayWorkers(n)).toBeLessThanOrEqual(15_000);
  });

  it('spreads subscribers over client processes, each from its own source address', () => {
    const shares = subscriberShares(100_000, 16_000);
    expect(shares).toHaveLength(7);
    expect(shares.reduce((s, x) => s + x.count, 0)).toBe(100_000);
    expect(Math.max(...shares.map((s) => s.count))).toBeLessThanOrEqual(16_000);
    expect(new Set(shares.map((s) => s.source)).size).toBe(7);
    shares.forEach((s, i) => expect(s.first).toBe(i === 0 ? 0 : shares[i - 1].first + shares[i - 1].count));
    expect(subscriberShares(10, 16_000)).toEqual([{ first: 0, count: 10, source: '127.0.0.10' }]);
  });
});
