#!/usr/bin/env bash
# Installs Debian/Ubuntu's Chromium when no Chromium or Chrome is found, for the status page check
# (`npm run check:status-page`, scripts/check-status-page.ts), which drives it headless through
# puppeteer-core. Idempotent: with a browser present it only prints its version.
# The lookup is the same as the check's: $CHROMIUM_BIN, then `chromium`, `chromium-browser`,
# `google-chrome` on PATH, then /usr/bin/chromium.
set -euo pipefail

chromium_bin() {
  if [ -n "${CHROMIUM_BIN:-}" ] && [ -x "$CHROMIUM_BIN" ]; then echo "$CHROMIUM_BIN"; return 0; fi
  local name
  for name in chromium chromium-browser google-chrome; do
    if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return 0; fi
  done
  if [ -x /usr/bin/chromium ]; then echo /usr/bin/chromium; return 0; fi
  return 1
}

report() {
  # Ubuntu's `chromium-browser` may be a snap wrapper that prints nothing useful without snapd:
  # still say where the binary is.
  local version
  version="$("$1" --version 2>/dev/null | head -n1)" || true
  echo "${version:-a Chromium (version unknown)} at $1"
  exit 0
}

if [ -n "${CHROMIUM_BIN:-}" ] && [ ! -x "$CHROMIUM_BIN" ]; then
  echo "CHROMIUM_BIN=$CHROMIUM_BIN is not an executable file; looking elsewhere." >&2
fi
if bin="$(chromium_bin)"; then report "$bin"; fi

# Debian names the package `chromium`; Ubuntu's `chromium-browser` is a transitional package for the
# snap, which does not work in most containers, so it is only a last resort.
source "$(dirname "$0")/lib/apt.sh"
apt_install_first Chromium chromium chromium-browser

if bin="$(chromium_bin)"; then report "$bin"; fi
echo "apt-get installed $pkg but no Chromium binary was found (looked on PATH and at /usr/bin/chromium)." >&2
exit 1
