#!/usr/bin/env bash
# Installs k6 (the load-testing tool behind `npm run load`) when it is missing.
# Order: k6 already on PATH or in $(go env GOPATH)/bin → `go install go.k6.io/k6@$K6_VERSION` (needs
# Go 1.25+, ~75 s on 2 cores) → the platform's package (Homebrew, or apt/dnf where a k6 package exists).
# Prints the path of the k6 binary on its last line.
set -euo pipefail

K6_VERSION="${K6_VERSION:-v1.8.1}"

found() {
  echo "k6 $("$1" version 2>/dev/null | head -n1 | awk '{print $2}') at $1" >&2
  echo "$1"
  exit 0
}

if command -v k6 >/dev/null 2>&1; then found "$(command -v k6)"; fi
if command -v go >/dev/null 2>&1; then
  gobin="$(go env GOBIN)"
  [ -n "$gobin" ] || gobin="$(go env GOPATH)/bin"
  if [ -x "$gobin/k6" ]; then found "$gobin/k6"; fi
  echo "installing k6 $K6_VERSION with go install (about a minute)…" >&2
  go install "go.k6.io/k6@$K6_VERSION"
  found "$gobin/k6"
fi
if command -v brew >/dev/null 2>&1; then
  brew install k6 >&2
  found "$(command -v k6)"
fi
if command -v apt-get >/dev/null 2>&1 && apt-cache show k6 >/dev/null 2>&1; then
  ${SUDO:-$( [ "$(id -u)" -eq 0 ] || echo sudo )} apt-get install -y k6 >&2
  found "$(command -v k6)"
fi
if command -v dnf >/dev/null 2>&1 && dnf info k6 >/dev/null 2>&1; then
  ${SUDO:-$( [ "$(id -u)" -eq 0 ] || echo sudo )} dnf install -y k6 >&2
  found "$(command -v k6)"
fi
cat >&2 <<MSG
k6 is not installed and none of the ways this script knows is available here.
Install Go 1.25+ (https://go.dev/dl/) and run this script again, or install k6 by the
instructions for your platform: https://grafana.com/docs/k6/latest/set-up/install-k6/
MSG
exit 1
