// NIP-11 relay information document (protocol.md section 3): served on the WebSocket URL to
// `Accept: application/nostr+json`, with CORS headers, announcing the limits actually configured.
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { allowKind, disallowKind } from '../../src/store/moderation.js';
import { newSigner } from '../support/keys.js';
import { httpOf, rpc } from '../support/management.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8'));

let relay: TestRelay;
let httpUrl: string;
beforeAll(async () => {
  relay = await startTestRelay({
    RELAY_NAME: 'test relay',
    MAX_MESSAGE_BYTES: '4096',
    MAX_SUBSCRIPTIONS: '3',
    MAX_FILTERS: '4',
    MAX_LIMIT: '50',
    DEFAULT_LIMIT: '7',
    MAX_SUBID_LENGTH: '16',
    MAX_EVENT_TAGS: '9',
    MAX_CONTENT_LENGTH: '1000',
    MIN_POW_DIFFICULTY: '5',
    CREATED_AT_FUTURE_SECONDS: '120',
    CREATED_AT_PAST_SECONDS: '86400',
  });
  httpUrl = relay.url.replace(/^ws/, 'http') + '/';
});
afterAll(async () => {
  await relay.close();
});

const nostrJson = { headers: { Accept: 'application/nostr+json' } };

/** The JSON document under test: its shape is what the tests check. */
type Info = Record<string, any>;

async function getInfo(url = httpUrl): Promise<Info> {
  return (await fetch(url, nostrJson)).json() as Promise<Info>;
}

function expectCors(res: Response): void {
  expect(res.headers.get('access-control-allow-origin')).toBe('*');
  expect(res.headers.get('access-control-allow-headers')).toBeTruthy();
  expect(res.headers.get('access-control-allow-methods')).toMatch(/GET/);
}

describe('NIP-11', () => {
  it('answers GET with Accept: application/nostr+json with the JSON document and its content type', async () => {
    const res = await fetch(httpUrl, nostrJson);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/nostr\+json/);
    const info = (await res.json()) as Info;
    expect(info.name).toBe('test relay');
  });

  it('sends the CORS headers with the document', async () => {
    expectCors(await fetch(httpUrl, nostrJson));
  });

  it('lists the supported NIPs as integers, including the ones this relay implements', async () => {
    const info = await getInfo();
    expect(info.supported_nips.every((n: unknown) => Number.isInteger(n))).toBe(true);
    expect(info.supported_nips).toEqual(expect.arrayContaining([1, 9, 11, 13, 40, 42, 45, 62, 70]));
  });

  it('names the software by its homepage URL and gives the package version', async () => {
    const info = await getInfo();
    expect(info.software).toBe(pkg.homepage);
    expect(info.software).toMatch(/^https?:\/\//);
    expect(info.version).toBe(pkg.version);
  });

  it('announces the configured limits', async () => {
    const { limitation } = await getInfo();
    expect(limitation).toMatchObject({
      max_message_length: 4096,
      max_subscriptions: 3,
      max_limit: 50,
      default_limit: 7,
      max_subid_length: 16,
      max_event_tags: 9,
      max_content_length: 1000,
      min_pow_difficulty: 5,
      created_at_upper_limit: 120,
      created_at_lower_limit: 86400,
      auth_required: false,
      payment_required: false,
    });
  });

  it('announces no fees nor payments_url, and no payment required, when none are configured', async () => {
    const info = await getInfo();
    expect(info).not.toHaveProperty('fees');
    expect(info).not.toHaveProperty('payments_url');
    expect(info.limitation.payment_required).toBe(false);
  });

  it('answers a CORS preflight (OPTIONS) with the CORS headers', async () => {
    const res = await fetch(httpUrl, {
      method: 'OPTIONS',
      headers: { Origin: 'https://client.example', 'Access-Control-Request-Method': 'GET', 'Access-Control-Request-Headers': 'accept' },
    });
    expect(res.status).toBeLessThan(300);
    expectCors(res);
  });

  it('answers other GETs with a human-readable text page, not the JSON document', async () => {
    const res = await fetch(httpUrl, { headers: { Accept: 'text/html' } });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\//);
    const body = await res.text();
    expect(body).toMatch(/nostr/i);
    expect(() => JSON.parse(body)).toThrow();
  });
});

describe('NIP-11 with default limits', () => {
  it('announces the default limits of a relay started without overrides', async () => {
    const plain = await startTestRelay();
    try {
      const { limitation } = await getInfo(plain.url.replace(/^ws/, 'http'));
      expect(limitation).toMatchObject({
        max_message_length: plain.config.MAX_MESSAGE_BYTES,
        max_subscriptions: plain.config.MAX_SUBSCRIPTIONS,
        max_limit: plain.config.MAX_LIMIT,
        default_limit: plain.config.DEFAULT_LIMIT,
        min_pow_difficulty: 0,
        restricted_writes: false,
      });
    } finally {
      await plain.close();
    }
  });
});

describe('NIP-11 and AUTH_REQUIRED', () => {
  it.each([
    ['none', false, false],
    ['writes', false, true],
    ['all', true, true],
  ])('AUTH_REQUIRED=%s announces auth_required %s and restricted_writes %s', async (mode, authRequired, restrictedWrites) => {
    const relay = await startTestRelay({ AUTH_REQUIRED: mode });
    try {
      const { limitation } = await getInfo(relay.url.replace(/^ws/, 'http'));
      expect(limitation).toMatchObject({ auth_required: authRequired, restricted_writes: restrictedWrites });
    } finally {
      await relay.close();
    }
  });
});

describe('NIP-11 restricted_writes and the moderation lists', () => {
  // A relay with an admin and nothing else that restricts writes: each list below is the one condition.
  const admin = newSigner();
  let managed: TestRelay;
  let managedUrl: string;
  beforeAll(async () => {
    managed = await startTestRelay({ ADMIN_PUBKEYS: admin.pubkey });
    managedUrl = httpOf(managed.url);
  });
  afterAll(async () => {
    await managed.close();
  });

  const restrictedWrites = async () => (await getInfo(managedUrl)).limitation.restricted_writes;
  async function call(method: string, params: unknown[]): Promise<void> {
    expect(await rpc(managedUrl, admin, method, params)).toMatchObject({ status: 200, body: { result: true } });
  }

  it('announces restricted_writes while the pubkey allow list has a key, and not once it is empty again', async () => {
    expect(await restrictedWrites()).toBe(false);
    const member = newSigner().pubkey;
    await call('allowpubkey', [member]);
    expect(await restrictedWrites()).toBe(true);
    await call('unallowpubkey', [member]);
    expect(await restrictedWrites()).toBe(false);
  });

  it('announces restricted_writes while the kind allow list has a kind, also when another process changed it', async () => {
    expect(await restrictedWrites()).toBe(false);
    // As `npm run cli -- allow kind 1` would, beside the relay: its watch of the lists picks it up.
    await allowKind(managed.db.pool, 1);
    await expect.poll(restrictedWrites, { timeout: 10_000, interval: 50 }).toBe(true);
    await disallowKind(managed.db.pool, 1);
    await expect.poll(restrictedWrites, { timeout: 10_000, interval: 50 }).toBe(false);
  });
});

describe('NIP-11 and the NIP-86 management API', () => {
  it('lists NIP-86 with ADMIN_PUBKEYS set, where an admin\'s call is carried out', async () => {
    const admin = newSigner();
    const managed = await startTestRelay({ ADMIN_PUBKEYS: admin.pubkey });
    try {
      expect((await getInfo(httpOf(managed.url))).supported_nips).toContain(86);
      expect(await rpc(httpOf(managed.url), admin, 'supportedmethods')).toMatchObject({ status: 200, body: { result: expect.arrayContaining(['banpubkey']) } });
    } finally {
      await managed.close();
    }
  });

  it('does not list NIP-86 without ADMIN_PUBKEYS, where every call is refused', async () => {
    expect((await getInfo()).supported_nips).not.toContain(86);
    expect(await rpc(httpUrl, newSigner(), 'supportedmethods')).toMatchObject({ status: 403 });
  });
});
