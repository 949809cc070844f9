// NIP-77: how many snapshot records the negentropy sessions of this process hold together
// (relay/negentropy.ts), against NEGENTROPY_MAX_TOTAL_RECORDS; read by /metrics.

/** Records held by every open session of this process (NEGENTROPY_MAX_TOTAL_RECORDS). */
export class NegentropyBudget {
  private used = 0;

  constructor(private readonly max: number) {}

  get records(): number {
    return this.used;
  }

  take(n: number): boolean {
    if (this.used + n > this.max) return false;
    this.used += n;
    return true;
  }

  give(n: number): void {
    this.used -= n;
  }
}
