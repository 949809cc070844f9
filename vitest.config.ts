import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    // Two files at a time even on two cores: much of a file's time is spent waiting on sockets,
    // child processes and PostgreSQL. Tests assert order and counts, never time, so a busy machine
    // makes them slower, not wrong; the timeouts only catch a test that hangs.
    maxWorkers: Math.max(2, availableParallelism()),
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
  },
});
