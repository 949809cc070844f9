// NIP-42: kind 22242 authenticates a connection (the AUTH message); it is never stored nor broadcast.
import { KIND_AUTH } from '../nostr/kinds.js';
import * as reason from '../nostr/reason.js';
import type { WriteRule } from './session.js';

export const authEventAsEvent: WriteRule = function authEventAsEvent(e) {
  return e.kind === KIND_AUTH ? reason.invalid(`kind ${KIND_AUTH} is for AUTH messages and is never stored or broadcast`) : undefined;
};
