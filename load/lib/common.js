// Shared by the k6 scripts: settings from the environment, the error counter, thresholds and
// duration parsing. k6 runs plain JavaScript (no Node APIs): keep this file free of imports
// other than k6's own modules.
import { Counter } from 'k6/metrics';

export const RELAY_URL = __ENV.RELAY_URL || 'ws://127.0.0.1:8008';

/** Every failure a relay client would notice, tagged with `reason` (closed, notice, ok-false, timeout, ws-error, ws-close). */
export const relayErrors = new Counter('relay_errors');

/** "30s", "2m", "500ms", "1m30s" → milliseconds. */
export function durationMs(text) {
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h)/g;
  const unit = { ms: 1, s: 1000, m: 60000, h: 3600000 };
  let total = 0;
  let matched = '';
  let m;
  while ((m = re.exec(text)) !== null) {
    total += Number(m[1]) * unit[m[2]];
    matched += m[0];
  }
  if (!text || matched !== text) throw new Error(`not a duration: ${text}`);
  return total;
}

export function envNumber(name, fallback) {
  const v = __ENV[name];
  if (v === undefined || v === '') return fallback;
  const n = Number(v);
  if (!Number.isFinite(n)) throw new Error(`${name} must be a number, got ${v}`);
  return n;
}

/**
 * Thresholds every scenario shares: no failed check and no relay error. `latencyMetric` gets a p95
 * threshold when P95_MS is set (the runner passes --p95; 0 disables it).
 */
export function baseThresholds(latencyMetric) {
  const t = { checks: ['rate==1'], relay_errors: ['count==0'] };
  const p95 = envNumber('P95_MS', 0);
  if (latencyMetric && p95 > 0) t[latencyMetric] = [`p(95)<${p95}`];
  return t;
}

export const SUMMARY_TREND_STATS = ['avg', 'min', 'med', 'max', 'p(50)', 'p(90)', 'p(95)', 'p(99)', 'count'];

/** The first element (the verb) of a relay message, without parsing the whole message. */
export function verbOf(text) {
  const end = text.indexOf('"', 2);
  return text.slice(2, end);
}
