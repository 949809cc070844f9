// Turning k6 summaries (`k6 run --summary-export`, one per ladder step) into the ladder's markdown
// table and an SVG plot of latency against the ladder variable. Pure functions: no k6, no I/O.

/** The legacy JSON of `k6 run --summary-export`: per metric its stats; thresholds map to true when crossed. */
export interface K6Summary {
  metrics: Record<string, K6Metric>;
}
export interface K6Metric {
  [stat: string]: number | Record<string, boolean> | undefined;
  thresholds?: Record<string, boolean>;
}

/** What the runner measured around one k6 run, beside k6's own figures. */
export interface StepSystem {
  /** CPU used during the step, in cores (1.0 = one core busy the whole time). */
  relayCpu?: number;
  postgresCpu?: number;
  k6Cpu?: number;
  /** CPU the hypervisor took from this machine during the step, in cores (stolenCpuSeconds). */
  stolenCpu?: number;
  /** Relay resident memory at the step's peak, MiB. */
  relayRssMb?: number;
  /** (peak RSS − RSS before the step) ÷ peak established connections, KiB. */
  rssPerConnectionKb?: number;
  /** Most relay-side established connections seen during the step. */
  peakConnections?: number;
}

export interface Step {
  /** The ladder variable: VUs, subscribers or connections. */
  x: number;
  summary: K6Summary;
  /** k6's exit code: 0 passed, 99 thresholds crossed, anything else a failed run. */
  exitCode: number;
  system?: StepSystem;
}

export type ScenarioName = 'query' | 'publish' | 'fanout' | 'connections';

interface ScenarioSpec {
  xLabel: string;
  latencyMetric: string;
  latencyLabel: string;
  throughputMetric: string;
  throughputLabel: string;
}

export const SCENARIOS: Record<ScenarioName, ScenarioSpec> = {
  query: { xLabel: 'VUs', latencyMetric: 'eose_ms', latencyLabel: 'time to EOSE', throughputMetric: 'reqs', throughputLabel: 'REQ/s' },
  publish: { xLabel: 'VUs', latencyMetric: 'ok_ms', latencyLabel: 'time to OK', throughputMetric: 'events_accepted', throughputLabel: 'events/s' },
  fanout: { xLabel: 'subscribers', latencyMetric: 'delivery_ms', latencyLabel: 'delivery latency', throughputMetric: 'delivery_ms', throughputLabel: 'deliveries/s' },
  connections: { xLabel: 'connections', latencyMetric: 'ws_connecting', latencyLabel: 'connect time', throughputMetric: 'connections_held', throughputLabel: 'held' },
};

export function stat(summary: K6Summary, metric: string, name: string): number {
  const v = summary.metrics[metric]?.[name];
  return typeof v === 'number' ? v : NaN;
}

/** Thresholds crossed in a step, as "metric: expression". */
export function crossedThresholds(summary: K6Summary): string[] {
  const out: string[] = [];
  for (const [metric, m] of Object.entries(summary.metrics))
    for (const [expr, crossed] of Object.entries(m.thresholds ?? {})) if (crossed) out.push(`${metric}: ${expr}`);
  return out;
}

export interface Row {
  x: number;
  count: number;
  p50: number;
  p90: number;
  p95: number;
  p99: number;
  max: number;
  throughput: number;
  errors: number;
  failedChecks: number;
  crossed: string[];
  exitCode: number;
}

export function ladderRow(scenario: ScenarioName, step: Step): Row {
  const spec = SCENARIOS[scenario];
  const s = step.summary;
  const l = spec.latencyMetric;
  const count = stat(s, l, 'count');
  const q = (name: string) => (count > 0 ? stat(s, l, name) : NaN); // k6 reports 0 for a metric without samples
  return {
    x: step.x,
    count,
    p50: q('p(50)'),
    p90: q('p(90)'),
    p95: q('p(95)'),
    p99: q('p(99)'),
    max: q('max'),
    throughput: throughput(scenario, s),
    errors: stat(s, 'relay_errors', 'count') || 0,
    failedChecks: stat(s, 'checks', 'fails') || 0,
    crossed: crossedThresholds(s),
    exitCode: step.exitCode,
  };
}

/**
 * Per second over the whole k6 run; fanout's deliveries over the time events were sent; for
 * connections, not a rate: the connections held to the end.
 */
export function throughput(scenario: ScenarioName, s: K6Summary): number {
  if (scenario === 'connections') return stat(s, 'connections_held', 'count') || 0;
  if (scenario === 'fanout') {
    const window = stat(s, 'send_window_s', 'value');
    if (window > 0) return (stat(s, 'delivery_ms', 'count') || 0) / window;
  }
  return stat(s, SCENARIOS[scenario].throughputMetric, 'rate');
}

/** Milliseconds as a table shows them: 2 decimals under 10, 1 under 1000, else whole. */
export function fmtMs(x: number): string {
  if (!Number.isFinite(x)) return '–';
  if (x < 10) return x.toFixed(2);
  if (x < 1000) return x.toFixed(1);
  return Math.round(x).toLocaleString('en-US');
}

function fmtNum(x: number | undefined, digits = 0): string {
  if (x === undefined || !Number.isFinite(x)) return '–';
  return x.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

const cpu = (x: number | undefined) => (x === undefined || !Number.isFinite(x) ? '–' : x.toFixed(2));

function verdict(r: Row): string {
  if (r.exitCode !== 0 && r.exitCode !== 99) return `k6 failed (exit ${r.exitCode})`;
  return r.crossed.length ? `✗ ${r.crossed.join('; ')}` : '✓';
}

/** p50 / p95 / p99 of a latency metric, in one cell. */
function percentiles(s: Step, metric: string): string {
  if (!(stat(s.summary, metric, 'count') > 0)) return '–';
  return ['p(50)', 'p(95)', 'p(99)'].map((p) => fmtMs(stat(s.summary, metric, p))).join(' / ');
}

/** fanout over several relays (RELAY_URLS): deliveries to the publisher's relay and to the others. */
const BY_RELAY = ['delivery_same_ms', 'delivery_other_ms', 'deliveries_missed_same', 'deliveries_missed_other'];
const byRelayColumns: Array<[string, (s: Step) => string]> = [
  ["publisher's relay p50 / p95 / p99", (s) => percentiles(s, 'delivery_same_ms')],
  ['other relays p50 / p95 / p99', (s) => percentiles(s, 'delivery_other_ms')],
  ["missed publisher's / other", (s) => `${fmtNum(stat(s.summary, 'deliveries_missed_same', 'count') || 0)} / ${fmtNum(stat(s.summary, 'deliveries_missed_other', 'count') || 0)}`],
];

/** Extra per-scenario columns (some only when a step has their metrics): header and cell. */
function extraColumns(scenario: ScenarioName, steps: Step[]): Array<[string, (s: Step) => string]> {
  switch (scenario) {
    case 'query':
      return [
        ['events/REQ', (s) => fmtNum(stat(s.summary, 'req_events_per_req', 'avg'))],
        ['events/s', (s) => fmtNum(stat(s.summary, 'req_events', 'rate'))],
      ];
    case 'publish':
      return [['duplicates', (s) => fmtNum(stat(s.summary, 'events_duplicate', 'count') || 0)]];
    case 'fanout':
      return [
        ['events', (s) => fmtNum(stat(s.summary, 'ok_ms', 'count'))],
        ['missed', (s) => fmtNum(stat(s.summary, 'deliveries_missed', 'count') || 0)],
        ...(steps.some((s) => BY_RELAY.some((m) => m in s.summary.metrics)) ? byRelayColumns : []),
        ['publish lag p95', (s) => fmtMs(stat(s.summary, 'publish_lag_ms', 'p(95)'))],
        ['OK p95', (s) => fmtMs(stat(s.summary, 'ok_ms', 'p(95)'))],
      ];
    case 'connections':
      return [
        ['failed', (s) => fmtNum(stat(s.summary, 'connections_failed', 'count') || 0)],
        ['dropped', (s) => fmtNum(stat(s.summary, 'connections_dropped', 'count') || 0)],
        ['subscriptions', (s) => fmtNum(stat(s.summary, 'subscriptions_open', 'count') || 0)],
        ['established at relay', (s) => fmtNum(s.system?.peakConnections)],
        ['relay RSS MiB', (s) => fmtNum(s.system?.relayRssMb)],
        ['RSS/connection KiB', (s) => fmtNum(s.system?.rssPerConnectionKb, 1)],
      ];
  }
}

/** The ladder table: one row per step, latency in ms, throughput, errors, CPU and the threshold verdict. */
export function ladderTable(scenario: ScenarioName, steps: Step[], xLabel = SCENARIOS[scenario].xLabel): string {
  const spec = SCENARIOS[scenario];
  const extras = extraColumns(scenario, steps);
  const header = [xLabel, 'samples', 'p50', 'p90', 'p95', 'p99', 'max', spec.throughputLabel, ...extras.map(([h]) => h), 'errors', 'relay CPU', 'PG CPU', 'k6 CPU', 'stolen', 'thresholds'];
  const align = header.map((_, i) => (i === header.length - 1 ? '---' : '---:'));
  const lines = [`| ${header.join(' | ')} |`, `|${align.join('|')}|`];
  for (const step of steps) {
    const r = ladderRow(scenario, step);
    const cells = [
      fmtNum(r.x), fmtNum(r.count), fmtMs(r.p50), fmtMs(r.p90), fmtMs(r.p95), fmtMs(r.p99), fmtMs(r.max), fmtNum(r.throughput, scenario === 'connections' ? 0 : 1),
      ...extras.map(([, cell]) => cell(step)),
      fmtNum(r.errors), cpu(step.system?.relayCpu), cpu(step.system?.postgresCpu), cpu(step.system?.k6Cpu), cpu(step.system?.stolenCpu), verdict(r),
    ];
    lines.push(`| ${cells.join(' | ')} |`);
  }
  return lines.join('\n');
}

/** For the query scenario: p50 / p95 of each REQ shape at each step. */
export function shapeTable(steps: Step[], xLabel = 'VUs', metric = 'eose_ms'): string {
  const shapes = new Set<string>();
  for (const step of steps)
    for (const name of Object.keys(step.summary.metrics)) {
      const m = /^([a-z_]+)\{shape:([^}]+)\}$/.exec(name);
      if (m && m[1] === metric) shapes.add(m[2]);
    }
  if (shapes.size === 0) return '';
  const header = ['shape', ...steps.map((s) => (xLabel.startsWith('/') ? `${fmtNum(s.x)}${xLabel}` : `${fmtNum(s.x)} ${xLabel}`))];
  const lines = [`| ${header.join(' | ')} |`, `|---|${steps.map(() => '---:').join('|')}|`];
  for (const shape of [...shapes].sort()) {
    const cells = steps.map((s) => {
      const key = `${metric}{shape:${shape}}`;
      if (!(stat(s.summary, key, 'count') > 0)) return '–';
      return `${fmtMs(stat(s.summary, key, 'p(50)'))} / ${fmtMs(stat(s.summary, key, 'p(95)'))}`;
    });
    lines.push(`| ${shape} | ${cells.join(' | ')} |`);
  }
  return lines.join('\n');
}

// ---- the plot ---------------------------------------------------------------------------------

/** An axis tick: whole numbers with separators, others as short as they print. */
const tick = (t: number) => (Number.isInteger(t) ? t.toLocaleString('en-US') : String(Number(t.toPrecision(3))));

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** Round numbers for a linear axis from 0 to at least `max`. */
export function niceTicks(max: number, count = 5): number[] {
  if (!(max > 0)) return [0, 1];
  const raw = max / count;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw)!;
  const ticks: number[] = [];
  for (let t = 0; t <= max + step * 0.999; t += step) ticks.push(Number(t.toPrecision(12)));
  return ticks;
}

/** 1-2-5 ticks for a log axis covering [min, max]. */
export function logTicks(min: number, max: number): number[] {
  const ticks: number[] = [];
  for (let e = Math.floor(Math.log10(min)); e <= Math.ceil(Math.log10(max)); e++)
    for (const m of [1, 2, 5]) {
      const t = m * Math.pow(10, e);
      if (t >= min / 1.0001 && t <= max * 1.0001) ticks.push(Number(t.toPrecision(12)));
    }
  return ticks;
}

const SERIES = [
  { key: 'p50', color: '#1b9e77' },
  { key: 'p90', color: '#7570b3' },
  { key: 'p95', color: '#d95f02' },
  { key: 'p99', color: '#e7298a' },
] as const;

/**
 * Latency percentiles (left axis, log scale when they span more than 30×) and throughput (right
 * axis, dashed) against the ladder variable, its steps evenly spaced; `targetMs` draws the p95 target.
 */
export function latencySvg(scenario: ScenarioName, steps: Step[], options: { title: string; targetMs?: number; xLabel?: string }): string {
  const spec = SCENARIOS[scenario];
  const rows = steps.map((s) => ladderRow(scenario, s));
  const W = 760, H = 420, left = 70, right = 80, top = 48, bottom = 70;
  const pw = W - left - right, ph = H - top - bottom;
  const values = rows.flatMap((r) => SERIES.map((s) => r[s.key])).filter((v) => Number.isFinite(v) && v > 0);
  if (options.targetMs) values.push(options.targetMs);
  const lo = values.length ? Math.min(...values) : 1;
  const hi = values.length ? Math.max(...values) : 1;
  const log = hi / lo > 30;
  let yTicks: number[];
  let y: (v: number) => number;
  if (log) {
    const min = Math.pow(10, Math.floor(Math.log10(lo))), max = Math.pow(10, Math.ceil(Math.log10(hi)));
    yTicks = logTicks(min, max);
    y = (v) => top + ph - ((Math.log10(Math.max(v, min)) - Math.log10(min)) / (Math.log10(max) - Math.log10(min))) * ph;
  } else {
    yTicks = niceTicks(hi * 1.05);
    const max = yTicks[yTicks.length - 1];
    y = (v) => top + ph - (v / max) * ph;
  }
  const tput = rows.map((r) => r.throughput);
  const tTicks = niceTicks(Math.max(1e-9, ...tput.filter(Number.isFinite)) * 1.05);
  const tMax = tTicks[tTicks.length - 1];
  const yt = (v: number) => top + ph - (v / tMax) * ph;
  const x = (i: number) => left + (rows.length === 1 ? pw / 2 : (i * pw) / (rows.length - 1));
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`);
  out.push(`<rect width="${W}" height="${H}" fill="#fff"/>`);
  out.push(`<text x="${W / 2}" y="22" text-anchor="middle" font-size="15" font-weight="bold">${esc(options.title)}</text>`);
  // grid and left axis
  for (const t of yTicks) {
    out.push(`<line x1="${left}" x2="${left + pw}" y1="${y(t).toFixed(1)}" y2="${y(t).toFixed(1)}" stroke="#e5e5e5"/>`);
    out.push(`<text x="${left - 6}" y="${(y(t) + 4).toFixed(1)}" text-anchor="end">${esc(tick(t))}</text>`);
  }
  out.push(`<text transform="translate(18 ${top + ph / 2}) rotate(-90)" text-anchor="middle">${esc(spec.latencyLabel)}, ms${log ? ' (log scale)' : ''}</text>`);
  // right axis: throughput
  for (const t of tTicks) out.push(`<text x="${left + pw + 6}" y="${(yt(t) + 4).toFixed(1)}" fill="#666">${esc(tick(t))}</text>`);
  out.push(`<text transform="translate(${W - 16} ${top + ph / 2}) rotate(90)" text-anchor="middle" fill="#666">throughput, ${esc(spec.throughputLabel)} (dashed)</text>`);
  // x axis
  out.push(`<line x1="${left}" x2="${left + pw}" y1="${top + ph}" y2="${top + ph}" stroke="#333"/>`);
  rows.forEach((r, i) => out.push(`<text x="${x(i).toFixed(1)}" y="${top + ph + 18}" text-anchor="middle">${esc(fmtNum(r.x))}</text>`));
  out.push(`<text x="${left + pw / 2}" y="${top + ph + 40}" text-anchor="middle">${esc(options.xLabel ?? spec.xLabel)}</text>`);
  // target
  if (options.targetMs) {
    const ty = y(options.targetMs).toFixed(1);
    out.push(`<line x1="${left}" x2="${left + pw}" y1="${ty}" y2="${ty}" stroke="#c00" stroke-dasharray="6 4"/>`);
    out.push(`<text x="${left + 4}" y="${Number(ty) - 4}" fill="#c00">p95 target ${esc(tick(options.targetMs))} ms</text>`);
  }
  // throughput line
  const tPoints = rows.map((r, i) => (Number.isFinite(r.throughput) ? `${x(i).toFixed(1)},${yt(r.throughput).toFixed(1)}` : '')).filter(Boolean);
  if (tPoints.length) out.push(`<polyline data-series="throughput" fill="none" stroke="#888" stroke-width="1.5" stroke-dasharray="4 3" points="${tPoints.join(' ')}"/>`);
  for (const p of tPoints) {
    const [cx, cy] = p.split(',');
    out.push(`<circle cx="${cx}" cy="${cy}" r="3" fill="#fff" stroke="#888" stroke-width="1.5"/>`);
  }
  // percentile lines
  for (const s of SERIES) {
    const pts = rows.map((r, i) => (Number.isFinite(r[s.key]) && r[s.key] > 0 ? [x(i), y(r[s.key])] : undefined)).filter((p): p is number[] => !!p);
    if (!pts.length) continue;
    out.push(`<polyline data-series="${s.key}" fill="none" stroke="${s.color}" stroke-width="2" points="${pts.map(([a, b]) => `${a.toFixed(1)},${b.toFixed(1)}`).join(' ')}"/>`);
    for (const [a, b] of pts) out.push(`<circle cx="${a.toFixed(1)}" cy="${b.toFixed(1)}" r="3" fill="${s.color}"/>`);
  }
  // legend
  const legend = [...SERIES.map((s) => ({ label: s.key, color: s.color, dash: '' })), { label: spec.throughputLabel, color: '#888', dash: '4 3' }];
  legend.forEach((l, i) => {
    const lx = left + i * 110, ly = H - 12;
    out.push(`<line x1="${lx}" x2="${lx + 24}" y1="${ly - 4}" y2="${ly - 4}" stroke="${l.color}" stroke-width="2"${l.dash ? ` stroke-dasharray="${l.dash}"` : ''}/>`);
    out.push(`<text x="${lx + 30}" y="${ly}">${esc(l.label)}</text>`);
  });
  out.push('</svg>');
  return out.join('\n') + '\n';
}
