// HOT_TIER_MB in bytes. `auto`: 30 % of Node's heap limit (the tier's events live on the V8 heap,
// which must keep room for everything else and for the collector to work) or an eighth of the
// machine's memory, whichever is less.
import { totalmem } from 'node:os';
import { getHeapStatistics } from 'node:v8';

export function hotTierBytes(setting: 'auto' | number): number {
  if (setting !== 'auto') return setting * 2 ** 20;
  return Math.floor(Math.min(getHeapStatistics().heap_size_limit * 0.3, totalmem() / 8));
}
