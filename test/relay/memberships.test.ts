// Memberships against a real relay: members whose membership ended are refused with `restricted:`
// and can renew; the NIP-86 extension methods; the admission API payment processors call
// (POST /memberships), signed as Standard Webhooks (by the `standardwebhooks` package, as a processor
// signs) or by an admin with NIP-98, applied once however often it is retried, and every refusal;
// a relay that charges; the CLI.
import { randomBytes } from 'node:crypto';
import { npubEncode, nsecEncode } from 'nostr-tools/nip19';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ModerationWatch } from '../../src/store/moderation.js';
import { allowPubkey } from '../../src/store/moderation.js';
import { changeMembership, DAY_SECONDS } from '../../src/store/memberships.js';
import { runCli } from '../support/cli.js';
import { TestClient } from '../support/client.js';
import { unique } from '../support/events.js';
import { newSigner, now, type Signer } from '../support/keys.js';
import { authHeader, httpOf, rpc } from '../support/management.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const JOIN_URL = 'https://relay.example.com/join';
const admin = newSigner();

let relay: TestRelay;
let api: string;
let client: TestClient;

beforeAll(async () => {
  relay = await startTestRelay({ ADMIN_PUBKEYS: admin.pubkey, MEMBERSHIP_WEBHOOK_SECRET: SECRET, RELAY_PAYMENTS_URL: JOIN_URL });
  api = `${httpOf(relay.url)}memberships`;
  client = await TestClient.connect(relay.url);
});
afterAll(async () => {
  client?.close();
  await relay?.close();
});

/** What the store changed, applied by this relay process now (the others poll within a second). */
const applied = (r: TestRelay = relay) => (r.relay.context.policy.moderation as ModerationWatch).reload();
const iso = (unix: number) => new Date(unix * 1000).toISOString().replace('.000Z', 'Z');
const publish = (signer: Signer, c = client) => c.publish(signer.sign({ content: unique('note') }));
const endOf = async (pubkey: string): Promise<number | null | undefined> => {
  const { rows } = await relay.db.pool.query<{ until: string | null }>(
    "SELECT floor(extract(epoch FROM expires_at))::bigint AS until FROM allowed_pubkeys WHERE pubkey = decode($1, 'hex')",
    [pubkey],
  );
  return rows.length === 0 ? undefined : rows[0].until === null ? null : Number(rows[0].until);
};

interface Reply {
  status: number;
  body: { pubkey?: string; expires_at?: number | null; repeated?: boolean; error?: string };
}
async function post(url: string, body: string, headers: Record<string, string>): Promise<Reply> {
  const res = await fetch(url, { method: 'POST', body, headers: { 'Content-Type': 'application/json', ...headers } });
  return { status: res.status, body: (await res.json()) as Reply['body'] };
}

interface Signing {
  id?: string;
  at?: Date;
  webhook?: Webhook;
  /** Headers to leave out or to replace after signing. */
  omit?: string[];
  replace?: Record<string, string>;
  url?: string;
}
const messageId = () => `msg_${randomBytes(12).toString('hex')}`;
/** A request as a processor sends it: Standard Webhooks headers made by the standardwebhooks package. */
function signed(body: string, s: Signing = {}): Promise<Reply> {
  const id = s.id ?? messageId();
  const at = s.at ?? new Date();
  const headers: Record<string, string> = {
    'webhook-id': id,
    'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
    'webhook-signature': (s.webhook ?? new Webhook(SECRET)).sign(id, at, body),
    ...s.replace,
  };
  for (const h of s.omit ?? []) delete headers[h];
  return post(s.url ?? api, body, headers);
}
const payment = (pubkey: string, fields: Record<string, unknown> = { days: 30 }) => JSON.stringify({ pubkey, ...fields });

describe('memberships that end', () => {
  it('a member whose membership has not ended publishes', async () => {
    const member = newSigner();
    await changeMembership(relay.db.pool, member.pubkey, { until: now() + 3600 }, now());
    await applied();
    expect(await publish(member)).toEqual([true, '']);
  });

  it('an expired member is refused with restricted:, told when it ended and where to renew', async () => {
    const lapsed = newSigner();
    const ended = now() - 60;
    await changeMembership(relay.db.pool, lapsed.pubkey, { until: ended }, now());
    await applied();
    expect(await publish(lapsed)).toEqual([false, `restricted: your membership expired at ${iso(ended)}; renew at ${JOIN_URL}`]);
  });

  it('a renewal lets an expired member publish again, counted from now', async () => {
    const lapsed = newSigner();
    await changeMembership(relay.db.pool, lapsed.pubkey, { until: now() - 60 }, now());
    await applied();
    expect((await publish(lapsed))[0]).toBe(false);
    const renewed = await changeMembership(relay.db.pool, lapsed.pubkey, { days: 30 }, now());
    await applied();
    expect(renewed).toBeGreaterThanOrEqual(now() - 5 + 30 * DAY_SECONDS);
    expect(await publish(lapsed)).toEqual([true, '']);
  });

  it('a relay whose members have all expired stays private', async () => {
    await relay.db.pool.query('DELETE FROM allowed_pubkeys');
    const lapsed = newSigner();
    await changeMembership(relay.db.pool, lapsed.pubkey, { until: now() - 60 }, now());
    await applied();
    expect(await publish(newSigner())).toEqual([false, `restricted: this relay accepts events only from its allowed pubkeys; become a member at ${JOIN_URL}`]);
    expect((await publish(lapsed))[1]).toMatch(/^restricted: your membership expired/);
  });
});

describe('the NIP-86 extension methods', () => {
  const ok = async (method: string, params: unknown[]) => {
    const r = await rpc(httpOf(relay.url), admin, method, params);
    expect(r.body.error).toBeUndefined();
    return r.body.result;
  };

  it('supportedmethods lists allowpubkeyuntil and extendmembership', async () => {
    expect(await ok('supportedmethods', [])).toEqual(expect.arrayContaining(['allowpubkeyuntil', 'extendmembership', 'allowpubkey', 'listallowedpubkeys']));
  });

  it('allowpubkeyuntil sets the end, and listallowedpubkeys shows it as expires_at', async () => {
    const member = newSigner();
    const until = now() + 7 * DAY_SECONDS;
    expect(await ok('allowpubkeyuntil', [npubEncode(member.pubkey), until, 'trial'])).toBe(true);
    expect(await ok('listallowedpubkeys', [])).toContainEqual({ pubkey: member.pubkey, reason: 'trial', expires_at: until });
    expect(await publish(member)).toEqual([true, '']);
    expect(await ok('allowpubkeyuntil', [member.pubkey, String(now() - 1)])).toBe(true);
    expect((await publish(member))[1]).toMatch(/^restricted: your membership expired/);
  });

  it('extendmembership adds days to the current end and answers the new one', async () => {
    const member = newSigner();
    const until = now() + DAY_SECONDS;
    await ok('allowpubkeyuntil', [member.pubkey, until]);
    expect(await ok('extendmembership', [member.pubkey, 30])).toEqual({ pubkey: member.pubkey, expires_at: until + 30 * DAY_SECONDS });
    expect(await endOf(member.pubkey)).toBe(until + 30 * DAY_SECONDS);
  });

  it('listallowedpubkeys shows no expires_at for a membership without end', async () => {
    const founder = newSigner();
    await ok('allowpubkey', [founder.pubkey, 'founder']);
    expect(await ok('listallowedpubkeys', [])).toContainEqual({ pubkey: founder.pubkey, reason: 'founder' });
  });

  it.each([
    ['days of 0', 'extendmembership', [admin.pubkey, 0], /days to add, from 1 to 3650/],
    ['days over ten years', 'extendmembership', [admin.pubkey, 3651], /days to add/],
    ['days that are not a number', 'extendmembership', [admin.pubkey, 'month'], /days to add/],
    ['an end that is not unix seconds', 'allowpubkeyuntil', [admin.pubkey, '2027-01-01'], /unix seconds/],
    ['an end over ten years ahead', 'allowpubkeyuntil', [admin.pubkey, now() + 3651 * DAY_SECONDS], /unix seconds/],
    ['a pubkey that is not one', 'extendmembership', ['ABC', 30], /pubkey/],
  ])('refuses %s and changes nothing', async (_, method, params, error) => {
    const before = await endOf(admin.pubkey);
    const r = await rpc(httpOf(relay.url), admin, method, params as unknown[]);
    expect(r).toMatchObject({ status: 200, body: { result: null, error: expect.stringMatching(error) } });
    expect(await endOf(admin.pubkey)).toBe(before);
  });
});

describe('POST /memberships, signed by a payment processor (Standard Webhooks)', () => {
  it('adds a membership of the days paid for, and the member publishes at once', async () => {
    const buyer = newSigner();
    const r = await signed(payment(buyer.pubkey, { days: 30, reference: unique('inv') }));
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ pubkey: buyer.pubkey, repeated: false });
    expect(r.body.expires_at).toBeGreaterThanOrEqual(now() - 5 + 30 * DAY_SECONDS);
    expect(await endOf(buyer.pubkey)).toBe(r.body.expires_at);
    expect(await publish(buyer)).toEqual([true, '']);
  });

  it('extends a membership from its current end (npub accepted)', async () => {
    const buyer = newSigner();
    const until = now() + 10 * DAY_SECONDS;
    await changeMembership(relay.db.pool, buyer.pubkey, { until }, now());
    const r = await signed(payment(npubEncode(buyer.pubkey), { days: 30 }));
    expect(r.body).toEqual({ pubkey: buyer.pubkey, expires_at: until + 30 * DAY_SECONDS, repeated: false });
  });

  it('sets the end a request names with until', async () => {
    const buyer = newSigner();
    const until = now() + 90 * DAY_SECONDS;
    expect((await signed(payment(buyer.pubkey, { until }))).body).toEqual({ pubkey: buyer.pubkey, expires_at: until, repeated: false });
  });

  it('answers a retried request (the same webhook-id) as the first, without adding the days again', async () => {
    const buyer = newSigner();
    const body = payment(buyer.pubkey);
    const id = messageId();
    const first = await signed(body, { id });
    const retry = await signed(body, { id, at: new Date(Date.now() + 2000) }); // a retry is signed again, later
    expect(retry).toEqual({ status: 200, body: { ...first.body, repeated: true } });
    expect(await endOf(buyer.pubkey)).toBe(first.body.expires_at);
  });

  it('answers the same payment reference under another webhook-id as the first, without adding the days again', async () => {
    const buyer = newSigner();
    const body = payment(buyer.pubkey, { days: 30, reference: unique('invoice') });
    const first = await signed(body);
    expect((await signed(body)).body).toEqual({ ...first.body, repeated: true });
    expect(await endOf(buyer.pubkey)).toBe(first.body.expires_at);
  });

  it('answers 409 to a webhook-id used before for another pubkey', async () => {
    const id = messageId();
    await signed(payment(newSigner().pubkey), { id });
    const other = newSigner();
    expect(await signed(payment(other.pubkey), { id })).toMatchObject({ status: 409, body: { error: expect.stringMatching(/^conflict: /) } });
    expect(await endOf(other.pubkey)).toBeUndefined();
  });

  it('does not add the days again when a retry reaches another relay process on the same database', async () => {
    const second = await startTestRelay({ MEMBERSHIP_WEBHOOK_SECRET: SECRET }, relay.config.DATABASE_URL);
    try {
      const buyer = newSigner();
      const body = payment(buyer.pubkey);
      const id = messageId();
      const first = await signed(body, { id });
      const retry = await signed(body, { id, url: `${httpOf(second.url)}memberships` });
      expect(retry).toEqual({ status: 200, body: { ...first.body, repeated: true } });
      expect(await endOf(buyer.pubkey)).toBe(first.body.expires_at);
    } finally {
      await second.close();
    }
  });

  it('accepts a request whose webhook-signature carries several signatures, one of them valid (a secret being rotated)', async () => {
    const buyer = newSigner();
    const body = payment(buyer.pubkey);
    const id = messageId();
    const at = new Date();
    const old = new Webhook(`whsec_${randomBytes(32).toString('base64')}`).sign(id, at, body);
    const current = new Webhook(SECRET).sign(id, at, body);
    const r = await signed(body, { id, at, replace: { 'webhook-signature': `${old} v1a,${randomBytes(64).toString('base64')} ${current}` } });
    expect(r.status).toBe(200);
  });

  it.each<[string, (body: string) => Signing, RegExp]>([
    ['no webhook-signature header', () => ({ omit: ['webhook-signature'] }), /headers are all required/],
    ['no webhook-timestamp header', () => ({ omit: ['webhook-timestamp'] }), /headers are all required/],
    ['a signature made with another secret', () => ({ webhook: new Webhook(`whsec_${randomBytes(24).toString('base64')}`) }), /no v1 signature .* matches/],
    ['a signature of another body', () => ({ replace: { 'webhook-signature': new Webhook(SECRET).sign('msg_x', new Date(), '{}') } }), /no v1 signature .* matches/],
    ['a signature of another webhook-id', () => ({ replace: { 'webhook-id': messageId() } }), /no v1 signature .* matches/],
    ['a signature that is not v1', () => ({ replace: { 'webhook-signature': `v1a,${randomBytes(64).toString('base64')}` } }), /no v1 signature/],
    ['a timestamp six minutes old', () => ({ at: new Date(Date.now() - 6 * 60_000) }), /within 5 minutes of now/],
    ['a timestamp six minutes ahead', () => ({ at: new Date(Date.now() + 6 * 60_000) }), /within 5 minutes of now/],
    ['a timestamp that is not unix seconds', () => ({ replace: { 'webhook-timestamp': new Date().toISOString() } }), /unix seconds/],
  ])('answers 401 to %s, and changes nothing', async (_, signing, error) => {
    const buyer = newSigner();
    const body = payment(buyer.pubkey);
    const r = await signed(body, signing(body));
    expect(r).toMatchObject({ status: 401, body: { error: expect.stringMatching(error) } });
    expect(r.body.error).toMatch(/^unauthorized: /);
    expect(await endOf(buyer.pubkey)).toBeUndefined();
  });

  it('answers 401 to a request with neither signature nor Authorization', async () => {
    const r = await post(api, payment(newSigner().pubkey), {});
    expect(r).toMatchObject({ status: 401, body: { error: expect.stringMatching(/Standard Webhook .* NIP-98/) } });
  });

  const buyer = newSigner().pubkey;
  it.each([
    ['a body that is not JSON', 'pubkey=x&days=30', /not JSON/],
    ['a body that is not an object', JSON.stringify([buyer, 30]), /JSON object/],
    ['an unknown field', payment(buyer, { days: 30, months: 1 }), /unknown field "months"/],
    ['a pubkey in upper case', payment(buyer.toUpperCase()), /pubkey must be/],
    ['a secret key for a pubkey', payment(nsecEncode(randomBytes(32))), /pubkey must be/],
    ['no pubkey', JSON.stringify({ days: 30 }), /pubkey must be/],
    ['days of 0', payment(buyer, { days: 0 }), /days must be an integer from 1 to 3650/],
    ['days over ten years', payment(buyer, { days: 3651 }), /days must be an integer from 1 to 3650/],
    ['a fraction of a day', payment(buyer, { days: 1.5 }), /days must be an integer/],
    ['days as text', payment(buyer, { days: '30' }), /days must be an integer/],
    ['both days and until', payment(buyer, { days: 30, until: now() + 60 }), /either days .* or until/],
    ['neither days nor until', payment(buyer, {}), /either days .* or until/],
    ['an end in the past', payment(buyer, { until: now() - 60 }), /until must be unix seconds after now/],
    ['an end in milliseconds', payment(buyer, { until: Date.now() + 60_000 }), /until must be unix seconds/],
    ['an empty reference', payment(buyer, { days: 30, reference: '' }), /reference must be/],
    ['a reference of 257 characters', payment(buyer, { days: 30, reference: 'r'.repeat(257) }), /reference must be/],
  ])('answers 400 to %s, and changes nothing', async (_, body, error) => {
    const r = await signed(body);
    expect(r).toMatchObject({ status: 400, body: { error: expect.stringMatching(error) } });
    expect(r.body.error).toMatch(/^bad request: /);
    expect(await endOf(buyer)).toBeUndefined();
  });

  it('answers 413 to a body over 16 KiB and 405 to a GET', async () => {
    expect((await signed(payment(newSigner().pubkey, { days: 30, reference: 'r'.repeat(17_000) }))).status).toBe(413);
    expect((await fetch(api)).status).toBe(405);
  });
});

describe('POST /memberships by an admin (NIP-98)', () => {
  const byAdmin = (body: string, signer: Signer = admin, parts = {}) => post(api, body, { Authorization: authHeader(signer, api, body, parts) });

  it('adds and extends a membership', async () => {
    const buyer = newSigner();
    const first = await byAdmin(payment(buyer.pubkey, { days: 30 }));
    expect(first).toMatchObject({ status: 200, body: { pubkey: buyer.pubkey, repeated: false } });
    const second = await byAdmin(payment(buyer.pubkey, { days: 10 }));
    expect(second.body.expires_at).toBe(first.body.expires_at! + 10 * DAY_SECONDS);
    expect(await publish(buyer)).toEqual([true, '']);
  });

  it('answers a replayed Authorization header as the first, without adding the days again', async () => {
    const buyer = newSigner();
    const body = payment(buyer.pubkey);
    const header = authHeader(admin, api, body);
    const first = await post(api, body, { Authorization: header });
    expect(await post(api, body, { Authorization: header })).toEqual({ status: 200, body: { ...first.body, repeated: true } });
    expect(await endOf(buyer.pubkey)).toBe(first.body.expires_at);
  });

  it('answers 403 to a valid key that is not an admin, and changes nothing', async () => {
    const buyer = newSigner();
    expect(await byAdmin(payment(buyer.pubkey), newSigner())).toMatchObject({ status: 403, body: { error: expect.stringMatching(/^forbidden: /) } });
    expect(await endOf(buyer.pubkey)).toBeUndefined();
  });

  it.each([
    ['the payload hash of another body', { payload: 'a'.repeat(64) }, /not the sha256/],
    ['no payload tag', { payload: null }, /payload tag .* is required/],
    ['61 s old', { created_at: now() - 61 }, /within 60 seconds/],
  ])('answers 401 to a header with %s', async (_, parts, error) => {
    const buyer = newSigner();
    expect(await byAdmin(payment(buyer.pubkey), admin, parts)).toMatchObject({ status: 401, body: { error: expect.stringMatching(error) } });
    expect(await endOf(buyer.pubkey)).toBeUndefined();
  });

  it("answers 401 to a u tag naming the relay's own URL rather than /memberships", async () => {
    const body = payment(newSigner().pubkey);
    const r = await post(api, body, { Authorization: authHeader(admin, httpOf(relay.url), body) });
    expect(r).toMatchObject({ status: 401, body: { error: expect.stringMatching(/u tag/) } });
  });
});

describe('the CLI', () => {
  const env = () => ({ DATABASE_URL: relay.config.DATABASE_URL!, LOG_LEVEL: 'silent' });

  it('allow pubkey --days adds days, --until sets the end, list shows it, and the relay applies it within a second', async () => {
    const member = newSigner();
    const added = await runCli(['allow', 'pubkey', npubEncode(member.pubkey), '--days', '30', '--reason', 'paid in cash'], env());
    expect(added).toMatchObject({ code: 0, stdout: expect.stringMatching(/^allowed pubkey npub1\S+ {2}until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\n$/) });
    const end = (await endOf(member.pubkey))!;
    expect(end).toBeGreaterThanOrEqual(now() - 5 + 30 * DAY_SECONDS);
    expect((await runCli(['allow', 'pubkey', member.pubkey, '--days', '30'], env())).code).toBe(0);
    expect(await endOf(member.pubkey)).toBe(end + 30 * DAY_SECONDS);
    await expect.poll(async () => (await publish(member))[0], { timeout: 10_000, interval: 50 }).toBe(true);

    expect((await runCli(['allow', 'pubkey', member.pubkey, '--until', '2020-01-01'], env())).code).toBe(0);
    expect(await endOf(member.pubkey)).toBe(Date.parse('2020-01-01') / 1000);
    const listed = await runCli(['list', 'allowed-pubkeys'], env());
    expect(listed.stdout).toContain(`  ${member.pubkey}  until 2020-01-01T00:00:00Z (expired)  paid in cash\n`);
    const json = JSON.parse((await runCli(['list', 'allowed-pubkeys', '--json'], env())).stdout);
    expect(json['allowed-pubkeys']).toContainEqual({ key: member.pubkey, reason: 'paid in cash', expires_at: Date.parse('2020-01-01') / 1000 });
    await expect.poll(async () => (await publish(member))[1], { timeout: 10_000, interval: 50 }).toMatch(/^restricted: your membership expired at 2020-01-01T00:00:00Z/);
  });

  it('allow pubkey without --days or --until makes a membership without end', async () => {
    const member = newSigner();
    await changeMembership(relay.db.pool, member.pubkey, { days: 3 }, now());
    expect(await runCli(['allow', 'pubkey', member.pubkey], env())).toMatchObject({ code: 0, stdout: `allowed pubkey ${member.pubkey}\n` });
    expect(await endOf(member.pubkey)).toBeNull();
  });

  it.each([
    [['allow', 'pubkey', admin.pubkey, '--days', '0'], /--days must be an integer from 1 to 3650/],
    [['allow', 'pubkey', admin.pubkey, '--days', '30', '--until', '2030-01-01'], /--days or --until, not both/],
    [['allow', 'pubkey', admin.pubkey, '--until', 'next month'], /--until must be a date/],
    [['allow', 'kind', '1', '--days', '30'], /go with allow pubkey/],
  ])('refuses %j', async (args, error) => {
    expect(await runCli(args, env())).toMatchObject({ code: 2, stderr: expect.stringMatching(error) });
  });
});

describe('a relay that charges (RELAY_PAYMENT_REQUIRED)', () => {
  let paid: TestRelay;
  let c: TestClient;
  const fees = { admission: [{ amount: 21_000_000, unit: 'msats' }], subscription: [{ amount: 5_000_000, unit: 'msats', period: 30 * DAY_SECONDS }] };
  beforeAll(async () => {
    paid = await startTestRelay({ RELAY_PAYMENT_REQUIRED: 'true', RELAY_PAYMENTS_URL: JOIN_URL, RELAY_FEES: JSON.stringify(fees), ADMIN_PUBKEYS: admin.pubkey });
    c = await TestClient.connect(paid.url);
  });
  afterAll(async () => {
    c?.close();
    await paid?.close();
  });

  it('refuses everyone while it has no member, saying where to pay', async () => {
    expect(await publish(newSigner(), c)).toEqual([false, `restricted: this relay accepts events only from its allowed pubkeys; become a member at ${JOIN_URL}`]);
  });

  it('accepts a member', async () => {
    const member = newSigner();
    await allowPubkey(paid.db.pool, member.pubkey);
    await applied(paid);
    expect(await publish(member, c)).toEqual([true, '']);
  });

  it('announces payment_required, restricted_writes, fees and payments_url in NIP-11', async () => {
    const info = (await (await fetch(httpOf(paid.url), { headers: { Accept: 'application/nostr+json' } })).json()) as Record<string, any>;
    expect(info.limitation).toMatchObject({ payment_required: true, restricted_writes: true });
    expect(info.fees).toEqual(fees);
    expect(info.payments_url).toBe(JOIN_URL);
  });

  it('answers 401 to a signed request when it has no MEMBERSHIP_WEBHOOK_SECRET', async () => {
    const buyer = newSigner();
    const r = await signed(payment(buyer.pubkey), { url: `${httpOf(paid.url)}memberships` });
    expect(r).toMatchObject({ status: 401, body: { error: expect.stringMatching(/MEMBERSHIP_WEBHOOK_SECRET is not set/) } });
  });
});
