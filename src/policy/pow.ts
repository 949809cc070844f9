// NIP-13 proof of work: events whose id has fewer leading zero bits than MIN_POW_DIFFICULTY are refused.
import { powDifficulty } from '../nostr/event.js';
import * as reason from '../nostr/reason.js';
import type { WriteRule } from './session.js';

export function powRule(minDifficulty: number): WriteRule | undefined {
  if (minDifficulty <= 0) return undefined;
  return function notEnoughWork(e) {
    const difficulty = powDifficulty(e.id);
    return difficulty < minDifficulty ? reason.pow(`difficulty ${difficulty} is less than ${minDifficulty}`) : undefined;
  };
}
