import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 120_000,
    pool: 'forks',
    // Vitest runs one file at a time on a 2-core machine (its default is one worker fewer than the
    // cores). The files spend most of their time waiting on sockets and PostgreSQL, so two at a
    // time on 2 cores took the suite from 541 s to 292 s here, every test still passing.
    maxWorkers: Math.max(2, availableParallelism() - 1),
  },
});
