// `import` with WOT_ROOTS: the web as the stored follow lists make it when the command starts decides
// which imported events are kept, as it decides what the relay accepts.
import { describe, expect, it } from 'vitest';
import { runCli } from '../support/cli.js';
import { createTestDatabase } from '../support/database.js';
import { newSigner, now } from '../support/keys.js';

const cli = (args: string[], env: Record<string, string>, stdin: string) => runCli(args, { LOG_LEVEL: 'warn', VERIFY_THREADS: '1', ...env }, stdin);

describe('import with a web of trust', () => {
  it("keeps members' events and refuses the rest with the relay's reason", async () => {
    const url = await createTestDatabase();
    const [root, friend, stranger] = [newSigner(), newSigner(), newSigner()];
    const list = root.sign({ kind: 3, created_at: now() - 10, tags: [['p', friend.pubkey]], content: '' });
    expect((await cli(['import', '-'], { DATABASE_URL: url }, JSON.stringify(list))).code).toBe(0);

    const notes = [friend.sign({ content: 'from the web' }), stranger.sign({ content: 'from outside' })];
    const { code, stdout, stderr } = await cli(['import', '-'], { DATABASE_URL: url, WOT_ROOTS: root.pubkey }, notes.map((e) => JSON.stringify(e)).join('\n'));
    expect(code).toBe(0);
    expect(stdout).toMatch(/^accepted: +1$/m);
    // The importers count a refusal by the relay's rules as invalid, as they count a ban.
    expect(stdout).toMatch(/^invalid: +1$/m);
    expect(stdout).toMatch(/^ +1 +blocked: not in this relay's web of trust$/m);
    expect(stderr).toContain("line 2: blocked: not in this relay's web of trust");
  });
});
