import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.js';
import { describeHosts, parseDatabaseUrl } from '../../src/store/database-url.js';

describe('DATABASE_URL with several hosts (libpq form)', () => {
  it('reads every host and port, the default port where none is given, and target_session_attrs', () => {
    const a = parseDatabaseUrl('postgres://u:p%40ss@h1:5432,h2,[::1]:5434/nostr?target_session_attrs=read-write&sslmode=disable');
    expect(a.hosts).toEqual([
      { host: 'h1', port: 5432 },
      { host: 'h2', port: 5432 },
      { host: '::1', port: 5434 },
    ]);
    expect(a.attrs).toBe('read-write');
    // node-postgres gets one host, the credentials as written and the other parameters.
    expect(a.base).toBe('postgres://u:p%40ss@h1:5432/nostr?sslmode=disable');
    expect(a.urlFor(a.hosts[2])).toBe('postgres://u:p%40ss@[::1]:5434/nostr?sslmode=disable');
    expect(describeHosts('postgres://u:secret@h1:1,h2:2/db')).toBe('h1:1,h2:2');
  });

  it('keeps a one-host URL as it is, with attrs any', () => {
    const a = parseDatabaseUrl('postgresql://u:p@127.0.0.1:5433/nostr');
    expect(a).toMatchObject({ hosts: [{ host: '127.0.0.1', port: 5433 }], attrs: 'any', base: 'postgresql://u:p@127.0.0.1:5433/nostr' });
  });

  it('refuses an unknown target_session_attrs and a host it cannot read, in the configuration', () => {
    expect(() => parseDatabaseUrl('postgres://h1,h2/db?target_session_attrs=leader')).toThrow(/target_session_attrs=leader/);
    expect(() => parseConfig({ DATABASE_URL: 'postgres://u:p@h1:5432,h2:5433/db?target_session_attrs=writable' })).toThrow(/DATABASE_URL/);
    expect(() => parseConfig({ DATABASE_URL: 'postgres://u:p@h1:5432,:5433/db' })).toThrow(/DATABASE_URL/);
    expect(() => parseConfig({ DATABASE_URL: 'mysql://h1/db' })).toThrow(/DATABASE_URL/);
  });

  it('accepts several hosts in DATABASE_URL, and READ_DATABASE_URL lists URLs that have several hosts each', () => {
    const config = parseConfig({
      DATABASE_URL: 'postgres://u:p@h1:5432,h2:5433,h3:5434/nostr?target_session_attrs=read-write',
      READ_DATABASE_URL: 'postgres://u:p@h1:5432,h2:5433/nostr?target_session_attrs=prefer-standby, postgres://u:p@r9:5432/nostr',
    });
    expect(config.DATABASE_URL).toBe('postgres://u:p@h1:5432,h2:5433,h3:5434/nostr?target_session_attrs=read-write');
    expect(config.READ_DATABASE_URL).toEqual(['postgres://u:p@h1:5432,h2:5433/nostr?target_session_attrs=prefer-standby', 'postgres://u:p@r9:5432/nostr']);
  });
});
