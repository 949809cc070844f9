// The soak run's judgement and report (npm run soak): trend lines through the relay's memory and
// handles after warm-up, p95 early against late, and the markdown table and SVG plot of the
// samples. Pure functions: no sockets, no database, no clock.
import { niceTicks } from '../load/report.js';
import { percentile } from './stats.js';

/** One sampling interval: the relay's gauges at its end, and what the clients saw during it. */
export interface SoakSample {
  /** End of the interval in minutes since the traffic started (0: the reading before any traffic). */
  t: number;
  relay: {
    rssMb: number | null;
    heapUsedMb: number | null;
    /** The worst event-loop delay p99 of the interval's scrapes (each covers the time since the previous one). */
    loopP99Ms: number | null;
    handles: number | null;
    poolInUseMax: number | null;
    poolWaitingMax: number | null;
    poolSize: number | null;
    connections: number | null;
    /** Events the relay says it stored since it started (nostr_events_stored_total). */
    storedTotal: number | null;
    cpuPercent: number | null;
  };
  clients: {
    okN: number;
    okP95: number | null;
    reqN: number;
    reqP95: number | null;
    liveN: number;
    liveP95: number | null;
    acked: number;
    /** OK false, CLOSED and REQs that timed out. */
    errors: number;
    ackedTotal: number;
    slowCloses: number;
    unexpected: number;
  };
  load: number;
  /** Database restarts that overlap the interval. */
  dbRestarts: number;
}

/** A database restart, in minutes since the traffic started: stopped, started again, relay /ready again. */
export interface Outage {
  stoppedAt: number;
  startedAt: number;
  readyAt: number;
}

/** A latency observation at `t` minutes. */
export interface Timed {
  t: number;
  ms: number;
}

export interface Verdict {
  criterion: string;
  threshold: string;
  measured: string;
  /** null: not judged (too few samples); it does not fail the run. */
  pass: boolean | null;
}

/**
 * The pass thresholds, with why they are where they are (at the default traffic: 50 events/s,
 * ~35 subscriber connections a minute, 10 REQ/s):
 * - RSS: a leak of one event's worth (~350 B) per event, or of one connection's state (~30 KB) per
 *   churned subscriber, grows RSS by ≥ 1 MB/min; a Node process at a steady load wanders a few MB
 *   around its level (GC, allocator), which over 25 minutes moves a fitted line far less. The 10 %
 *   bound catches a slower creep that would still add up over days. A fitted growth under 5 MB is
 *   that wandering whatever the slope (short runs).
 * - Handles: every open socket is a handle, so the count moves by a few with the sockets opening
 *   and closing at the moment of a scrape (subscribers, the pool); a fitted growth under 5 is that
 *   noise whatever the slope (short runs). A handle leaked per churned subscriber (~35/min), per
 *   REQ or per event is far above 0.5/min; so is a few pool connections left behind per database
 *   restart once restarts come every few minutes.
 * - p95: at this load the p95s are a few ms, and a shared 2-core machine doubles them on its own;
 *   the 20 ms allowance keeps 2 ms → 5 ms from failing, while a real degradation (bloat, a pool
 *   leak, subscription lists that grow) shows as multiples.
 */
export const THRESHOLDS = {
  rssSlopeMbPerMin: 1,
  rssGrowthFraction: 0.1,
  rssNoiseMb: 5,
  handlesSlopePerMin: 0.5,
  handlesNoise: 5,
  p95Factor: 2,
  p95SlackMs: 20,
  /** Fewer samples after warm-up than this and a trend is not judged. */
  minTrendSamples: 5,
  /** Fewer latencies in a third than this and its p95 is not compared. */
  minLatencies: 20,
  /** Latencies this long after the relay is ready again still count as part of a restart. */
  outageSettleMinutes: 10 / 60,
};

/** Least-squares line through the points. */
export function linearFit(points: Array<[number, number]>): { slope: number; intercept: number } {
  const n = points.length;
  if (n < 2) return { slope: NaN, intercept: NaN };
  const mx = points.reduce((s, [x]) => s + x, 0) / n;
  const my = points.reduce((s, [, y]) => s + y, 0) / n;
  let sxy = 0, sxx = 0;
  for (const [x, y] of points) {
    sxy += (x - mx) * (y - my);
    sxx += (x - mx) ** 2;
  }
  const slope = sxx === 0 ? NaN : sxy / sxx;
  return { slope, intercept: my - slope * mx };
}

const fixed = (x: number, digits: number) => (Number.isFinite(x) ? x.toFixed(digits) : '–');

/** The points of one gauge after warm-up (samples where the relay could not be read are left out). */
function after(samples: SoakSample[], warmupMin: number, pick: (s: SoakSample) => number | null): Array<[number, number]> {
  return samples.filter((s) => s.t >= warmupMin && pick(s) !== null).map((s) => [s.t, pick(s)!]);
}

export function rssVerdict(samples: SoakSample[], warmupMin: number): Verdict {
  const points = after(samples, warmupMin, (s) => s.relay.rssMb);
  const threshold = `slope ≤ ${THRESHOLDS.rssSlopeMbPerMin} MB/min and fitted growth ≤ ${THRESHOLDS.rssGrowthFraction * 100} %, or growth ≤ ${THRESHOLDS.rssNoiseMb} MB`;
  const criterion = 'RSS flat after warm-up';
  if (points.length < THRESHOLDS.minTrendSamples) return { criterion, threshold, measured: `${points.length} samples after warm-up`, pass: null };
  const { slope, intercept } = linearFit(points);
  const x0 = points[0][0], x1 = points[points.length - 1][0];
  const start = intercept + slope * x0;
  const growthMb = slope * (x1 - x0);
  const growth = growthMb / start;
  return {
    criterion,
    threshold,
    measured: `${fixed(slope, 2)} MB/min, ${fixed(growthMb, 1)} MB (${fixed(growth * 100, 1)} %) over ${fixed(x1 - x0, 1)} min`,
    pass: growthMb <= THRESHOLDS.rssNoiseMb || (slope <= THRESHOLDS.rssSlopeMbPerMin && growth <= THRESHOLDS.rssGrowthFraction),
  };
}

export function handlesVerdict(samples: SoakSample[], warmupMin: number): Verdict {
  const points = after(samples, warmupMin, (s) => s.relay.handles);
  const threshold = `slope ≤ ${THRESHOLDS.handlesSlopePerMin}/min, or fitted growth ≤ ${THRESHOLDS.handlesNoise}`;
  const criterion = 'handles flat after warm-up';
  if (points.length < THRESHOLDS.minTrendSamples) return { criterion, threshold, measured: `${points.length} samples after warm-up`, pass: null };
  const { slope } = linearFit(points);
  const growth = slope * (points[points.length - 1][0] - points[0][0]);
  const values = points.map(([, y]) => y);
  return {
    criterion,
    threshold,
    measured: `${fixed(slope, 2)}/min, ${fixed(growth, 1)} over the run (${Math.min(...values)}–${Math.max(...values)})`,
    pass: slope <= THRESHOLDS.handlesSlopePerMin || growth <= THRESHOLDS.handlesNoise,
  };
}

/** Whether `t` falls in a restart: from the stop until the relay has been ready again for a few seconds. */
export const inOutage = (t: number, outages: Outage[]) => outages.some((o) => t >= o.stoppedAt && t <= o.readyAt + THRESHOLDS.outageSettleMinutes);

/**
 * p95 of the last third of the time after warm-up against the first third, leaving out the
 * latencies around database restarts (those are the restart's, reported in the table).
 */
export function p95Verdict(what: string, latencies: Timed[], warmupMin: number, endMin: number, outages: Outage[]): Verdict {
  const third = (endMin - warmupMin) / 3;
  const p95In = (from: number, to: number) => {
    const ms = latencies.filter((l) => l.t >= from && l.t < to && !inOutage(l.t, outages)).map((l) => l.ms).sort((a, b) => a - b);
    return { n: ms.length, p95: percentile(ms, 95) };
  };
  const first = p95In(warmupMin, warmupMin + third);
  const last = p95In(endMin - third, endMin + 1e-9);
  const criterion = `${what} p95 stable`;
  const threshold = `last third ≤ max(${THRESHOLDS.p95Factor} × first, first + ${THRESHOLDS.p95SlackMs} ms)`;
  const measured = `${fixed(first.p95, 1)} ms → ${fixed(last.p95, 1)} ms (n ${first.n} / ${last.n})`;
  if (!(third > 0) || first.n < THRESHOLDS.minLatencies || last.n < THRESHOLDS.minLatencies) return { criterion, threshold, measured, pass: null };
  return { criterion, threshold, measured, pass: last.p95 <= Math.max(THRESHOLDS.p95Factor * first.p95, first.p95 + THRESHOLDS.p95SlackMs) };
}

export function countVerdict(criterion: string, measured: string, count: number): Verdict {
  return { criterion, threshold: '0', measured, pass: count === 0 };
}

/** Every criterion passed or was not judged. */
export const passed = (verdicts: Verdict[]) => verdicts.every((v) => v.pass !== false);

export interface SoakReport {
  command: string;
  startedAt: string;
  machine: string;
  loadStart: number;
  loadEnd: number;
  /** What ran, one line each (traffic, restarts, relay settings). */
  setup: string[];
  warmupMin: number;
  samples: SoakSample[];
  outages: Outage[];
  verdicts: Verdict[];
  events: { published: number; notSent: number; acked: number; stored: number; missing: string[]; refused: number; refusedOutsideOutages: number; unanswered: number };
  disconnects: { expected: string; unexpected: Array<{ t: number; role: string; code: number; reason: string }> };
  /** Set when the run was stopped (a signal) or failed before its end. */
  interrupted?: string;
}

const cell = (x: number | null, digits = 0) => (x === null || !Number.isFinite(x) ? '–' : x.toFixed(digits));
const ms = (x: number | null) => (x === null || !Number.isFinite(x) ? '–' : x < 10 ? x.toFixed(2) : x.toFixed(1));
/** Minutes as m:ss. */
export function clock(t: number): string {
  const seconds = Math.round(t * 60);
  return `${Math.floor(seconds / 60)}:${String(seconds % 60).padStart(2, '0')}`;
}

export function sampleTable(samples: SoakSample[]): string {
  const head =
    '| t (min) | RSS MB | heap MB | loop p99 ms | handles | pool in use / size (waiting) | conns | OK n | OK p95 ms | REQ n | REQ p95 ms | live n | live p95 ms | acked | errors | acked Σ | stored Σ | slow closes | unexpected | relay CPU % | load | note |';
  const rule = '|' + '---:|'.repeat(21) + '---|';
  const rows = samples.map((s) => {
    const r = s.relay, c = s.clients;
    const pool = r.poolInUseMax === null ? '–' : `${r.poolInUseMax} / ${cell(r.poolSize)}${r.poolWaitingMax ? ` (${r.poolWaitingMax})` : ''}`;
    const note = s.t === 0 ? 'before traffic' : s.dbRestarts ? 'database restarted' : '';
    return `| ${fixed(s.t, s.t % 1 ? 2 : 0)} | ${cell(r.rssMb, 1)} | ${cell(r.heapUsedMb, 1)} | ${ms(r.loopP99Ms)} | ${cell(r.handles)} | ${pool} | ${cell(r.connections)} | ${c.okN} | ${ms(c.okP95)} | ${c.reqN} | ${ms(c.reqP95)} | ${c.liveN} | ${ms(c.liveP95)} | ${c.acked} | ${c.errors} | ${c.ackedTotal} | ${cell(r.storedTotal)} | ${c.slowCloses} | ${c.unexpected} | ${cell(r.cpuPercent)} | ${s.load.toFixed(2)} | ${note} |`;
  });
  return [head, rule, ...rows].join('\n');
}

export function verdictTable(verdicts: Verdict[]): string {
  const mark = (p: boolean | null) => (p === null ? 'not judged' : p ? 'PASS' : '**FAIL**');
  return ['| criterion | threshold | measured | verdict |', '|---|---|---|---|', ...verdicts.map((v) => `| ${v.criterion} | ${v.threshold} | ${v.measured} | ${mark(v.pass)} |`)].join('\n');
}

export function renderResults(r: SoakReport): string {
  const e = r.events;
  const lines = [
    '# Soak run',
    '',
    `\`${r.command}\`, started ${r.startedAt}${r.interrupted ? ` — **stopped early: ${r.interrupted}**` : ''}`,
    '',
    `${r.machine}; load average ${r.loadStart.toFixed(2)} at the start, ${r.loadEnd.toFixed(2)} at the end`,
    '',
    ...r.setup.map((s) => `- ${s}`),
    '',
    `## Verdict: ${passed(r.verdicts) ? 'PASS' : 'FAIL'}`,
    '',
    `Trends and p95s are judged after a ${r.warmupMin}-minute warm-up; p95s leave out each restart (database stopped until 10 s after the relay is ready again).`,
    '',
    verdictTable(r.verdicts),
    '',
    `Events: published ${e.published}${e.notSent ? ` (${e.notSent} more were due but not sent: publisher reconnecting or 1000 OKs behind)` : ''}, acknowledged ${e.acked}, stored ${e.stored}, missing ${e.missing.length}` +
      `${e.missing.length ? ` (first: ${e.missing.slice(0, 5).join(', ')})` : ''}; refused ${e.refused} (outside restarts: ${e.refusedOutsideOutages}); unanswered ${e.unanswered}.`,
    '',
    `Disconnects: ${r.disconnects.expected}; unexpected ${r.disconnects.unexpected.length}` +
      (r.disconnects.unexpected.length
        ? ':\n\n' + r.disconnects.unexpected.slice(0, 20).map((d) => `- ${clock(d.t)} ${d.role}: code ${d.code}${d.reason ? ` "${d.reason}"` : ''}`).join('\n')
        : '.'),
    '',
    ...(r.outages.length
      ? [
          'Database restarts: ' +
            r.outages.map((o) => `${clock(o.stoppedAt)} (down ${fixed((o.startedAt - o.stoppedAt) * 60, 1)} s, relay ready ${fixed((o.readyAt - o.startedAt) * 60, 1)} s after the start)`).join('; ') +
            '.',
          '',
        ]
      : []),
    '## Samples',
    '',
    'Gauges (RSS, heap, handles, connections) at the end of each interval; loop p99 and pool use are the worst of the 10-second scrapes in it; OK, REQ (→ EOSE) and live-delivery latencies as the clients saw them; errors: OK false, CLOSED and timed-out REQs; stored Σ is the relay\'s own count (nostr_events_stored_total).',
    '',
    sampleTable(r.samples),
    '',
    '![RSS, heap and p95 over the run](plot.svg)',
    '',
  ];
  return lines.join('\n');
}

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** RSS and heap (left axis, MB) and OK / REQ p95 (right axis, ms) against time; restarts shaded, warm-up greyed. */
export function soakSvg(samples: SoakSample[], outages: Outage[], warmupMin: number, title = 'pgrelay soak'): string {
  const W = 820, H = 430, left = 64, right = 70, top = 44, bottom = 74;
  const pw = W - left - right, ph = H - top - bottom;
  const end = Math.max(1e-9, ...samples.map((s) => s.t));
  const x = (t: number) => left + (t / end) * pw;
  const memory = [
    { label: 'RSS (MB)', color: '#1f77b4', pick: (s: SoakSample) => s.relay.rssMb },
    { label: 'heap used (MB)', color: '#2ca02c', pick: (s: SoakSample) => s.relay.heapUsedMb },
  ];
  const latency = [
    { label: 'OK p95 (ms)', color: '#d95f02', pick: (s: SoakSample) => s.clients.okP95 },
    { label: 'REQ p95 (ms)', color: '#7570b3', pick: (s: SoakSample) => s.clients.reqP95 },
  ];
  const finite = (v: number | null): v is number => v !== null && Number.isFinite(v);
  const mbTicks = niceTicks(Math.max(1, ...samples.flatMap((s) => memory.map((m) => m.pick(s))).filter(finite)) * 1.05);
  const msTicks = niceTicks(Math.max(1, ...samples.flatMap((s) => latency.map((m) => m.pick(s))).filter(finite)) * 1.05);
  const yMb = (v: number) => top + ph - (v / mbTicks[mbTicks.length - 1]) * ph;
  const yMs = (v: number) => top + ph - (v / msTicks[msTicks.length - 1]) * ph;
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`);
  out.push(`<rect width="${W}" height="${H}" fill="#fff"/>`);
  out.push(`<text x="${W / 2}" y="22" text-anchor="middle" font-size="15" font-weight="bold">${esc(title)}</text>`);
  if (warmupMin > 0) out.push(`<rect data-band="warm-up" x="${left}" y="${top}" width="${(x(Math.min(warmupMin, end)) - left).toFixed(1)}" height="${ph}" fill="#f2f2f2"/>`);
  for (const o of outages) {
    const x0 = x(o.stoppedAt), x1 = Math.max(x0 + 2, x(o.readyAt));
    out.push(`<rect data-band="restart" x="${x0.toFixed(1)}" y="${top}" width="${(x1 - x0).toFixed(1)}" height="${ph}" fill="#fbe3e3"/>`);
  }
  for (const t of mbTicks) {
    out.push(`<line x1="${left}" x2="${left + pw}" y1="${yMb(t).toFixed(1)}" y2="${yMb(t).toFixed(1)}" stroke="#e5e5e5"/>`);
    out.push(`<text x="${left - 6}" y="${(yMb(t) + 4).toFixed(1)}" text-anchor="end">${t}</text>`);
  }
  for (const t of msTicks) out.push(`<text x="${left + pw + 6}" y="${(yMs(t) + 4).toFixed(1)}" fill="#666">${t}</text>`);
  out.push(`<text transform="translate(16 ${top + ph / 2}) rotate(-90)" text-anchor="middle">memory, MB (solid)</text>`);
  out.push(`<text transform="translate(${W - 14} ${top + ph / 2}) rotate(90)" text-anchor="middle" fill="#666">p95, ms (dashed)</text>`);
  out.push(`<line x1="${left}" x2="${left + pw}" y1="${top + ph}" y2="${top + ph}" stroke="#333"/>`);
  for (const t of niceTicks(end, 6).filter((t) => t <= end * 1.0001))
    out.push(`<text x="${x(t).toFixed(1)}" y="${top + ph + 18}" text-anchor="middle">${t}</text>`);
  out.push(`<text x="${left + pw / 2}" y="${top + ph + 38}" text-anchor="middle">minutes (grey: warm-up; red: database restarts)</text>`);
  const line = (label: string, color: string, y: (v: number) => number, pick: (s: SoakSample) => number | null, dash: string) => {
    const pts = samples.filter((s) => finite(pick(s))).map((s) => `${x(s.t).toFixed(1)},${y(pick(s)!).toFixed(1)}`);
    if (pts.length) out.push(`<polyline data-series="${esc(label)}" fill="none" stroke="${color}" stroke-width="2"${dash ? ` stroke-dasharray="${dash}"` : ''} points="${pts.join(' ')}"/>`);
  };
  for (const m of memory) line(m.label, m.color, yMb, m.pick, '');
  for (const m of latency) line(m.label, m.color, yMs, m.pick, '5 3');
  [...memory.map((m) => ({ ...m, dash: '' })), ...latency.map((m) => ({ ...m, dash: '5 3' }))].forEach((l, i) => {
    const lx = left + i * 170, ly = H - 12;
    out.push(`<line x1="${lx}" x2="${lx + 24}" y1="${ly - 4}" y2="${ly - 4}" stroke="${l.color}" stroke-width="2"${l.dash ? ` stroke-dasharray="${l.dash}"` : ''}/>`);
    out.push(`<text x="${lx + 30}" y="${ly}">${esc(l.label)}</text>`);
  });
  out.push('</svg>');
  return out.join('\n') + '\n';
}
