// The load runner's report, from k6 summaries (`k6 run --summary-export`) to the ladder table and
// the SVG plot. No k6 needed: the summaries are written here in k6's format.
import { describe, expect, it } from 'vitest';
import { crossedThresholds, latencySvg, ladderTable, logTicks, niceTicks, shapeTable, type K6Summary, type Step } from '../../bench/load/report.js';

const trend = (p50: number, p90: number, p95: number, p99: number, max: number, count: number) => ({
  avg: p50, min: 1, med: p50, max, 'p(50)': p50, 'p(90)': p90, 'p(95)': p95, 'p(99)': p99, count,
});

function querySummary(p95: number, reqsPerSecond: number, crossed: boolean): K6Summary {
  return {
    metrics: {
      eose_ms: { ...trend(4, 9, p95, 80, 120.5, 900), thresholds: { 'p(95)<50': crossed } },
      'eose_ms{shape:thread}': { ...trend(2, 3, 3.5, 4, 5, 450), thresholds: { 'max>=0': false } },
      'eose_ms{shape:home-feed}': { ...trend(30, 60, 70, 90, 120.5, 450), thresholds: { 'max>=0': false } },
      reqs: { count: 900, rate: reqsPerSecond },
      req_events: { count: 90_000, rate: reqsPerSecond * 100 },
      req_events_per_req: trend(100, 500, 500, 500, 500, 900),
      relay_errors: { count: 0, rate: 0, thresholds: { 'count==0': false } },
      checks: { passes: 900, fails: 0, value: 1, thresholds: { 'rate==1': false } },
    },
  };
}

const steps: Step[] = [
  { x: 1, exitCode: 0, summary: querySummary(12.25, 95.5, false), system: { relayCpu: 0.31, postgresCpu: 0.52, k6Cpu: 0.1, stolenCpu: 0.02 } },
  { x: 10, exitCode: 99, summary: querySummary(61, 160, true), system: { relayCpu: 0.6, postgresCpu: 1.2, k6Cpu: 0.15 } },
];

describe('load report', () => {
  it('writes one table row per ladder step with percentiles, throughput, errors, CPU and the verdict', () => {
    expect(ladderTable('query', steps).split('\n')).toEqual([
      '| VUs | samples | p50 | p90 | p95 | p99 | max | REQ/s | events/REQ | events/s | errors | relay CPU | PG CPU | k6 CPU | stolen | thresholds |',
      '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|',
      '| 1 | 900 | 4.00 | 9.00 | 12.3 | 80.0 | 120.5 | 95.5 | 100 | 9,550 | 0 | 0.31 | 0.52 | 0.10 | 0.02 | ✓ |',
      '| 10 | 900 | 4.00 | 9.00 | 61.0 | 80.0 | 120.5 | 160.0 | 100 | 16,000 | 0 | 0.60 | 1.20 | 0.15 | – | ✗ eose_ms: p(95)<50 |',
    ]);
  });

  it('lists the crossed thresholds only', () => {
    expect(crossedThresholds(querySummary(61, 1, true))).toEqual(['eose_ms: p(95)<50']);
    expect(crossedThresholds(querySummary(1, 1, false))).toEqual([]);
  });

  it('tabulates p50 / p95 per query shape', () => {
    expect(shapeTable(steps).split('\n')).toEqual([
      '| shape | 1 VUs | 10 VUs |',
      '|---|---:|---:|',
      '| home-feed | 30.0 / 70.0 | 30.0 / 70.0 |',
      '| thread | 2.00 / 3.50 | 2.00 / 3.50 |',
    ]);
  });

  it('marks a step whose k6 run failed', () => {
    const failed: Step = { ...steps[0], exitCode: 107 };
    expect(ladderTable('query', [failed])).toContain('| k6 failed (exit 107) |');
  });

  it('plots p50, p90, p95, p99 and throughput with one point per step, and the p95 target', () => {
    const svg = latencySvg('query', steps, { title: 'query ladder', targetMs: 50 });
    expect(svg.startsWith('<svg xmlns="http://www.w3.org/2000/svg"')).toBe(true);
    for (const series of ['p50', 'p90', 'p95', 'p99', 'throughput']) {
      const line = new RegExp(`data-series="${series}"[^>]*points="([^"]+)"`).exec(svg);
      expect(line, series).not.toBeNull();
      expect(line![1].split(' ')).toHaveLength(2);
    }
    expect(svg).toContain('p95 target 50 ms');
    expect(svg).toContain('>query ladder</text>');
  });

  it('puts a higher latency higher on the plot', () => {
    const svg = latencySvg('query', steps, { title: 't' });
    const [first, second] = /data-series="p95"[^>]*points="([^"]+)"/.exec(svg)![1].split(' ').map((p) => Number(p.split(',')[1]));
    expect(second).toBeLessThan(first); // SVG y grows downwards
  });

  it('chooses round axis ticks', () => {
    expect(niceTicks(93)).toEqual([0, 20, 40, 60, 80, 100]);
    expect(logTicks(1, 1000)).toEqual([1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]);
  });
});
