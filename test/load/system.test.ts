// What the load runner reads of the machine (bench/load/system.ts): the hypervisor's stolen CPU time.
import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { stolenCpuSeconds } from '../../bench/load/system.js';

describe('machine figures', () => {
  it.runIf(existsSync('/proc/stat'))('reads the CPU time stolen by the hypervisor, a count that never goes down', () => {
    const before = stolenCpuSeconds();
    expect(typeof before).toBe('number');
    expect(before).toBeGreaterThanOrEqual(0);
    const until = Date.now() + 50;
    while (Date.now() < until); // some CPU time to be counted (or stolen) meanwhile
    expect(stolenCpuSeconds()).toBeGreaterThanOrEqual(before!);
  });
});
