// Heartbeats: every connection is pinged once per period, and one that has not answered the last
// ping by its next turn is terminated (a peer gone without a FIN, a NAT that forgot the flow).
//
// Connections are dealt into slots as they open, and each tick serves one slot: the pings of a
// period are spread over it. Pinging every connection in one loop made a burst that, at 100,000
// connections (7 processes on 2 cores), held up every EVENT's OK for 1-5 s twice a minute.

/** What a heartbeat needs of a socket (ws's WebSocket). */
export interface Pingable {
  ping(): void;
  terminate(): void;
  on(event: 'pong', listener: () => void): unknown;
}

export class Heartbeat<S extends Pingable> {
  private readonly slots: Array<Set<S>>;
  private readonly slotOf = new Map<S, number>();
  private readonly alive = new WeakSet<S>();
  private next = 0;
  private turn = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly periodMs: number,
    slots = 30,
  ) {
    this.slots = Array.from({ length: slots }, () => new Set<S>());
  }

  /** Ticks every periodMs / slots; tick() by hand in tests. */
  start(): this {
    this.timer = setInterval(() => this.tick(), this.periodMs / this.slots.length);
    this.timer.unref();
    return this;
  }

  stop(): void {
    clearInterval(this.timer);
  }

  add(socket: S): void {
    const slot = this.next++ % this.slots.length;
    this.slots[slot].add(socket);
    this.slotOf.set(socket, slot);
    this.alive.add(socket);
    socket.on('pong', () => this.alive.add(socket));
  }

  remove(socket: S): void {
    const slot = this.slotOf.get(socket);
    if (slot === undefined) return;
    this.slots[slot].delete(socket);
    this.slotOf.delete(socket);
  }

  /** One slot's turn: ping who answered since its last turn, terminate who did not. */
  tick(): void {
    const slot = this.slots[this.turn];
    this.turn = (this.turn + 1) % this.slots.length;
    for (const socket of slot) {
      if (!this.alive.has(socket)) {
        this.remove(socket);
        socket.terminate();
      } else {
        this.alive.delete(socket);
        socket.ping();
      }
    }
  }
}
