#!/usr/bin/env bash
# Builds load/bin/k6-nostr: k6 (the version in load/k6-nostr/go.mod, the one install-k6.sh installs)
# with the k6/x/nostr module of load/k6-nostr/nostr, for `npm run load -- --scenario query --client
# native`. Needs Go 1.25+ and the Go module proxy (or a module cache that has k6's dependencies);
# about a minute on 2 cores the first time. Prints the binary's path on its last line.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
src="$here/load/k6-nostr"
out="$here/load/bin/k6-nostr"

if ! command -v go >/dev/null 2>&1; then
  cat >&2 <<MSG
Go is not installed: the k6 with k6/x/nostr is built from source. Install Go 1.25+
(https://go.dev/dl/) and run this script again. Without it, \`npm run load\` still runs the query
scenario with stock k6 (--client k6ws, the default).
MSG
  exit 1
fi
echo "building k6 with k6/x/nostr ($(go version | awk '{print $3}'))…" >&2
mkdir -p "$(dirname "$out")"
(cd "$src" && go build -trimpath -o "$out" .)
"$out" version >&2
echo "$out"
