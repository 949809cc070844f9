// Heartbeats (src/relay/heartbeat.ts): each connection pinged once per period, its turn spread over
// the period's ticks; one that has not answered by its next turn is terminated.
import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import { Heartbeat } from '../../src/relay/heartbeat.js';

class FakeSocket extends EventEmitter {
  pings = 0;
  terminated = false;
  ping(): void {
    this.pings++;
  }
  terminate(): void {
    this.terminated = true;
  }
  pong(): void {
    this.emit('pong');
  }
}

describe('Heartbeat', () => {
  it('spreads the pings of a period over its ticks: each socket once per period, each tick a slot', () => {
    const beat = new Heartbeat<FakeSocket>(30_000, 10);
    const sockets = Array.from({ length: 1000 }, () => new FakeSocket());
    sockets.forEach((s) => beat.add(s));
    const perTick: number[] = [];
    for (let t = 0; t < 10; t++) {
      const before = sockets.reduce((n, s) => n + s.pings, 0);
      beat.tick();
      sockets.forEach((s) => s.pong());
      perTick.push(sockets.reduce((n, s) => n + s.pings, 0) - before);
    }
    expect(perTick).toEqual(Array(10).fill(100));
    expect(sockets.every((s) => s.pings === 1 && !s.terminated)).toBe(true);
  });

  it('terminates a socket that did not answer its ping by its next turn, and only that one', () => {
    const beat = new Heartbeat<FakeSocket>(30_000, 3);
    const [quiet, answers] = [new FakeSocket(), new FakeSocket()];
    beat.add(quiet);
    beat.add(answers);
    for (let t = 0; t < 3; t++) beat.tick(); // every slot's turn: both pinged once
    answers.pong();
    expect([quiet.pings, answers.pings]).toEqual([1, 1]);
    for (let t = 0; t < 3; t++) beat.tick();
    expect(quiet.terminated).toBe(true);
    expect(answers.terminated).toBe(false);
    expect(answers.pings).toBe(2);
    // Terminated, it is no longer pinged.
    for (let t = 0; t < 6; t++) beat.tick();
    expect(quiet.pings).toBe(1);
  });

  it('forgets a socket removed (closed): never pinged nor terminated again', () => {
    const beat = new Heartbeat<FakeSocket>(30_000, 2);
    const s = new FakeSocket();
    beat.add(s);
    beat.remove(s);
    for (let t = 0; t < 4; t++) beat.tick();
    expect([s.pings, s.terminated]).toEqual([0, false]);
  });
});
