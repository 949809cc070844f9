#!/usr/bin/env node
// A strfry write-policy plugin that accepts every event: what bench:ingest --plugin measures is the
// relay's side of the round trip (one JSON line each way per event), with a plugin that does the
// least a real one does (reads and parses each request, answers with the event's id).
import { createInterface } from 'node:readline';

createInterface({ input: process.stdin, terminal: false }).on('line', (line) => {
  const { event } = JSON.parse(line);
  process.stdout.write(`{"id":"${event.id}","action":"accept"}\n`);
});
