// The README's client example: publish a note and read it back with nostr-tools.
// Usage: node scripts/example-client.mjs [ws://127.0.0.1:8008]
import { finalizeEvent, generateSecretKey } from 'nostr-tools/pure';
import { Relay, useWebSocketImplementation } from 'nostr-tools/relay';
import WebSocket from 'ws';

useWebSocketImplementation(WebSocket); // Node has no global WebSocket before v22

const relay = await Relay.connect(process.argv[2] ?? 'ws://127.0.0.1:8008');
const secretKey = generateSecretKey();
const note = finalizeEvent(
  { kind: 1, created_at: Math.floor(Date.now() / 1000), tags: [['t', 'pgrelay']], content: 'hello from pgrelay' },
  secretKey,
);
await relay.publish(note); // resolves on OK true, throws with the relay's reason on OK false
console.log('published', note.id);

const sub = relay.subscribe([{ '#t': ['pgrelay'], limit: 10 }], {
  onevent: (event) => console.log('received', event.id, event.content),
  oneose: () => {
    sub.close();
    relay.close();
  },
});
