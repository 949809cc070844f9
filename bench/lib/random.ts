// Deterministic randomness for benchmark corpora: the same seed always yields the same data set.

/** sfc32: a small, fast PRNG with a 128-bit state; returns floats in [0, 1). */
export function prng(seed: number): () => number {
  let a = 0x9e3779b9, b = 0x243f6a88, c = 0xb7e15162, d = seed >>> 0;
  const next = () => {
    a >>>= 0; b >>>= 0; c >>>= 0; d >>>= 0;
    const t = (a + b) | 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) | 0;
    c = (c << 21) | (c >>> 11);
    d = (d + 1) | 0;
    const r = (t + d) | 0;
    c = (c + r) | 0;
    return (r >>> 0) / 4294967296;
  };
  for (let i = 0; i < 16; i++) next(); // mix the seed in
  return next;
}

/** Samples ranks 0..n-1 with P(rank k) ∝ 1/(k+1)^s (a Zipf / power law), by binary search on the CDF. */
export function zipf(n: number, s: number, random: () => number): () => number {
  const cdf = new Float64Array(n);
  let total = 0;
  for (let k = 0; k < n; k++) cdf[k] = total += 1 / Math.pow(k + 1, s);
  return () => {
    const x = random() * total;
    let lo = 0, hi = n - 1;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (cdf[mid] < x) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
}

export function intBetween(random: () => number, min: number, max: number): number {
  return min + Math.floor(random() * (max - min + 1));
}
