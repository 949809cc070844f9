// Standard Webhooks verification, as POST /memberships checks a processor's request: the worked
// example of docs/moderation.md, the edges of the timestamp's window, and the signature list.
import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { secretKey, verifySignature } from '../../src/relay/webhook-signature.js';

// docs/moderation.md, "A worked signature".
const SECRET = 'whsec_c2VjcmV0LWZvci10aGUtbWFudWFsLW9ubHktMzI=';
const ID = 'msg_2f1c0a';
const TS = 1_800_000_000;
const BODY = '{"pubkey":"3bf0c63fcb93463407af97a5e5ee64fa883d107ef9e558472c4eb9aaaefa459d","days":30,"reference":"inv_1042"}';
const SIGNATURE = 'v1,pBRPWfeksmpGLYv1DMtLDwjIaIbxp1HSwUkCnycUqu4=';

const check = (signature: string, now = TS, timestamp = String(TS), body = BODY) =>
  verifySignature({ id: ID, timestamp, signature }, Buffer.from(body), secretKey(SECRET), now);

describe('verifying a Standard Webhooks signature', () => {
  it("accepts the manual's worked example, which the standardwebhooks package signs alike", () => {
    expect(new Webhook(SECRET).sign(ID, new Date(TS * 1000), BODY)).toBe(SIGNATURE);
    expect(check(SIGNATURE)).toEqual({ ok: true, id: ID });
  });

  it('accepts a timestamp 5 minutes away either side, and not a second more', () => {
    expect(check(SIGNATURE, TS + 300).ok).toBe(true);
    expect(check(SIGNATURE, TS - 300).ok).toBe(true);
    expect(check(SIGNATURE, TS + 301)).toEqual({ ok: false, error: 'the webhook-timestamp must be within 5 minutes of now' });
    expect(check(SIGNATURE, TS - 301).ok).toBe(false);
  });

  it('finds the matching v1 signature among several, and ignores other versions', () => {
    const other = 'v1,' + Buffer.alloc(32, 7).toString('base64');
    expect(check(`${other} v1a,${SIGNATURE.slice(3)} ${SIGNATURE}`).ok).toBe(true);
    expect(check(`v1a,${SIGNATURE.slice(3)}`).ok).toBe(false);
    expect(check(`${other} ${other}`).ok).toBe(false);
  });

  it('refuses the signature for a body changed by one byte', () => {
    expect(check(SIGNATURE, TS, String(TS), BODY.replace('"days":30', '"days":31'))).toEqual({ ok: false, error: 'no v1 signature in webhook-signature matches the body' });
  });

  it('refuses a signature truncated or padded (lengths differ, no comparison made)', () => {
    expect(check(SIGNATURE.slice(0, -2)).ok).toBe(false);
    expect(check(`${SIGNATURE}==`).ok).toBe(false);
  });
});
