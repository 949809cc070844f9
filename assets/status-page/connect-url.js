// The address the status page tells Nostr clients to connect to: RELAY_URL when the operator set it
// (an https:// form shown as wss://), otherwise the WebSocket URL of the host the page was loaded
// from, whatever path the page itself was opened at (it is served at every path, e.g. /status).
(function (scope) {
  'use strict';
  scope.relayConnectUrl = function (relayUrl, location) {
    if (typeof relayUrl === 'string' && /^(wss?|https?):\/\/[^\s]+$/.test(relayUrl)) return relayUrl.replace(/^http/, 'ws');
    return (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host;
  };
})(typeof window !== 'undefined' ? window : globalThis);
