// The soak runner's judgement and report (bench/lib/soak-report.ts, soak-metrics.ts): trends,
// p95 stability, the per-interval table, the plot, and reading the relay's /metrics text. No relay.
import { describe, expect, it } from 'vitest';
import { parsePrometheusText, readingOf, total } from '../../bench/lib/soak-metrics.js';
import {
  clock, countVerdict, handlesVerdict, inOutage, linearFit, p95Verdict, passed, renderResults, rssVerdict, sampleTable, soakSvg, type Outage, type SoakReport, type SoakSample, type Timed,
} from '../../bench/lib/soak-report.js';

function sample(t: number, rssMb: number, handles = 40, extra: Partial<SoakSample['clients']> = {}): SoakSample {
  return {
    t,
    relay: { rssMb, heapUsedMb: 30, loopP99Ms: 11.2, handles, poolInUseMax: 2, poolWaitingMax: 0, poolSize: 4, connections: 28, storedTotal: t * 3000, cpuPercent: 7 },
    clients: { okN: 3000, okP95: 7.5, reqN: 600, reqP95: 4.25, liveN: 5000, liveP95: 8, acked: 3000, errors: 0, ackedTotal: t * 3000, slowCloses: 0, unexpected: 0, ...extra },
    load: 0.8,
    dbRestarts: 0,
  };
}

/** 30 one-minute samples: RSS from `rss(t)`. */
const run = (rss: (t: number) => number, handles: (t: number) => number = () => 40) => Array.from({ length: 31 }, (_, t) => sample(t, rss(t), handles(t)));

/** A wobble that is not a trend: ±4 MB around the level. */
const wobble = (t: number) => 4 * Math.sin(t * 1.7);

describe('trends after warm-up', () => {
  it('fits a least-squares line', () => {
    const fit = linearFit([[0, 1], [1, 3], [2, 5], [3, 7]]);
    expect(fit.slope).toBeCloseTo(2);
    expect(fit.intercept).toBeCloseTo(1);
  });

  it('passes RSS that wanders around a level, and ignores the warm-up climb', () => {
    const samples = run((t) => (t < 5 ? 80 + t * 15 : 150 + wobble(t)));
    expect(rssVerdict(samples, 5)).toMatchObject({ pass: true });
  });

  it('fails RSS that climbs 1.5 MB a minute after warm-up', () => {
    const v = rssVerdict(run((t) => 150 + 1.5 * t + wobble(t)), 5);
    expect(v.pass).toBe(false);
    expect(v.measured).toMatch(/^1\.\d\d MB\/min, 3\d\.\d MB \(\d+\.\d %\) over 25\.0 min$/);
  });

  it('fails a slow creep that adds more than 10 % over the run, even under 1 MB/min', () => {
    expect(rssVerdict(run((t) => 60 + 0.5 * t), 5)).toMatchObject({ pass: false });
    expect(rssVerdict(run((t) => 300 + 0.5 * t), 5)).toMatchObject({ pass: true });
  });

  it('fails handles that grow by one a minute, passes handles that move with connection churn', () => {
    expect(handlesVerdict(run(() => 150, (t) => 40 + t), 5).pass).toBe(false);
    expect(handlesVerdict(run(() => 150, (t) => 40 + (t % 3) - 1), 5).pass).toBe(true);
  });

  it('passes handles whose fitted growth is within the noise of a few sockets, whatever the slope', () => {
    const short = Array.from({ length: 9 }, (_, i) => sample(1 + i / 4, 150, [34, 35, 36, 35, 36, 36, 36, 36, 36][i]));
    expect(handlesVerdict(short, 1)).toMatchObject({ pass: true, measured: expect.stringMatching(/^0\.\d\d\/min, \d\.\d over the run \(34–36\)$/) });
  });

  it('passes RSS whose fitted growth is within 5 MB, whatever the slope (a short run)', () => {
    const short = Array.from({ length: 9 }, (_, i) => sample(1 + i / 4, [171.9, 170.4, 171.3, 174, 169.6, 169.8, 170.6, 171.1, 173.4][i]));
    expect(rssVerdict(short, 1).pass).toBe(true);
  });

  it('does not judge a trend from fewer than 5 samples after warm-up', () => {
    const samples = run((t) => 100 + 10 * t).slice(0, 8);
    expect(rssVerdict(samples, 5)).toMatchObject({ pass: null, measured: '3 samples after warm-up' });
    expect(passed([rssVerdict(samples, 5)])).toBe(true);
  });
});

describe('p95 stability', () => {
  /** 100 latencies a minute from minute 0 to 30, `ms(t)` each. */
  const latencies = (ms: (t: number, i: number) => number): Timed[] =>
    Array.from({ length: 3000 }, (_, i) => ({ t: i / 100, ms: ms(i / 100, i) }));

  it('passes when the last third is no worse than twice the first (or 20 ms more)', () => {
    expect(p95Verdict('OK', latencies((_, i) => 5 + (i % 10)), 5, 30, []).pass).toBe(true);
    expect(p95Verdict('OK', latencies((t, i) => (t > 21 ? 25 : 5) + (i % 10)), 5, 30, []).pass).toBe(true);
  });

  it('fails when the last third is more than twice the first and 20 ms above it', () => {
    const v = p95Verdict('REQ → EOSE', latencies((t, i) => (t > 21 ? 60 : 10) + (i % 10)), 5, 30, []);
    expect(v).toMatchObject({ criterion: 'REQ → EOSE p95 stable', pass: false });
    expect(v.measured).toBe('19.0 ms → 69.0 ms (n 834 / 833)');
  });

  it('leaves out the latencies of a database restart, until 10 s after the relay is ready', () => {
    const outage: Outage = { stoppedAt: 25, startedAt: 25.1, readyAt: 25.5 };
    expect(inOutage(25.6, [outage])).toBe(true);
    expect(inOutage(25.7, [outage])).toBe(false);
    const slowDuringRestart = latencies((t) => (t >= 25 && t < 25.65 ? 5000 : 5));
    expect(p95Verdict('OK', slowDuringRestart, 5, 30, []).pass).toBe(false);
    expect(p95Verdict('OK', slowDuringRestart, 5, 30, [outage]).pass).toBe(true);
  });

  it('does not compare thirds with too few latencies', () => {
    expect(p95Verdict('OK', [{ t: 6, ms: 1 }, { t: 29, ms: 900 }], 5, 30, []).pass).toBeNull();
  });
});

describe('counted criteria', () => {
  it('pass only at zero', () => {
    expect(countVerdict('every acknowledged event stored', 'missing 0', 0).pass).toBe(true);
    expect(countVerdict('every acknowledged event stored', 'missing 1', 1).pass).toBe(false);
    expect(passed([countVerdict('x', '1', 1), { criterion: 'y', threshold: '', measured: '', pass: null }])).toBe(false);
  });
});

describe('reading /metrics', () => {
  const text = [
    '# HELP process_resident_memory_bytes Resident memory size in bytes.',
    '# TYPE process_resident_memory_bytes gauge',
    'process_resident_memory_bytes 157286400',
    'nodejs_heap_size_used_bytes 31457280',
    'nodejs_eventloop_lag_p99_seconds 0.011206655',
    'nodejs_active_handles{type="Socket"} 30',
    'nodejs_active_handles_total 37',
    'nostr_events_stored_total{kind="1"} 2700',
    'nostr_events_stored_total{kind="7"} 300',
    'pgrelay_db_pool_in_use 2',
    'pgrelay_db_pool_connections 4',
    'nostr_connections 28',
  ].join('\n');

  it('parses series with and without labels, and sums a metric over its labels', () => {
    const series = parsePrometheusText(text);
    expect(series.get('nodejs_active_handles{type="Socket"}')).toBe(30);
    expect(total(series, 'nostr_events_stored_total')).toBe(3000);
    expect(total(series, 'nodejs_active_handles')).toBe(30); // not nodejs_active_handles_total
    expect(total(series, 'pgrelay_missing')).toBeNull();
  });

  it('reduces them to the gauges the soak tracks, in MB and ms', () => {
    expect(readingOf(parsePrometheusText(text))).toEqual({
      rssMb: 150, heapUsedMb: 30, loopP99Ms: 11.206655, handles: 37, poolInUse: 2, poolWaiting: null, poolSize: 4, connections: 28, storedTotal: 3000, slowClientCloses: null,
    });
  });
});

describe('report', () => {
  it('writes one row per interval, noting the first and restarts', () => {
    const rows = sampleTable([sample(0, 120), { ...sample(1, 150), dbRestarts: 1 }, sample(1.25, 151, 41, { errors: 3, okP95: null })]).split('\n');
    expect(rows[0]).toMatch(/^\| t \(min\) \| RSS MB \| heap MB \| loop p99 ms \| handles \|/);
    expect(rows[2]).toBe('| 0 | 120.0 | 30.0 | 11.2 | 40 | 2 / 4 | 28 | 3000 | 7.50 | 600 | 4.25 | 5000 | 8.00 | 3000 | 0 | 0 | 0 | 0 | 0 | 7 | 0.80 | before traffic |');
    expect(rows[3]).toMatch(/\| database restarted \|$/);
    expect(rows[4]).toMatch(/^\| 1\.25 \| 151\.0 \| .* \| 3000 \| – \| .* \| 3 \| /);
  });

  it('states the verdict, the events and the disconnects', () => {
    const report: SoakReport = {
      command: 'npm run soak -- --minutes 30',
      startedAt: '2026-11-24T20:00:00.000Z',
      machine: '2 × CPU',
      loadStart: 0.5,
      loadEnd: 0.7,
      setup: ['traffic: 50 events/s'],
      warmupMin: 5,
      samples: run(() => 150),
      outages: [{ stoppedAt: 10, startedAt: 10.1, readyAt: 10.1 }],
      verdicts: [countVerdict('every acknowledged event stored', 'acknowledged 9, stored 8, missing 1', 1)],
      events: { published: 10, notSent: 0, acked: 9, stored: 8, missing: ['ab'.repeat(32)], refused: 1, refusedOutsideOutages: 0, unanswered: 0 },
      disconnects: { expected: 'the relay closed 1 connection(s) on purpose', unexpected: [{ t: 12.5, role: 'publisher', code: 1006, reason: '' }] },
    };
    const md = renderResults(report);
    expect(md).toContain('## Verdict: FAIL');
    expect(md).toContain('| every acknowledged event stored | 0 | acknowledged 9, stored 8, missing 1 | **FAIL** |');
    expect(md).toContain(`missing 1 (first: ${'ab'.repeat(32)})`);
    expect(md).toContain('unexpected 1:\n\n- 12:30 publisher: code 1006');
    expect(md).toContain('Database restarts: 10:00 (down 6.0 s, relay ready 0.0 s after the start).');
  });

  it('writes minutes as m:ss', () => {
    expect(clock(0)).toBe('0:00');
    expect(clock(10.5)).toBe('10:30');
    expect(clock(1.9999)).toBe('2:00');
  });

  it('plots RSS, heap and both p95s, with the warm-up and each restart shaded', () => {
    const svg = soakSvg(run(() => 150), [{ stoppedAt: 10, startedAt: 10.1, readyAt: 10.2 }], 5);
    for (const series of ['RSS (MB)', 'heap used (MB)', 'OK p95 (ms)', 'REQ p95 (ms)']) expect(svg).toContain(`data-series="${series}"`);
    expect(svg.match(/data-band="restart"/g)).toHaveLength(1);
    expect(svg).toContain('data-band="warm-up"');
    expect(svg.startsWith('<svg')).toBe(true);
  });
});
