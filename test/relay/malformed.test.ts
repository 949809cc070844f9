// Malformed input (protocol.md 1.7): a NOTICE (or CLOSED where a subscription id exists), and the same
// connection keeps working. Nothing a client sends can take the relay down.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestClient } from '../support/client.js';
import { newSigner } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

let relay: TestRelay;
let client: TestClient;
beforeAll(async () => {
  relay = await startTestRelay();
  client = await TestClient.connect(relay.url);
});
afterAll(async () => {
  client.close();
  await relay.close();
});

/** The connection still works: an event is accepted and served back. */
async function expectUsable(c: TestClient): Promise<void> {
  const e = newSigner().sign({ content: 'still here' });
  expect(await c.publish(e)).toEqual([true, '']);
  expect(await c.fetch('usable', { ids: [e.id] })).toEqual([e]);
}

const depth = 50_000; // well within MAX_MESSAGE_BYTES (128 KiB)
const deep = '['.repeat(depth) + ']'.repeat(depth);
const deepObject = '{"a":'.repeat(depth / 5) + '1' + '}'.repeat(depth / 5);

describe('messages answered with a NOTICE', () => {
  it.each([
    ['text that is not JSON', 'hello relay'],
    ['truncated JSON', '["REQ","x",{"kinds":[1]'],
    ['a JSON object', '{"type":"REQ"}'],
    ['a JSON string', '"EVENT"'],
    ['a JSON number', '42'],
    ['null', 'null'],
    ['an empty array', '[]'],
    ['a verb that is not a string', '[1,2,3]'],
    ['an unknown verb', '["HELLO","x"]'],
    ['a lowercase verb', '["req","x",{}]'],
    ['EVENT with no event', '["EVENT"]'],
    ['EVENT with two events', '["EVENT",{},{}]'],
    ['EVENT with a string', '["EVENT","not an event"]'],
    ['EVENT with null', '["EVENT",null]'],
    ['EVENT with an array', '["EVENT",[1,2]]'],
    ['REQ with no subscription id', '["REQ"]'],
    ['COUNT with no subscription id', '["COUNT"]'],
    ['CLOSE with no subscription id', '["CLOSE"]'],
    ['CLOSE with a number', '["CLOSE",5]'],
    ['deeply nested arrays', deep],
    ['deeply nested objects', deepObject],
    ['EVENT holding deeply nested arrays', `["EVENT",${deep}]`],
  ])('%s', async (_, text) => {
    const from = client.mark;
    client.sendRaw(text);
    expect(typeof (await client.notice(from))).toBe('string');
    await expectUsable(client);
  });

  it('binary garbage in a binary frame', async () => {
    const from = client.mark;
    client.sendRaw(randomBytes(2048), true);
    expect(typeof (await client.notice(from))).toBe('string');
    await expectUsable(client);
  });

  it('one NOTICE per bad message, in a burst of 200', async () => {
    const from = client.mark;
    for (let i = 0; i < 200; i++) client.sendRaw(`garbage ${i}`);
    await client.sync();
    expect(client.messages.slice(from).filter((m) => m[0] === 'NOTICE')).toHaveLength(200);
    await expectUsable(client);
  });
});

describe('messages answered with CLOSED (a subscription id exists)', () => {
  it.each([
    ['REQ with no filters', '["REQ","nofilter"]', 'nofilter'],
    ['COUNT with no filters', '["COUNT","nofilter"]', 'nofilter'],
    ['REQ with a filter that is a string', '["REQ","str","kinds"]', 'str'],
    ['REQ with a null filter', '["REQ","nul",null]', 'nul'],
    ['REQ with deeply nested arrays as a filter', `["REQ","deep",${deep}]`, 'deep'],
    ['REQ with deeply nested arrays in a tag filter', `["REQ","deeptag",{"#t":${deep}}]`, 'deeptag'],
    ['REQ with a limit too big for a number', '["REQ","huge",{"limit":1e400}]', 'huge'],
  ])('%s', async (_, text, subId) => {
    const from = client.mark;
    client.sendRaw(text);
    const closed = await client.waitFor((m) => m[0] === 'CLOSED' && m[1] === subId, 10_000, from);
    expect(closed[2]).toMatch(/^invalid: /);
    await expectUsable(client);
  });
});

describe('malformed events', () => {
  it('an EVENT whose id is not a string gets a NOTICE', async () => {
    const e = newSigner().sign({});
    const from = client.mark;
    client.send(['EVENT', { ...e, id: 12345 }]);
    expect(await client.notice(from)).toMatch(/^invalid: /);
    await expectUsable(client);
  });

  // Found by the fuzzer (bench/lib/fuzz.ts): a NOTICE here, where AUTH and an oversized EVENT got an OK.
  it('an EVENT whose id is an empty string gets OK false "invalid:" for that id', async () => {
    const e = newSigner().sign({});
    const from = client.mark;
    client.send(['EVENT', { ...e, id: '' }]);
    const reply = await client.waitFor((m) => m[0] === 'OK' || m[0] === 'NOTICE', 10_000, from);
    expect(reply).toEqual(['OK', '', false, expect.stringMatching(/^invalid: /)]);
    await expectUsable(client);
  });

  it('an EVENT with a deeply nested tags value gets OK false "invalid:"', async () => {
    const e = newSigner().sign({});
    const from = client.mark;
    client.sendRaw(`["EVENT",${JSON.stringify({ ...e, tags: 'X' }).replace('"X"', deep)}]`);
    const ok = await client.waitFor((m) => m[0] === 'OK' && m[1] === e.id, 10_000, from);
    expect(ok).toEqual(['OK', e.id, false, expect.stringMatching(/^invalid: /)]);
    await expectUsable(client);
  });
});

describe('protocol-level violations', () => {
  it('a text frame with invalid UTF-8 closes only that connection (1007)', async () => {
    const rude = await TestClient.connect(relay.url);
    rude.sendRaw(Buffer.from([0x5b, 0x22, 0xff, 0xfe, 0x22, 0x5d]), false);
    expect((await rude.closed()).code).toBe(1007);
    await expectUsable(client);
  });

  it('a client that disconnects in the middle of a query does not disturb the relay', async () => {
    const leaving = await TestClient.connect(relay.url);
    leaving.send(['REQ', 'gone', {}]);
    leaving.ws.terminate();
    await expectUsable(client);
  });
});

describe('the relay process', () => {
  it('still accepts new connections after all of the above', async () => {
    const fresh = await TestClient.connect(relay.url);
    await expectUsable(fresh);
    fresh.close();
  });
});
